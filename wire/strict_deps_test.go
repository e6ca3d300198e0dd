package wire_test

import (
	"testing"

	"github.com/gpuq/gpuq/wire"
)

// A priority update that does not say the priority is refused, not read as
// priority 0; a dependency that is not a token is refused by the codec.
func TestModifyAndDependenciesAreStrict(t *testing.T) {
	if m, err := wire.DecodeModify("vision", []byte(`{"v":1,"id":"j1","op":"priority"}`)); err == nil {
		t.Errorf("a priority update without a priority decoded as %+v", m)
	}
	if _, err := wire.DecodeModify("vision", []byte(`{"v":1,"id":"j1","op":"priority","priority":0}`)); err != nil {
		t.Errorf("a priority update to 0: %v", err)
	}
	if _, err := wire.DecodeModify("vision", []byte(`{"v":1,"id":"j1","op":"hold"}`)); err != nil {
		t.Errorf("a hold: %v", err)
	}
	for _, dep := range []string{"a.b", "*", ">", "a b"} {
		body := `{"v":1,"id":"j2","gpus":1,"cost":1,"command":["true"],"after":["` + dep + `"]}`
		if s, err := wire.DecodeSubmit("vision", []byte(body)); err == nil {
			t.Errorf("a submission after %q decoded: %+v", dep, s.After)
		}
	}
}
