// Tests of the submit options besides the price: name, workdir, gpu_model
// and the array fields, as the submit body carries them.
package wire_test

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

func TestSubmitOptionsDecode(t *testing.T) {
	t.Parallel()
	body := `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"name":"sweep ▸ 1","gpu_model":"NVIDIA H100 80GB HBM3","workdir":"/data/run-7"}`
	cmd, err := wire.DecodeCommand(n, n.Submit("a"), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	s := cmd.(ledger.Submit)
	if s.Name != "sweep ▸ 1" || s.GPUModel != "NVIDIA H100 80GB HBM3" || s.Workdir != "/data/run-7" {
		t.Errorf("decoded %+v", s)
	}
}

func TestSubmitOptionsRefused(t *testing.T) {
	t.Parallel()
	const head = `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],`
	tests := []struct {
		name, body string
		reason     ledger.Reason
		want       string
	}{
		{"name not a string", head + `"name":5}`, ledger.ReasonInvalid, "name: want a string"},
		{"name with a line break", head + `"name":"a\nb"}`, ledger.ReasonInvalid, "printable"},
		{"gpu_model not a string", head + `"gpu_model":["H100"]}`, ledger.ReasonInvalid, "gpu_model: want a string"},
		{"gpu_model with a tab", head + `"gpu_model":"H100\t"}`, ledger.ReasonInvalid, "printable"},
		{"relative workdir", head + `"workdir":"data"}`, ledger.ReasonInvalid, "not an absolute, clean path"},
		{"workdir with ..", head + `"workdir":"/data/../etc"}`, ledger.ReasonInvalid, "not an absolute, clean path"},
		{"name too long", head + `"name":"` + strings.Repeat("n", ledger.MaxNameBytes+1) + `"}`, ledger.ReasonTooLarge, "more than 128"},
	}
	for _, tt := range tests {
		de := decodeErr(t, n.Submit("a"), tt.body)
		if de.Reason != tt.reason || !strings.Contains(de.Error(), tt.want) {
			t.Errorf("%s: %s: %v; want %s, saying %q", tt.name, de.Reason, de, tt.reason, tt.want)
		}
	}
}
