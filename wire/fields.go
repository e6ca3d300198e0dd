package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// fields reads a JSON object field by field, collecting every problem so one
// error can say everything that is wrong with a message. Unknown fields are
// ignored; a field set to null counts as missing.
type fields struct {
	members []member // the object's, each key once (strict refuses a repeat)
	errs    []error
	buf     [16]member // members' first backing array, allocated with fields
}

// member is one member of an object: its key, decoded, and its value as
// written.
type member struct {
	key []byte
	raw json.RawMessage
}

// object parses data as a v1 JSON object. It is strict where
// encoding/json is lenient: a body that is not valid UTF-8, that escapes
// half a surrogate pair (both of which encoding/json turns into U+FFFD), or
// that names a key twice in any object (where encoding/json keeps the last)
// is refused.
func object(data []byte) (*fields, error) {
	if len(data) > MaxMessageBytes {
		return nil, fmt.Errorf("%w: message is %d bytes, more than %d", ledger.ErrTooLarge, len(data), MaxMessageBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("message is empty; want a JSON object")
	}
	if trimmed[0] != '{' {
		return nil, fmt.Errorf("message is not a JSON object (it starts with %q)", preview(trimmed))
	}
	if !json.Valid(trimmed) {
		// encoding/json's words for what is wrong: decoding stops where
		// the validity check did.
		var m map[string]json.RawMessage
		err := json.Unmarshal(trimmed, &m)
		return nil, fmt.Errorf("message is not valid JSON: %v", err)
	}
	if err := strict(trimmed); err != nil {
		return nil, err
	}
	f := &fields{}
	f.members = members(f.buf[:0], trimmed)
	raw, ok := f.raw("v")
	if !ok {
		return nil, fmt.Errorf(`missing required field "v", the message version; this scheduler speaks v%d`, Version)
	}
	if v, err := strconv.ParseInt(string(raw), 10, 64); err != nil || v != Version {
		return nil, fmt.Errorf("unsupported version %s; this scheduler speaks v%d", preview(raw), Version)
	}
	return f, nil
}

// members appends to out the members of data, a valid JSON object, with
// their keys decoded and their values as written (what decoding the object
// into a map of json.RawMessage gives, one pass over the bytes and no map).
func members(out []member, data []byte) []member {
	i := skipSpace(data, 1) // past '{'
	for i < len(data) && data[i] == '"' {
		end := stringEnd(data, i)
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			_ = json.Unmarshal(data[i:end], &s) // valid JSON: a valid string
			key = []byte(s)
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // past ':'
		vend := valueEnd(data, i)
		out = append(out, member{key: key, raw: data[i:vend]})
		i = skipSpace(data, vend)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
		}
	}
	return out
}

// skipSpace is the index of the first byte of data at or after i that is
// not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// stringEnd is the index just past the JSON string that starts at i.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(data)
}

// valueEnd is the index just past the JSON value that starts at i, in
// valid JSON.
func valueEnd(data []byte, i int) int {
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = stringEnd(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// plainString is the string r, a valid JSON value, spells when it is a
// string without escapes: then its bytes are its text (strict has refused
// bytes that are not UTF-8, and valid JSON has no control characters in a
// string), as encoding/json would decode it.
func plainString(r json.RawMessage) (string, bool) {
	if len(r) < 2 || r[0] != '"' || bytes.IndexByte(r[1:len(r)-1], '\\') >= 0 {
		return "", false
	}
	return string(r[1 : len(r)-1]), true
}

// plainStrings is the array of strings r, a valid JSON value, spells when
// every element is a string without escapes, as encoding/json would decode
// it into a nil []string (an empty array gives an empty slice, not nil).
func plainStrings(r json.RawMessage) ([]string, bool) {
	if len(r) < 2 || r[0] != '[' {
		return nil, false
	}
	out := []string{}
	i := skipSpace(r, 1)
	for i < len(r) && r[i] != ']' {
		if r[i] != '"' {
			return nil, false // another kind of element: encoding/json says what
		}
		end := stringEnd(r, i)
		s, ok := plainString(r[i:end])
		if !ok {
			return nil, false
		}
		out = append(out, s)
		if i = skipSpace(r, end); i < len(r) && r[i] == ',' {
			i = skipSpace(r, i+1)
		}
	}
	return out, true
}

// strict reports the first way data, valid JSON, is one encoding/json would
// read other than as written: bytes that are not UTF-8, a \u escape of half
// a surrogate pair, or a key repeated in an object.
func strict(data []byte) error {
	if !utf8.Valid(data) {
		at := 0
		for at < len(data) {
			r, size := utf8.DecodeRune(data[at:])
			if r == utf8.RuneError && size == 1 {
				break
			}
			at += size
		}
		return fmt.Errorf("message is not valid UTF-8 (at byte %d)", at)
	}
	if err := surrogates(data); err != nil {
		return err
	}
	if bytes.IndexByte(data, '\\') < 0 {
		return uniqueKeys(data) // no escapes: each key reads as written
	}
	return uniqueKeysDecoded(data)
}

// uniqueKeysDecoded reports a key repeated in an object of data, valid
// JSON, comparing keys as encoding/json decodes them.
func uniqueKeysDecoded(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	// One set of keys per open object, nil for an array; expectKey is set
	// when the next string token of the innermost object is a key.
	var stack []map[string]bool
	expectKey := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("message is not valid JSON: %v", err)
		}
		inObject := len(stack) > 0 && stack[len(stack)-1] != nil
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, map[string]bool{})
				expectKey = true
				continue
			case '[':
				stack = append(stack, nil)
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			if inObject && expectKey {
				keys := stack[len(stack)-1]
				if keys[v] {
					return fmt.Errorf("key %s appears twice in an object; each key may appear once", previewString(v))
				}
				keys[v] = true
				expectKey = false
				continue
			}
		}
		// A value ended: the next string of the innermost object is a key.
		expectKey = len(stack) > 0 && stack[len(stack)-1] != nil
	}
}

// uniqueKeys reports a key repeated in an object of data, valid JSON
// without a backslash, so that every string ends at its next quote and
// reads as its bytes: the same answer as uniqueKeysDecoded, scanning the
// bytes once without a token per value.
func uniqueKeys(data []byte) error {
	// The keys of every open object, innermost last, in one slice: an
	// object's begin at its start, and go when it closes. An object past
	// maxListedKeys keys gets a set. Small bodies stay on the stack.
	type open struct {
		object bool
		start  int
		set    map[string]struct{}
	}
	const maxListedKeys = 16
	var stackBuf [8]open
	var keysBuf [32][]byte
	stack, keys := stackBuf[:0], keysBuf[:0]
	expectKey := false
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '{':
			stack = append(stack, open{object: true, start: len(keys)})
			expectKey = true
		case '[':
			stack = append(stack, open{})
			expectKey = false
		case '}', ']':
			if o := stack[len(stack)-1]; o.object {
				keys = keys[:o.start]
			}
			stack = stack[:len(stack)-1]
			expectKey = false
		case ',':
			expectKey = len(stack) > 0 && stack[len(stack)-1].object
		case '"':
			end := i + 1 + bytes.IndexByte(data[i+1:], '"')
			if expectKey {
				o, key := &stack[len(stack)-1], data[i+1:end]
				dup := false
				if o.set != nil {
					_, dup = o.set[string(key)]
					o.set[string(key)] = struct{}{}
				} else {
					for _, k := range keys[o.start:] {
						if bytes.Equal(k, key) {
							dup = true
							break
						}
					}
					if keys = append(keys, key); len(keys)-o.start > maxListedKeys {
						o.set = make(map[string]struct{}, 2*(len(keys)-o.start))
						for _, k := range keys[o.start:] {
							o.set[string(k)] = struct{}{}
						}
					}
				}
				if dup {
					return fmt.Errorf("key %s appears twice in an object; each key may appear once", previewString(string(key)))
				}
				expectKey = false
			}
			i = end
		}
	}
	return nil
}

// surrogates reports a \u escape in data, valid JSON, of a high surrogate
// not followed by an escaped low one, or of a low surrogate alone.
func surrogates(data []byte) error {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case !inString:
			inString = c == '"'
		case c == '"':
			inString = false
		case c == '\\':
			i++
			if data[i] != 'u' {
				continue
			}
			r := hex4(data[i+1 : i+5])
			i += 4
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return fmt.Errorf("message escapes a lone low surrogate \\u%04x; a string must be valid Unicode", r)
			case r >= 0xd800 && r <= 0xdbff:
				if i+6 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
					return fmt.Errorf("message escapes a lone high surrogate \\u%04x; a string must be valid Unicode", r)
				}
				if lo := hex4(data[i+3 : i+7]); lo < 0xdc00 || lo > 0xdfff {
					return fmt.Errorf("message escapes a high surrogate \\u%04x not followed by a low one; a string must be valid Unicode", r)
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads four hex digits, which valid JSON guarantees after \u.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c-'a') + 10
		case c >= 'A' && c <= 'F':
			r |= rune(c-'A') + 10
		}
	}
	return r
}

func previewString(s string) string {
	const n = 24
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

func preview(b []byte) string {
	const n = 24
	if len(b) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(b[cut]) {
			cut--
		}
		return string(b[:cut]) + "…"
	}
	return string(b)
}

func (f *fields) raw(name string) (json.RawMessage, bool) {
	for _, m := range f.members {
		if string(m.key) == name {
			if string(m.raw) == "null" {
				return nil, false
			}
			return m.raw, true
		}
	}
	return nil, false
}

func (f *fields) bad(format string, args ...any) {
	f.errs = append(f.errs, fmt.Errorf(format, args...))
}

// done returns what the decoder of what (a command from account, about
// job) found wrong: first every field problem, then, if there were none,
// what v's Validate method says, each as a [*DecodeError].
func (f *fields) done(account, job, what string, v interface{ Validate() error }) error {
	if err := f.err(); err != nil {
		return decodeError(account, job, what, err)
	}
	if err := v.Validate(); err != nil {
		return decodeError(account, job, what, err)
	}
	return nil
}

// err returns every problem found, joined with "; ", or nil.
func (f *fields) err() error {
	if len(f.errs) == 0 {
		return nil
	}
	msgs := make([]string, len(f.errs))
	for i, e := range f.errs {
		msgs[i] = e.Error()
	}
	return errors.New(strings.Join(msgs, "; "))
}

func (f *fields) missing(name string, required bool) {
	if required {
		f.bad("missing required field %q", name)
	}
}

func (f *fields) str(name string, required bool) string {
	r, ok := f.raw(name)
	if !ok {
		f.missing(name, required)
		return ""
	}
	if s, ok := plainString(r); ok {
		return s
	}
	var s string
	if err := json.Unmarshal(r, &s); err != nil {
		f.bad("%s: want a string, got %s", name, preview(r))
	}
	return s
}

// token reads a string field that must be a valid subject token.
func (f *fields) token(name, what string, required bool) string {
	if _, ok := f.raw(name); !ok {
		f.missing(name, required)
		return ""
	}
	n := len(f.errs)
	s := f.str(name, true)
	if len(f.errs) > n {
		return ""
	}
	if err := subjects.CheckToken(what, s); err != nil {
		f.bad("%s: %v", name, err)
		return ""
	}
	return s
}

func (f *fields) int64(name string, required bool) int64 {
	r, ok := f.raw(name)
	if !ok {
		f.missing(name, required)
		return 0
	}
	n, err := parseInt(r)
	if err != nil {
		f.bad("%s: %v", name, err)
	}
	return n
}

// parseInt parses a JSON value that must be an integer literal: not a
// string, a fraction or an exponent, and within 64 bits. Like
// [strconv.ParseInt], it returns the nearest int64 with an out-of-range
// error.
func parseInt(r json.RawMessage) (int64, error) {
	s := string(r)
	if s == "" || s[0] != '-' && (s[0] < '0' || s[0] > '9') {
		return 0, fmt.Errorf("want an integer, got %s", preview(r))
	}
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return n, fmt.Errorf("%s is out of range", preview(r))
	case err != nil:
		return n, fmt.Errorf("%s is not an integer", preview(r))
	}
	return n, nil
}

// int reads an integer field that must fit in 32 bits, so that no platform
// or JSON reader disagrees about it.
func (f *fields) int(name string, required bool) int {
	n := f.int64(name, required)
	if n > 1<<31-1 || n < -(1<<31) {
		f.bad("%s: %d is out of range", name, n)
		return 0
	}
	return int(n)
}

// bool reads an optional boolean field, false when absent.
func (f *fields) bool(name string) bool {
	r, ok := f.raw(name)
	if !ok {
		return false
	}
	switch string(r) {
	case "true":
		return true
	case "false":
		return false
	}
	var b bool
	if err := json.Unmarshal(r, &b); err != nil {
		f.bad("%s: want true or false, got %s", name, preview(r))
	}
	return b
}

func (f *fields) strs(name string, required bool) []string {
	r, ok := f.raw(name)
	if !ok {
		f.missing(name, required)
		return nil
	}
	if s, ok := plainStrings(r); ok {
		return s
	}
	var s []string
	if err := json.Unmarshal(r, &s); err != nil {
		f.bad("%s: want an array of strings, got %s", name, preview(r))
		return nil
	}
	return s
}

func (f *fields) strMap(name string) map[string]string {
	r, ok := f.raw(name)
	if !ok {
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal(r, &m); err != nil {
		f.bad("%s: want an object of string values, got %s", name, preview(r))
		return nil
	}
	if len(m) == 0 {
		return nil // an empty object and a missing one mean the same
	}
	return m
}

// duration reads a Go duration string ("90m", "2h", "1h30m").
func (f *fields) duration(name string, required bool) time.Duration {
	if _, ok := f.raw(name); !ok {
		f.missing(name, required)
		return 0
	}
	n := len(f.errs)
	s := f.str(name, true)
	if len(f.errs) > n {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		f.bad("%s: %q is not a duration; write it like \"90m\" or \"2h\"", name, s)
		return 0
	}
	if d <= 0 {
		f.bad("%s: %q is not positive", name, s)
		return 0
	}
	return d
}

// time reads an RFC 3339 time ("2026-12-01T09:00:00.5Z"), returned in UTC.
func (f *fields) time(name string, required bool) time.Time {
	if _, ok := f.raw(name); !ok {
		f.missing(name, required)
		return time.Time{}
	}
	n := len(f.errs)
	s := f.str(name, true)
	if len(f.errs) > n {
		return time.Time{}
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		f.bad("%s: %s is not an RFC 3339 time; write it like \"2026-12-01T09:00:00Z\"", name, previewString(s))
		return time.Time{}
	}
	return at.UTC()
}
