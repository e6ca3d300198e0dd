// The hand-written encoders of job events and journal entries against
// encoding/json: for every value, the same bytes (or the same refusal). The
// table covers each optional field present and absent, strings that need
// escaping (quotes, backslashes, HTML characters, control characters,
// invalid UTF-8, U+2028), extreme integers, and times at and past the
// years json.Marshal accepts and in other zones; the fuzz target draws the
// rest.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

var jsonParityStrings = []string{"", "train-42", `a"b`, `a\b`, "<script>&", "a<b", "x>y", "p&q", "tab\there", "nl\n", "\x00\x1f\x7f",
	"caf\xc3\xa9", "bad\xff\xfeutf8", "line\u2028sep\u2029", "GPU-0b7f3c1e-aaaa-bbbb-cccc-1234567890ab"}

func jsonParityTimes() []time.Time {
	return []time.Time{
		time.Date(2026, 12, 2, 18, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 2, 18, 0, 0, 123456789, time.UTC),
		time.Date(2026, 12, 2, 18, 0, 0, 120000000, time.UTC),
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2026, 1, 1, 0, 0, 0, 5, time.FixedZone("x", 5*3600+30*60)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("far", 24*3600)),
		time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("sec", -(3*3600+7))),
		{},
	}
}

func checkJSONParity(t *testing.T, what string, v any, got []byte, gotErr error) {
	t.Helper()
	want, wantErr := json.Marshal(v)
	if (gotErr != nil) != (wantErr != nil) {
		t.Fatalf("%s %+v: error %v, json.Marshal's %v", what, v, gotErr, wantErr)
	}
	if gotErr == nil && !bytes.Equal(got, want) {
		t.Fatalf("%s %+v:\n got %s\nwant %s", what, v, got, want)
	}
}

func TestEffectJSONParity(t *testing.T) {
	code := -7
	zero := 0
	for _, tm := range jsonParityTimes() {
		for i, s := range jsonParityStrings {
			other := jsonParityStrings[(i+5)%len(jsonParityStrings)]
			for _, full := range []bool{false, true} {
				e := JobEvent{V: Version, Type: ledger.EventType(s), Seq: uint64(i), Time: tm, Job: other, Account: s,
					Attempt: i - 3, Host: other, Reason: ledger.Reason(s), Message: other + s,
					Charged: math.MinInt64, Balance: math.MaxInt64, Available: ledger.Credits(i)}
				j := JournalEntry{V: Version, Kind: ledger.EntryKind(s), Seq: math.MaxUint64, Time: tm, Account: other,
					Amount: ledger.Credits(-i), Balance: 1000, Reserved: math.MaxInt64}
				if full {
					e.State, e.Devices, e.ExitCode = ledger.JobState(other), []string{s, other}, &code
					if i%2 == 0 {
						e.Devices, e.ExitCode = []string{}, &zero
					}
					j.Job, j.OpID, j.Reservation, j.Released, j.Reason = s, other, 120, -3, ledger.Reason(other)
					j.N, j.Prev, j.Hash = uint64(i+1), s, other
				}
				got, err := marshalJobEvent(e)
				checkJSONParity(t, "job event", e, got, err)
				got, err = marshalJournalEntry(j)
				checkJSONParity(t, "journal entry", j, got, err)
			}
		}
	}
}

func FuzzEffectJSON(f *testing.F) {
	f.Add("accepted", "train-42", "vision", "h1", "GPU-1", "ok", int64(1000), int64(7), uint64(12), int64(1764698400123456789), true)
	f.Add("reserve", "<a&b>", "\"q\"", "\\", "\x01", "bad\xff", int64(-1), int64(0), uint64(0), int64(0), false)
	f.Fuzz(func(t *testing.T, typ, job, account, host, device, message string, amount, n int64, seq uint64, unixNano int64, full bool) {
		tm := time.Unix(0, unixNano).UTC()
		e := JobEvent{V: Version, Type: ledger.EventType(typ), Seq: seq, Time: tm, Job: job, Account: account,
			Attempt: int(n), Host: host, Reason: ledger.Reason(message), Message: message,
			Charged: ledger.Credits(amount), Balance: ledger.Credits(n), Available: ledger.Credits(amount - n)}
		j := JournalEntry{V: Version, Kind: ledger.EntryKind(typ), Seq: seq, Time: tm, Account: account,
			Amount: ledger.Credits(amount), Balance: ledger.Credits(n), Reserved: ledger.Credits(amount)}
		if full {
			code := int(n)
			e.State, e.Devices, e.ExitCode = ledger.JobState(typ), []string{device, host}, &code
			j.Job, j.OpID, j.Reservation, j.Released, j.Reason = job, host, ledger.Credits(n), ledger.Credits(amount), ledger.Reason(message)
			j.N, j.Prev, j.Hash = seq, device, message
		}
		got, err := marshalJobEvent(e)
		checkJSONParity(t, "job event", e, got, err)
		got, err = marshalJournalEntry(j)
		checkJSONParity(t, "journal entry", j, got, err)
	})
}

// BenchmarkEncodeEffect encodes a submission's effects (its accepted event
// and its journal entry) with the hand-written encoders and, for the
// comparison in one run, with encoding/json.
func BenchmarkEncodeEffect(b *testing.B) {
	at := time.Date(2026, 12, 2, 18, 0, 0, 123456789, time.UTC)
	e := JobEvent{V: Version, Type: ledger.EventAccepted, Seq: 123456, Time: at, Job: "job-12345", Account: "vision",
		State: ledger.StatePending, Attempt: 1, Charged: 0, Balance: 1000000, Available: 999880}
	j := JournalEntry{V: Version, Kind: "reserve", Seq: 123456, Time: at, Account: "vision", Job: "job-12345",
		Amount: 120, Balance: 1000000, Reserved: 120, N: 77, Prev: "9f86d081884c7d659a2feaa0c55ad015", Hash: "a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalJobEvent(e); err != nil {
				b.Fatal(err)
			}
			if _, err := marshalJournalEntry(j); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(e); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(j); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestEffectJSONCoversEveryField sets each field of JobEvent and
// JournalEntry alone, by reflection, and then all together, and holds the
// hand-written encoders to json.Marshal for each: a field added to either
// struct and not to its encoder fails here, whatever its name or type.
func TestEffectJSONCoversEveryField(t *testing.T) {
	at := time.Date(2026, 12, 3, 6, 0, 0, 42, time.UTC)
	check := func(t *testing.T, zero any, encode func(v any) ([]byte, error)) {
		typ := reflect.TypeOf(zero)
		all := reflect.New(typ).Elem()
		for i := range typ.NumField() {
			f := typ.Field(i)
			one := reflect.New(typ).Elem()
			setNonZero(t, one.Field(i), f, at, i)
			setNonZero(t, all.Field(i), f, at, i)
			got, err := encode(one.Interface())
			checkJSONParity(t, typ.Name()+" with only "+f.Name, one.Interface(), got, err)
		}
		got, err := encode(all.Interface())
		checkJSONParity(t, typ.Name()+" with every field", all.Interface(), got, err)
	}
	t.Run("JobEvent", func(t *testing.T) {
		check(t, JobEvent{}, func(v any) ([]byte, error) { return marshalJobEvent(v.(JobEvent)) })
	})
	t.Run("JournalEntry", func(t *testing.T) {
		check(t, JournalEntry{}, func(v any) ([]byte, error) { return marshalJournalEntry(v.(JournalEntry)) })
	})
}

// setNonZero gives v, field f of a struct, a value that json.Marshal
// writes (for an omitempty field too), different for each field i.
func setNonZero(t *testing.T, v reflect.Value, f reflect.StructField, at time.Time, i int) {
	t.Helper()
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(at.Add(time.Duration(i) * time.Second)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("%s-%d", strings.ToLower(f.Name), i))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(-100 - i))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(100 + i))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		setNonZero(t, p.Elem(), f, at, i)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		setNonZero(t, s.Index(0), f, at, i)
		setNonZero(t, s.Index(1), f, at, i+1000)
		v.Set(s)
	default:
		t.Fatalf("field %s is a %s, which this test cannot fill: teach setNonZero, and the encoder, its kind", f.Name, v.Type())
	}
}
