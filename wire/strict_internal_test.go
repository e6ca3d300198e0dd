// A differential test of the duplicate-key check: on JSON without
// escapes, the byte scanner (uniqueKeys) answers as the token reader
// (uniqueKeysDecoded) does, on hand-picked bodies and on random nested
// objects with and without repeated keys.
package wire

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestUniqueKeysAgreesWithTheDecoder(t *testing.T) {
	t.Parallel()
	bodies := []string{
		`{}`, `[]`, `{"a":1}`, `{"a":1,"a":2}`, `{"a":{"a":1},"b":[{"a":1,"a":2}]}`,
		`{"a":[1,2,{"b":"a","c":"a"}],"b":"{,}"}`,
		`{"k":"v" , "k" : "w"}`, ` { "x" : [ "x" , "x" ] , "y" : { } } `, `{"a":{},"b":{},"a":[]}`,
		`{"a":"b","b":"a"}`, `{"":1,"":2}`, `{"a":[{"b":1},{"b":1}]}`, `{"a":"}","a":1}`,
	}
	var many strings.Builder
	many.WriteString("{")
	for i := range 40 {
		fmt.Fprintf(&many, `"k%d":%d,`, i, i)
	}
	many.WriteString(`"k7":0}`)
	bodies = append(bodies, many.String(), strings.Replace(many.String(), `"k7":0}`, `"k40":0}`, 1))
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		bodies = append(bodies, randomObject(r, 3))
	}
	for _, b := range bodies {
		if !json.Valid([]byte(b)) {
			t.Fatalf("test body %s is not JSON", b)
		}
		fast, slow := uniqueKeys([]byte(b)), uniqueKeysDecoded([]byte(b))
		if fmt.Sprint(fast) != fmt.Sprint(slow) {
			t.Errorf("uniqueKeys(%s) = %v, uniqueKeysDecoded = %v", b, fast, slow)
		}
	}
}

// randomObject is a JSON object of a few keys drawn from a small set, so
// that some repeat, with values nested up to depth.
func randomObject(r *rand.Rand, depth int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range r.IntN(5) {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"%c":%s`, 'a'+r.IntN(4), randomValue(r, depth))
	}
	b.WriteString("}")
	return b.String()
}

func randomValue(r *rand.Rand, depth int) string {
	switch k := r.IntN(6); {
	case depth > 0 && k == 0:
		return randomObject(r, depth-1)
	case depth > 0 && k == 1:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, randomValue(r, depth-1))
		}
		return "[" + strings.Join(parts, ",") + "]"
	case k == 2:
		return fmt.Sprintf(`"%c"`, 'a'+r.IntN(4))
	case k == 3:
		return `"{[,:]}"`
	default:
		return fmt.Sprint(r.IntN(100))
	}
}
