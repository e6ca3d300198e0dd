// Parity of the ledger's effects and their wire bodies. The ledger declares
// each effect (JobEvent, Entry, DispatchOrder, …) and the wire package
// declares its body again, copied field by field; this test fills every
// exported field of every effect type with a value of its own, encodes the
// effect and requires each field to appear in the body under its JSON name
// with that value (or, where the contract puts it in the subject, in the
// subject), and every key of the body to be a field or the envelope. A
// field added on one side and forgotten on the other fails here. Which
// effect types exist is read from the ledger's source (the types with an
// isEffect method), so a new one without a case here fails too.
package wire_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// effectWire says, per effect type, how its body departs from "every field
// under its snake_case name": fields the subject carries instead, and keys
// of the body that are the envelope rather than a field.
var effectWire = map[string]struct {
	effect    ledger.Effect
	inSubject []string // fields carried by the subject, not the body
	envelope  []string // body keys that are no field of the effect
}{
	"JobEvent":      {effect: ledger.JobEvent{}, envelope: []string{"v", "seq", "time"}},
	"AccountEvent":  {effect: ledger.AccountEvent{}, envelope: []string{"v", "seq", "time"}},
	"ConfigEvent":   {effect: ledger.ConfigEvent{}, envelope: []string{"v", "seq", "time"}},
	"InvalidEvent":  {effect: ledger.InvalidEvent{}, envelope: []string{"v", "seq", "time", "type"}}, // type: always "rejected"
	"Entry":         {effect: ledger.Entry{}, envelope: []string{"v"}},
	"DispatchOrder": {effect: ledger.DispatchOrder{}, inSubject: []string{"Host"}, envelope: []string{"v", "seq", "type"}},
	"CancelOrder":   {effect: ledger.CancelOrder{}, inSubject: []string{"Host"}, envelope: []string{"v", "seq", "type"}},
	"ArchivedJob":   {effect: ledger.ArchivedJob{}, envelope: []string{"v", "seq", "archived_at"}},
}

// The command's sequence and time, which Entry also carries as fields.
const paritySeq = 4242

var parityTime = time.Date(2026, 12, 1, 9, 30, 0, 123, time.UTC)

func TestEffectFieldsReachTheWire(t *testing.T) {
	t.Parallel()
	for _, kind := range effectKinds(t) {
		spec, ok := effectWire[kind]
		if !ok {
			t.Errorf("ledger.%s is an effect with no case here: add it to effectWire (and its body to wire.EncodeEffect)", kind)
			continue
		}
		e := filled(t, spec.effect)
		msg, err := wire.EncodeEffect(n, paritySeq, parityTime, 0, e)
		if err != nil {
			t.Errorf("EncodeEffect(%+v): %v", e, err)
			continue
		}
		var body map[string]json.RawMessage
		if err := json.Unmarshal(msg.Data, &body); err != nil {
			t.Errorf("%s body %s: %v", kind, msg.Data, err)
			continue
		}
		v := reflect.ValueOf(e)
		fields := map[string]bool{}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			key := snake(f.Name)
			fields[key] = true
			if slices.Contains(spec.inSubject, f.Name) {
				if s := v.Field(i).String(); !slices.Contains(strings.Split(msg.Subject, "."), s) {
					t.Errorf("ledger.%s.%s (%q) is not in the subject %s", kind, f.Name, s, msg.Subject)
				}
				continue
			}
			got, ok := body[key]
			if !ok {
				t.Errorf("ledger.%s.%s has no %q in its wire body %s", kind, f.Name, key, msg.Data)
				continue
			}
			if want := wireJSON(t, v.Field(i)); string(got) != want {
				t.Errorf("ledger.%s.%s = %s reaches the wire as %q: %s, want %s", kind, f.Name, want, key, got, want)
			}
		}
		for key := range body {
			if !fields[key] && !slices.Contains(spec.envelope, key) {
				t.Errorf("the wire body of ledger.%s has %q, which is no field of it (body %s)", kind, key, msg.Data)
			}
		}
	}
}

// TestEffectsDecodeBack: the effects the wire package decodes into the
// ledger's own types (journal entries, orders) come back whole.
func TestEffectsDecodeBack(t *testing.T) {
	t.Parallel()
	entry := filled(t, ledger.Entry{}).(ledger.Entry)
	entry.Kind, entry.Prev, entry.Hash = ledger.EntryGrant, strings.Repeat("a", 64), strings.Repeat("b", 64)
	msg, err := wire.EncodeEffect(n, paritySeq, parityTime, 0, entry)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := wire.DecodeJournalEntry(msg.Data); err != nil || !reflect.DeepEqual(got.Ledger(), entry) {
		t.Errorf("journal entry %+v came back as %+v, %v", entry, got.Ledger(), err)
	}
	for _, o := range []ledger.Effect{filled(t, ledger.DispatchOrder{}), filled(t, ledger.CancelOrder{})} {
		msg, err := wire.EncodeEffect(n, paritySeq, parityTime, 0, o)
		if err != nil {
			t.Fatal(err)
		}
		host := reflect.ValueOf(o).FieldByName("Host").String()
		got, seq, err := wire.DecodeOrder(host, msg.Data)
		if err != nil || seq != paritySeq || !reflect.DeepEqual(got, o) {
			t.Errorf("order %+v came back as %+v (seq %d), %v", o, got, seq, err)
		}
	}
}

// filled returns e with every exported field set to a value of its own:
// strings name their field, numbers count up from 100.
func filled(t *testing.T, e ledger.Effect) ledger.Effect {
	t.Helper()
	v := reflect.New(reflect.TypeOf(e)).Elem()
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		if !f.IsExported() {
			continue
		}
		switch {
		case f.Name == "Seq":
			fv.SetUint(paritySeq) // the command's, as the fold sets it
		case fv.Type() == reflect.TypeOf(time.Time{}):
			fv.Set(reflect.ValueOf(parityTime))
		case fv.Type() == reflect.TypeOf(time.Duration(0)):
			fv.SetInt(int64(90*time.Minute + time.Duration(i)*time.Second))
		case fv.Type() == reflect.TypeOf(&ledger.Job{}):
			fv.Set(reflect.ValueOf(&ledger.Job{ID: "vJob", Account: "vAccount", State: ledger.StateSucceeded, GPUs: 1}))
		case f.Name == "Workdir":
			fv.SetString("/v" + f.Name) // a path must be absolute
		case fv.Kind() == reflect.String:
			fv.SetString("v" + f.Name)
		case fv.CanInt():
			fv.SetInt(int64(100 + i))
		case fv.CanUint():
			fv.SetUint(uint64(100 + i))
		case fv.Type() == reflect.TypeOf([]string{}):
			fv.Set(reflect.ValueOf([]string{"v" + f.Name, "w" + f.Name}))
		case fv.Type() == reflect.TypeOf(map[string]string{}):
			fv.Set(reflect.ValueOf(map[string]string{"V" + strings.ToUpper(f.Name): "v"}))
		case fv.Type() == reflect.TypeOf((*int)(nil)):
			x := 100 + i
			fv.Set(reflect.ValueOf(&x))
		default:
			t.Fatalf("ledger.%s.%s has type %s, which this test cannot fill: teach filled", v.Type().Name(), f.Name, fv.Type())
		}
	}
	return v.Interface().(ledger.Effect)
}

// wireJSON is how the contract writes v: as JSON, but a duration as a Go
// duration string ("1h30m0s").
func wireJSON(t *testing.T, v reflect.Value) string {
	t.Helper()
	x := v.Interface()
	if d, ok := x.(time.Duration); ok {
		x = d.String()
	}
	b, err := json.Marshal(x)
	if err != nil {
		t.Fatalf("marshal %v: %v", x, err)
	}
	return string(b)
}

// snake is a Go field name as the contract names its key: OpID → op_id,
// ExitCode → exit_code, GPUs → gpus.
func snake(name string) string {
	var b strings.Builder
	prev := rune(0)
	for _, r := range name {
		if unicode.IsUpper(r) && (unicode.IsLower(prev) || unicode.IsDigit(prev)) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
		prev = r
	}
	return b.String()
}

// effectKinds returns the names of the ledger's effect types: those with an
// isEffect method, read from the package's source.
func effectKinds(t *testing.T) []string {
	t.Helper()
	kinds := methodReceivers(t, "isEffect")
	if len(kinds) < 8 {
		t.Fatalf("found only effect kinds %v in the ledger's source", kinds)
	}
	return kinds
}

// methodReceivers returns the sorted names of the ledger's types that have
// a method called method.
func methodReceivers(t *testing.T, method string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, "../ledger", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatalf("read the ledger's source: %v", err)
	}
	var out []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || fn.Name.Name != method || fn.Recv == nil || len(fn.Recv.List) != 1 {
					continue
				}
				if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok {
					out = append(out, id.Name)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}
