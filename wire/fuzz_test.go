// Fuzz targets, one per decoder. Each checks that the decoder never panics,
// that what it accepts is valid, and that encoding what it accepted and
// decoding again gives the same value. The seed corpus lives under
// testdata/fuzz/<target>/; plain `go test` runs every seed, and
// `go test -fuzz=FuzzDecodeSubmit ./wire` explores from them.
package wire_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// roundTrip checks that a decoded command is valid, and that encoding it
// and decoding again gives the same command.
func roundTrip(t *testing.T, c ledger.Command) {
	t.Helper()
	v, ok := c.(interface{ Validate() error })
	if !ok {
		t.Fatalf("decoded a %T, which has no Validate method", c)
	}
	if err := v.Validate(); err != nil {
		t.Fatalf("accepted an invalid %T %+v: %v", c, c, err)
	}
	msg, err := wire.EncodeCommand(n, c)
	if err != nil {
		t.Fatalf("decoded %+v but cannot encode it: %v", c, err)
	}
	again, err := wire.DecodeCommand(n, msg.Subject, msg.Data)
	if err != nil {
		t.Fatalf("decoded %+v, encoded %s, which does not decode: %v", c, msg.Data, err)
	}
	if s, ok := c.(ledger.Submit); ok {
		c = s.WithDefaults()
		again = again.(ledger.Submit).WithDefaults()
	}
	if !reflect.DeepEqual(again, c) {
		t.Fatalf("round trip changed %+v into %+v", c, again)
	}
}

// fuzzCommand fuzzes the decoder of one command type: whatever it accepts
// must survive a round trip.
func fuzzCommand[C ledger.Command](f *testing.F, decode func([]byte) (C, error)) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := decode(data); err == nil {
			roundTrip(t, c)
		}
	})
}

func FuzzDecodeSubmit(f *testing.F) {
	fuzzCommand(f, func(data []byte) (ledger.Submit, error) { return wire.DecodeSubmit("acct", data) })
}

func FuzzDecodeCancel(f *testing.F) {
	fuzzCommand(f, func(data []byte) (ledger.Cancel, error) { return wire.DecodeCancel("acct", data) })
}

func FuzzDecodeAdmin(f *testing.F) {
	fuzzCommand(f, func(data []byte) (ledger.Admin, error) { return wire.DecodeAdmin("acct", data) })
}

func FuzzDecodeReport(f *testing.F) {
	fuzzCommand(f, func(data []byte) (ledger.Report, error) { return wire.DecodeReport("host-1", data) })
}

func FuzzDecodeDispatch(f *testing.F) { fuzzCommand(f, wire.DecodeDispatch) }

func FuzzDecodeLost(f *testing.F) { fuzzCommand(f, wire.DecodeLost) }

func FuzzDecodeUnplaceable(f *testing.F) { fuzzCommand(f, wire.DecodeUnplaceable) }

func FuzzDecodeHeartbeat(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if h, err := wire.DecodeHeartbeat(data); err == nil {
			if h.Capacity() < 0 || h.Capacity() > len(h.Devices) {
				t.Fatalf("capacity %d of %d devices", h.Capacity(), len(h.Devices))
			}
			if _, err := wire.EncodeHeartbeat(h); err != nil {
				t.Fatalf("decoded %+v but cannot encode it: %v", h, err)
			}
		}
	})
}

func FuzzDecodeLogChunk(f *testing.F) {
	f.Fuzz(func(t *testing.T, attempt, seq, stream, end string, data []byte) {
		h := map[string]string{subjects.LogAttemptHeader: attempt, subjects.LogSeqHeader: seq,
			subjects.LogStreamHeader: stream, subjects.LogEndHeader: end}
		c, err := wire.DecodeLogChunk(n, n.Log("acct", "job-1", "host-1"), func(k string) string { return h[k] }, data)
		if err != nil {
			return
		}
		msg, err := wire.EncodeLogChunk(n, c)
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", c, err)
		}
		again, err := wire.DecodeLogChunk(n, msg.Subject, func(k string) string { return msg.Header[k] }, msg.Data)
		if err != nil || again.Account != "acct" || again.Job != "job-1" || again.Host != "host-1" || again.Attempt != c.Attempt || again.Seq != c.Seq || again.Stream != c.Stream || again.End != c.End {
			t.Fatalf("round trip of %+v gave %+v, %v", c, again, err)
		}
	})
}

func FuzzDecodePricing(f *testing.F) { fuzzCommand(f, wire.DecodePricing) }

func FuzzDecodeAdmit(f *testing.F) { fuzzCommand(f, wire.DecodeAdmit) }

func FuzzDecodeConfigEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := wire.DecodeConfigEvent(data); err == nil {
			reencode(t, e, wire.DecodeConfigEvent)
		}
	})
}

// FuzzDecodeCommand fuzzes the subject too: whatever arrives on the command
// stream either decodes to a valid command or yields a DecodeError whose
// invalid-command stand-in can be published.
func FuzzDecodeCommand(f *testing.F) {
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		c, err := wire.DecodeCommand(n, subject, data)
		if err != nil {
			de, ok := err.(*wire.DecodeError)
			if !ok {
				t.Fatalf("error %T is not a *DecodeError: %v", err, err)
			}
			inv := de.Command()
			if inv.Reason == "" || inv.Message == "" {
				t.Fatalf("DecodeError %+v has no reason or message", de)
			}
			if _, err := wire.EncodeEffect(n, 1, time.Unix(0, 0), 0, ledger.InvalidEvent{Account: inv.Account, Job: de.Job, Reason: inv.Reason, Message: inv.Message}); err != nil {
				t.Fatalf("cannot publish the rejection of %q: %v", subject, err)
			}
			return
		}
		roundTrip(t, c)
	})
}

// reencode checks that a decoded outbound message survives JSON again.
func reencode[T any](t *testing.T, v T, decode func([]byte) (T, error)) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("cannot encode decoded %+v: %v", v, err)
	}
	again, err := decode(data)
	if err != nil {
		t.Fatalf("decoded %+v, encoded %s, which does not decode: %v", v, data, err)
	}
	if !reflect.DeepEqual(again, v) {
		t.Fatalf("round trip changed %+v into %+v", v, again)
	}
}

func FuzzDecodeJobEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := wire.DecodeJobEvent(data); err == nil {
			if !subjects.ValidToken(e.Job) || !subjects.ValidToken(e.Account) {
				t.Fatalf("accepted bad tokens in %+v", e)
			}
			reencode(t, e, wire.DecodeJobEvent)
		}
	})
}

func FuzzDecodeAccountEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := wire.DecodeAccountEvent(data); err == nil {
			reencode(t, e, wire.DecodeAccountEvent)
		}
	})
}

func FuzzDecodeInvalidEvent(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := wire.DecodeInvalidEvent(data); err == nil {
			reencode(t, e, wire.DecodeInvalidEvent)
		}
	})
}

func FuzzDecodeJournalEntry(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if e, err := wire.DecodeJournalEntry(data); err == nil {
			reencode(t, e, wire.DecodeJournalEntry)
		}
	})
}

func FuzzDecodeOrder(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		o, seq, err := wire.DecodeOrder("host-1", data)
		if err != nil {
			return
		}
		msg, err := wire.EncodeEffect(n, seq, time.Unix(0, 0), 0, o)
		if err != nil {
			t.Fatalf("cannot encode decoded order %+v: %v", o, err)
		}
		again, seq2, err := wire.DecodeOrder("host-1", msg.Data)
		if err != nil || seq2 != seq || !reflect.DeepEqual(again, o) {
			t.Fatalf("round trip of %+v gave %+v (seq %d→%d), %v", o, again, seq, seq2, err)
		}
	})
}
