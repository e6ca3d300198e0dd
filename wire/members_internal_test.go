package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzMembers: the one-pass reading of an object gives what decoding it
// into a map of json.RawMessage gave (the reading it replaced), member for
// member, with the same error for a body that is not valid JSON; and the
// fast readings of plain strings, booleans and arrays of strings give what
// encoding/json gives, or step aside. The seeds are every decoder's fuzz
// corpus, and bodies with white space, escapes, nulls and nesting.
func FuzzMembers(f *testing.F) {
	for _, seed := range []string{
		`{"v":1,"id":"a","gpus":1,"command":["python","x"]}`,
		" {\n\t\"v\" : 1 ,\r\n \"id\" : \"a b\" , \"hold\" : true , \"x\" : null } ",
		`{"v":1,"id":"\u0061\"b","command":["a\\b", "c" , "d"],"env":{"K":"v","L":"\n"}}`,
		`{"v":1,"a":{"b":[1,{"c":"}"}],"d":"]"},"e":[],"f":[ ],"g":[null,"x"],"h":[1,2]}`,
		`{"v":1,"n":-1.5e3,"t":false,"s":"","k\u00e9y":"\u00e9"}`,
		`{"v":1,"id":"a"`, `{"v":1,,}`, `{}`, `{"v":"1"}`, `[1,2]`, `"x"`, `{"a":1}x`,
		`{"v":1,"id":"a","id":"b"}`, `{"v":1,"s":"\ud800"}`,
	} {
		f.Add([]byte(seed))
	}
	dirs, _ := filepath.Glob("testdata/fuzz/*")
	for _, dir := range dirs {
		files, _ := os.ReadDir(dir)
		for _, e := range files {
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			for _, line := range strings.Split(string(data), "\n")[1:] {
				if v, ok := strings.CutPrefix(line, "[]byte("); ok {
					if s, err := strconv.Unquote(strings.TrimSuffix(v, ")")); err == nil {
						f.Add([]byte(s))
					}
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		trimmed := bytes.TrimSpace(data)
		if len(data) > MaxMessageBytes || len(trimmed) == 0 || trimmed[0] != '{' {
			return // refused before the object is read, as before
		}
		var want map[string]json.RawMessage
		uerr := json.Unmarshal(trimmed, &want)
		_, err := object(data)
		if uerr != nil {
			if w := "message is not valid JSON: " + uerr.Error(); err == nil || err.Error() != w {
				t.Fatalf("object(%q): error %v, want %s", data, err, w)
			}
			return
		}
		if err != nil && strings.HasPrefix(err.Error(), "message is not valid JSON") {
			t.Fatalf("object(%q): %v, but encoding/json reads it", data, err)
		}
		if strict(trimmed) != nil {
			return // refused for what it is, as before
		}
		mems := members(nil, trimmed)
		got := map[string]json.RawMessage{}
		for _, mem := range mems {
			got[string(mem.key)] = mem.raw
		}
		if len(got) != len(mems) || !reflect.DeepEqual(got, want) {
			t.Fatalf("members(%q) = %q, encoding/json %q", data, mems, want)
		}
		for _, r := range want {
			checkPlain(t, r)
			var inner []json.RawMessage // the elements of an array too
			if json.Unmarshal(r, &inner) == nil {
				for _, e := range inner {
					checkPlain(t, e)
				}
			}
		}
	})
}

// checkPlain compares the fast readings of r with encoding/json's.
func checkPlain(t *testing.T, r json.RawMessage) {
	t.Helper()
	if s, ok := plainString(r); ok {
		var want string
		if err := json.Unmarshal(r, &want); err != nil || s != want {
			t.Fatalf("plainString(%q) = %q, encoding/json %q, %v", r, s, want, err)
		}
	}
	if s, ok := plainStrings(r); ok {
		var want []string
		if err := json.Unmarshal(r, &want); err != nil || !reflect.DeepEqual(s, want) {
			t.Fatalf("plainStrings(%q) = %#v, encoding/json %#v, %v", r, s, want, err)
		}
	}
	f := &fields{members: []member{{key: []byte("b"), raw: r}}}
	got := f.bool("b")
	var want bool
	werr := json.Unmarshal(r, &want)
	if got != want || (werr == nil) != (len(f.errs) == 0) {
		t.Fatalf("bool(%q) = %v, %v; encoding/json %v, %v", r, got, f.errs, want, werr)
	}
}
