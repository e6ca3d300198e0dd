package wire

import (
	"encoding/json"
	"strconv"
	"time"
)

// Hand-written encoders for the effects the fold sends most (a job's
// events and the journal's entries, several per job): the same bytes as
// encoding/json, without its reflection. Each appends exactly what
// json.Marshal would; a value they do not handle the same way (a time
// outside the years 0–9999 or zone offsets under a day, which json.Marshal
// refuses) goes to
// json.Marshal, and a string with any byte json escapes is escaped by
// it. effect_json_test.go holds them to it.

// marshalJobEvent is json.Marshal(e).
func marshalJobEvent(e JobEvent) ([]byte, error) {
	if !plainTime(e.Time) {
		return json.Marshal(e)
	}
	b := make([]byte, 0, 256+len(e.Message))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = appendStringField(b, `,"type":`, string(e.Type))
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = appendTimeField(b, `,"time":`, e.Time)
	b = appendStringField(b, `,"job":`, e.Job)
	b = appendStringField(b, `,"account":`, e.Account)
	if e.State != "" {
		b = appendStringField(b, `,"state":`, string(e.State))
	}
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(e.Attempt), 10)
	b = appendStringField(b, `,"host":`, e.Host)
	if len(e.Devices) > 0 {
		b = append(b, `,"devices":[`...)
		for i, d := range e.Devices {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, d)
		}
		b = append(b, ']')
	}
	b = appendStringField(b, `,"reason":`, string(e.Reason))
	b = appendStringField(b, `,"message":`, e.Message)
	b = appendIntField(b, `,"charged":`, int64(e.Charged))
	b = appendIntField(b, `,"balance":`, int64(e.Balance))
	b = appendIntField(b, `,"available":`, int64(e.Available))
	if e.ExitCode != nil {
		b = appendIntField(b, `,"exit_code":`, int64(*e.ExitCode))
	}
	return append(b, '}'), nil
}

// marshalJournalEntry is json.Marshal(e).
func marshalJournalEntry(e JournalEntry) ([]byte, error) {
	if !plainTime(e.Time) {
		return json.Marshal(e)
	}
	b := make([]byte, 0, 320)
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(e.V), 10)
	b = appendStringField(b, `,"kind":`, string(e.Kind))
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = appendTimeField(b, `,"time":`, e.Time)
	b = appendStringField(b, `,"account":`, e.Account)
	if e.Job != "" {
		b = appendStringField(b, `,"job":`, e.Job)
	}
	if e.OpID != "" {
		b = appendStringField(b, `,"op_id":`, e.OpID)
	}
	b = appendIntField(b, `,"amount":`, int64(e.Amount))
	if e.Reservation != 0 {
		b = appendIntField(b, `,"reservation":`, int64(e.Reservation))
	}
	if e.Released != 0 {
		b = appendIntField(b, `,"released":`, int64(e.Released))
	}
	b = appendIntField(b, `,"balance":`, int64(e.Balance))
	b = appendIntField(b, `,"reserved":`, int64(e.Reserved))
	if e.Reason != "" {
		b = appendStringField(b, `,"reason":`, string(e.Reason))
	}
	if e.N != 0 {
		b = append(b, `,"n":`...)
		b = strconv.AppendUint(b, e.N, 10)
	}
	if e.Prev != "" {
		b = appendStringField(b, `,"prev":`, e.Prev)
	}
	if e.Hash != "" {
		b = appendStringField(b, `,"hash":`, e.Hash)
	}
	return append(b, '}'), nil
}

// plainTime says t encodes as time.RFC3339Nano does: json.Marshal refuses
// a year outside 0–9999 and a zone 24 hours or more from UTC.
func plainTime(t time.Time) bool {
	_, off := t.Zone()
	y := t.Year()
	return y >= 0 && y <= 9999 && off > -24*3600 && off < 24*3600
}

func appendTimeField(b []byte, name string, t time.Time) []byte {
	b = append(b, name...)
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}

func appendIntField(b []byte, name string, v int64) []byte {
	b = append(b, name...)
	return strconv.AppendInt(b, v, 10)
}

func appendStringField(b []byte, name, s string) []byte {
	b = append(b, name...)
	return appendString(b, s)
}

// appendString appends s as json.Marshal quotes it: as it is where no byte
// needs escaping (printable ASCII but for ", \, and the <, >, & that
// json.Marshal escapes for HTML), otherwise by json.Marshal itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil {
				panic(err) // json.Marshal encodes every string
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
