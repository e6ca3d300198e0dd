package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Sizes. Every record the fold writes (an account, a job, the price table)
// and every effect it sends must fit what the store and the streams accept:
// 1 MiB per message by default, headers and subject included. The free-form
// fields of a command are therefore bounded by the size of their JSON
// encoding as encoding/json writes it, where one input byte can take six
// bytes: '<', '>', '&' and control characters other than \b \f \n \r \t
// become \u00XX, an invalid UTF-8 byte becomes \ufffd (which is why the
// ledger refuses invalid UTF-8 outright), U+2028 and U+2029 become \u2028
// and \u2029, '"' and '\' take two bytes. [EncodedLen] computes that size.
//
// With every limit of a command at its worst, a job record stays under
// 340 KiB: command 128 KiB, env 64 KiB, a workdir of 6 × [MaxWorkdirBytes],
// a name and a GPU model of 6 × 128 bytes each, 256 devices of 128 bytes that need
// no escaping, [MaxRecordedAttempts] attempts with messages of at most
// [MaxMessageBytes], a model of at most 6 × [MaxModelBytes]. Apply checks
// each record and effect against [MaxRecordBytes] as well and refuses a
// command that would pass it (see [State.Apply]), so no single command can
// produce a record the store refuses, whatever the limits.
const (
	// MaxRecordBytes bounds the JSON encoding of every record and effect
	// the fold produces: half the 1 MiB a NATS server accepts by default,
	// which leaves room for headers, the subject and the wire's fields.
	MaxRecordBytes = 512 << 10
	// MaxMessageBytes bounds the JSON encoding of the human message of an
	// event, a job or an attempt, quotes included. A longer message is cut
	// on a character boundary and ends in "…".
	MaxMessageBytes = 2 << 10
	// MaxIDBytes bounds an account, job, op or host id; ids are at most
	// this many bytes and need no JSON escaping (the wire allows only
	// [A-Za-z0-9_-]).
	MaxIDBytes = 64
	// MaxRecordedAttempts is the most attempts a job records: every
	// attempt it may spend, every busy refusal, and the one that ends it.
	MaxRecordedAttempts = MaxMaxAttempts + MaxBusyRefusals + 1
)

// ErrTooLarge is wrapped by every validation error about a field, or a
// record, that is larger than the ledger allows. Commands refused for it
// carry [ReasonTooLarge].
var ErrTooLarge = errors.New("too large")

// tooLarge returns a validation error wrapping ErrTooLarge.
func tooLarge(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrTooLarge, fmt.Sprintf(format, args...))
}

// ReasonFor returns the reason a command refused by Validate with err
// carries: [ReasonTooLarge] if any of its problems is a size, else
// [ReasonInvalid].
func ReasonFor(err error) Reason {
	if errors.Is(err, ErrTooLarge) {
		return ReasonTooLarge
	}
	return ReasonInvalid
}

// EncodedLen returns the length of the JSON encoding of s as encoding/json
// writes it, quotes included.
func EncodedLen(s string) int {
	n := 2
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// encodedStringsLen is the length of the JSON encoding of ss as an array.
func encodedStringsLen(ss []string) int {
	n := 2 + max(len(ss)-1, 0) // brackets and commas
	for _, s := range ss {
		n += EncodedLen(s)
	}
	return n
}

// encodedMapLen is the length of the JSON encoding of m as an object.
func encodedMapLen(m map[string]string) int {
	n := 2 + max(len(m)-1, 0) // braces and commas
	for k, v := range m {
		n += EncodedLen(k) + 1 + EncodedLen(v)
	}
	return n
}

// plain reports whether s is valid UTF-8 that JSON stores as is.
func plain(s string) bool { return EncodedLen(s) == len(s)+2 }

// checkID reports whether id, the what of a command, is present, at most
// MaxIDBytes and needs no escaping.
func checkID(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s is empty", what)
	case len(id) > MaxIDBytes:
		return tooLarge("%s is %d bytes, more than %d", what, len(id), MaxIDBytes)
	case !plain(id):
		return fmt.Errorf("%s %s has a character an id may not have (want letters, digits, '_' and '-')", what, preview(id))
	}
	return nil
}

// checkText reports whether s, the what of a command, is valid UTF-8
// without NUL bytes and at most max bytes.
func checkText(what, s string, max int) error {
	switch {
	case len(s) > max:
		return tooLarge("%s is %d bytes, more than %d", what, len(s), max)
	case !utf8.ValidString(s):
		return fmt.Errorf("%s is not valid UTF-8 (at byte %d)", what, invalidAt(s))
	}
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return fmt.Errorf("%s contains a NUL byte", what)
		}
	}
	return nil
}

// invalidAt is the offset of the first byte of s that is not valid UTF-8.
func invalidAt(s string) int {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return i
		}
		i += size
	}
	return -1
}

// previewBytes bounds what a message quotes of a value it names.
const previewBytes = 40

// preview quotes the start of s for a message: at most previewBytes of it,
// cut on a character boundary, followed by "…" if cut.
func preview(s string) string {
	if len(s) <= previewBytes {
		return fmt.Sprintf("%q", s)
	}
	cut := previewBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", s[:cut])
}

// clip cuts msg so its JSON encoding is at most MaxMessageBytes, on a
// character boundary, marking the cut with "…". Invalid UTF-8 (which only a
// decoder's message quoting a bad body could carry) is replaced first.
func clip(msg string) string {
	if len(msg)+2 <= MaxMessageBytes/6 || EncodedLen(msg) <= MaxMessageBytes {
		return msg
	}
	if !utf8.ValidString(msg) {
		msg = toValid(msg)
	}
	const mark = "…"
	budget := MaxMessageBytes - 2 - len(mark)
	n, cut := 0, 0
	for i, r := range msg {
		w := EncodedLen(string(r)) - 2
		if n+w > budget {
			break
		}
		n += w
		cut = i + utf8.RuneLen(r)
	}
	return msg[:cut] + mark
}

func toValid(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return string(b)
}

// encodedSize is the length of v's JSON encoding; a value that cannot be
// encoded counts as too large.
func encodedSize(v any) int {
	if n := roughSize(v); n >= 0 {
		return n
	}
	return marshalledSize(v)
}

// fits reports whether v's JSON encoding is at most limit, encoding it
// only when a quick upper bound does not already show it.
func fits(v any, limit int) bool {
	if n := roughSize(v); n >= 0 && n <= limit {
		return true
	}
	return marshalledSize(v) <= limit
}

// Bounds of roughSize: a record's fields other than its strings and lists
// (names, numbers, times, booleans) take at most fixedBytes, and each
// element of a list fixedElem besides its strings.
const (
	fixedBytes = 4096
	fixedElem  = 512
)

// roughSize returns an upper bound of the JSON encoding of a record or an
// effect, with every string at its worst (six bytes a byte), or -1 for a
// type it does not know. It allocates nothing.
func roughSize(v any) int {
	str := func(s string) int { return 6*len(s) + 3 }
	strs := func(ss []string) int {
		n := 0
		for _, s := range ss {
			n += str(s)
		}
		return n
	}
	env := func(m map[string]string) int {
		n := 0
		for k, v := range m {
			n += str(k) + str(v)
		}
		return n
	}
	switch v := v.(type) {
	case *Job:
		n := fixedBytes + str(v.ID) + str(v.Account) + strs(v.Command) + env(v.Env()) + str(v.Host()) + strs(v.Devices()) +
			str(v.Model()) + str(string(v.Reason())) + str(v.Message()) +
			str(v.Name()) +
			str(v.GPUModel()) +
			str(v.Workdir()) + str(v.ArrayID()) + strs(v.After()) + strs(v.AfterAny()) + strs(v.WaitingOn())
		for _, a := range v.Attempts() {
			n += fixedElem + str(a.Host) + str(string(a.Reason)) + str(a.Message)
		}
		return n
	case *Account:
		n := fixedBytes + str(v.ID) + strs(v.HeldJobs)
		for _, op := range v.RecentOps {
			n += fixedElem + str(op.Account) + str(op.ID) + str(string(op.Op))
		}
		return n
	case JobEvent:
		return fixedBytes + str(v.Job) + str(v.Account) + str(v.Host) + strs(v.Devices) + str(string(v.Reason)) + str(v.Message)
	case AccountEvent:
		return fixedBytes + str(v.Account) + str(v.OpID) + str(string(v.Op)) + str(string(v.Reason)) + str(v.Message)
	case ConfigEvent:
		return fixedBytes + str(v.OpID) + str(string(v.Reason)) + str(v.Message)
	case InvalidEvent:
		return fixedBytes + str(v.Account) + str(v.Job) + str(string(v.Reason)) + str(v.Message)
	case Entry:
		return fixedBytes + str(v.Account) + str(v.Job) + str(v.OpID) + str(string(v.Reason))
	case DispatchOrder:
		return fixedBytes + str(v.Host) + str(v.Job) + str(v.Account) + strs(v.Command) + env(v.Env) +
			str(v.Workdir) + str(v.ArrayID)
	case CancelOrder:
		return fixedBytes + str(v.Host) + str(v.Job) + str(v.Account)
	}
	return -1
}

func marshalledSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return MaxRecordBytes + 1
	}
	return len(data)
}
