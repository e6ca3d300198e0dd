// Tests of the submit options besides the price: name, workdir, gpu_model
// and the array fields, as the submit body carries them.
package wire_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

func TestSubmitOptionsDecode(t *testing.T) {
	t.Parallel()
	body := `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"name":"sweep ▸ 1","gpu_model":"NVIDIA H100 80GB HBM3","workdir":"/data/run-7","array_id":"sweep","array_index":7}`
	cmd, err := wire.DecodeCommand(n, n.Submit("a"), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	s := cmd.(ledger.Submit)
	if s.Name != "sweep ▸ 1" || s.GPUModel != "NVIDIA H100 80GB HBM3" || s.Workdir != "/data/run-7" ||
		s.ArrayID != "sweep" || s.ArrayIndex != 7 {
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
		{"array_id not a token", head + `"array_id":"a.b","array_index":1}`, ledger.ReasonInvalid, "array_id"},
		{"empty array_id", head + `"array_id":"","array_index":1}`, ledger.ReasonInvalid, "array_id"},
		{"array_index without array_id", head + `"array_index":3}`, ledger.ReasonInvalid, "array_index 3 without an array_id"},
		{"negative array_index", head + `"array_id":"s","array_index":-1}`, ledger.ReasonInvalid, "array_index -1 is out of range"},
		{"array_index past the limit", head + `"array_id":"s","array_index":1000000}`, ledger.ReasonInvalid, "out of range [0, 999999]"},
		{"name too long", head + `"name":"` + strings.Repeat("n", ledger.MaxNameBytes+1) + `"}`, ledger.ReasonTooLarge, "more than 128"},
	}
	for _, tt := range tests {
		de := decodeErr(t, n.Submit("a"), tt.body)
		if de.Reason != tt.reason || !strings.Contains(de.Error(), tt.want) {
			t.Errorf("%s: %s: %v; want %s, saying %q", tt.name, de.Reason, de, tt.reason, tt.want)
		}
	}
}

// TestDispatchOrderCarriesOptions: a dispatch order carries the job's
// workdir and array place to the worker, and a worker refuses an order
// whose workdir or array fields are malformed.
func TestDispatchOrderCarriesOptions(t *testing.T) {
	t.Parallel()
	o := ledger.DispatchOrder{Host: "h", Job: "sweep-7", Account: "a", Attempt: 1, GPUs: 1, Command: []string{"x"},
		Walltime: time.Hour, Workdir: "/data/run-7", ArrayID: "sweep", ArrayIndex: 7}
	msg, err := wire.EncodeEffect(n, 9, time.Unix(0, 0), 0, o)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := wire.DecodeOrder("h", msg.Data)
	if err != nil || !reflect.DeepEqual(got, o) {
		t.Fatalf("DecodeOrder(%s) = %+v, %v; want %+v", msg.Data, got, err, o)
	}
	for _, body := range []string{
		`{"v":1,"type":"dispatch","seq":1,"job":"j","account":"a","attempt":1,"gpus":1,"command":["x"],"walltime":"1h0m0s","workdir":"rel"}`,
		`{"v":1,"type":"dispatch","seq":1,"job":"j","account":"a","attempt":1,"gpus":1,"command":["x"],"walltime":"1h0m0s","array_index":2}`,
		`{"v":1,"type":"dispatch","seq":1,"job":"j","account":"a","attempt":1,"gpus":1,"command":["x"],"walltime":"1h0m0s","array_id":"a b"}`,
	} {
		if o, _, err := wire.DecodeOrder("h", []byte(body)); err == nil {
			t.Errorf("DecodeOrder(%s) = %+v, want an error", body, o)
		}
	}
}
