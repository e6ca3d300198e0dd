package client

// decodeTailEvent's fast path against encoding/json: on every event the
// scheduler's encoder writes, and on forms it does not write, which fall
// back.

import (
	"bytes"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func jsonTailEvent(data []byte) (tailEvent, bool) {
	var ev tailEvent
	if json.Unmarshal(data, &ev) != nil {
		return tailEvent{}, false
	}
	return ev, true
}

func TestTailEventFastPathAgreesWithJSON(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 10, 0, 0, 123456789, time.UTC)
	var fast int
	for i, e := range []ledger.JobEvent{
		{Type: ledger.EventAccepted, Job: "job-1", Account: "vision"},
		{Type: ledger.EventHeld, Job: "j", Account: "a", Message: `with "quotes" and \ backslash`},
		{Type: ledger.EventSucceeded, Job: "job-2", Account: "nlp", Host: "h1", Devices: []string{"GPU-0"}},
		{Type: ledger.EventRejected, Job: "x", Account: "acct", Reason: ledger.Reason("insufficient_credits")},
	} {
		for _, seq := range []uint64{1, 9, 10, 1 << 40, 1<<64 - 1} {
			m, err := wire.EncodeEffect(subjects.Default, seq, at.Add(time.Duration(i)*time.Hour), 0, e)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := scanTailEvent(m.Data); ok {
				fast++
			}
			got, ok := decodeTailEvent(m.Data)
			want, wantOK := jsonTailEvent(m.Data)
			if ok != wantOK || got != want {
				t.Errorf("%s: decoded %+v (%v), encoding/json %+v (%v)", m.Data, got, ok, want, wantOK)
			}
		}
	}
	if fast == 0 {
		t.Error("the fast path read none of the scheduler's events")
	}
	for _, data := range []string{
		`{"v":1,"type":"accepted","seq":5,"time":"2026-12-02T10:00:00Z","job":"a\u0062","account":"x"}`,
		`{"v":1,"type":"accepted","seq":05,"time":"2026-12-02T10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"type":"accepted","seq":-5,"time":"2026-12-02T10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"type":"accepted","seq":5.0,"time":"2026-12-02T10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"type":"accepted","seq":5e1,"time":"2026-12-02T10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"type":"accepted","seq":18446744073709551616,"time":"2026-12-02T10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"type":"accepted","seq":5,"time":"2026-12-02 10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"seq":5,"type":"accepted","time":"2026-12-02T10:00:00Z","job":"ab","account":"x"}`,
		`{"v":1,"type":"accepted","seq":5,"time":"2026-12-02T10:00:00Z","job":"caf` + "\xc3\xa9" + `","account":"x"}`,
		`{"v":1,"type":"accepted","seq":5,"time":"2026-12-02T10:00:00Z","job":"bad` + "\xff" + `","account":"x"}`,
		`{"v":1,"type":"accepted","seq":5,"time":"2026-12-02T10:00:00Z","job":"ab"}`,
		`{"v":1}`,
		`not json`,
	} {
		got, ok := decodeTailEvent([]byte(data))
		want, wantOK := jsonTailEvent([]byte(data))
		if ok != wantOK || got != want {
			t.Errorf("%s: decoded %+v (%v), encoding/json %+v (%v)", data, got, ok, want, wantOK)
		}
	}
}

// FuzzTailEvent: wherever the fast path reads an event that encoding/json
// reads too, they agree, unless the object names one of the five keys
// twice (encoding/json keeps the last; no encoder of ours writes that).
func FuzzTailEvent(f *testing.F) {
	f.Add([]byte(`{"v":1,"type":"accepted","seq":5,"time":"2026-12-02T10:00:00Z","job":"ab","account":"x","state":"pending"}`))
	f.Add([]byte(`{"v":1,"type":"held","seq":0,"time":"2026-12-02T10:00:00.5+01:00","job":"","account":""}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanTailEvent(data)
		if !ok || !json.Valid(data) || repeatsKey(data) {
			return
		}
		if want, wantOK := jsonTailEvent(data); wantOK && got != want {
			t.Errorf("%s: fast path %+v, encoding/json %+v", data, got, want)
		}
	})
}

// repeatsKey reports whether the top-level object in data names a key
// twice.
func repeatsKey(data []byte) bool {
	d := json.NewDecoder(bytes.NewReader(data))
	if _, err := d.Token(); err != nil {
		return false
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		key, _ := tok.(string)
		if seen[key] {
			return true
		}
		seen[key] = true
		var skip json.RawMessage
		if err := d.Decode(&skip); err != nil && err != io.EOF {
			return false
		}
	}
	return false
}
