// Tests of strict input: bodies that encoding/json would read other than as
// written (duplicate keys, bytes that are not UTF-8, half surrogate pairs)
// are refused with a reason, sizes past the ledger's limits are refused as
// too_large, and the price table's fixed-cost policy travels both ways.
package wire_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

func decodeErr(t *testing.T, subject, body string) *wire.DecodeError {
	t.Helper()
	cmd, err := wire.DecodeCommand(n, subject, []byte(body))
	var de *wire.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("DecodeCommand(%.80s) = %+v, %v; want a DecodeError", body, cmd, err)
	}
	return de
}

func TestStrictBodies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, subject, body, want string
	}{
		{"duplicate top-level key", n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["ok"],"command":["rm","-rf"]}`, `key "command" appears twice`},
		{"duplicate key spelled with an escape", n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["ok"],"\u0063ommand":["x"]}`, `key "command" appears twice`},
		{"duplicate env name", n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["ok"],"env":{"A":"1","A":"2"}}`, `key "A" appears twice`},
		{"duplicate in an ignored field", n.Cancel("a"), `{"v":1,"id":"j","x":{"k":[{"z":1,"z":2}]}}`, `key "z" appears twice`},
		{"duplicate price", n.Config("pricing"), `{"v":1,"id":"p","failure_percent":1,"per_gpu_hour":{"H100":1,"H100":0}}`, `key "H100" appears twice`},
		{"invalid UTF-8 in argv", n.Submit("a"), "{\"v\":1,\"id\":\"j\",\"gpus\":1,\"cost\":1,\"command\":[\"echo\",\"caf\xe9\"]}", "not valid UTF-8"},
		{"invalid UTF-8 in env", n.Submit("a"), "{\"v\":1,\"id\":\"j\",\"gpus\":1,\"cost\":1,\"command\":[\"x\"],\"env\":{\"X\":\"\xff\"}}", "not valid UTF-8"},
		{"lone high surrogate", n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["\ud83d"]}`, "lone high surrogate"},
		{"lone low surrogate", n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["\ude00x"]}`, "lone low surrogate"},
		{"high surrogate then another escape", n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["\ud83d\u0041"]}`, "not followed by a low one"},
		{"invalid UTF-8 in a report reason", n.Report("h1"), "{\"v\":1,\"job\":\"j\",\"attempt\":1,\"type\":\"rejected\",\"reason\":\"\xc3(\"}", "not valid UTF-8"},
	}
	for _, tt := range tests {
		de := decodeErr(t, tt.subject, tt.body)
		if de.Reason != ledger.ReasonInvalid || !strings.Contains(de.Error(), tt.want) {
			t.Errorf("%s: %s: %v; want invalid, saying %q", tt.name, de.Reason, de, tt.want)
		}
	}
	// Escapes that are valid Unicode are still read.
	cmd, err := wire.DecodeCommand(n, n.Submit("a"), []byte(`{"v":1,"id":"j","gpus":1,"cost":1,"command":["\ud83d\ude00","\\ud83d","\u00e9"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := cmd.(ledger.Submit).Command; got[0] != "😀" || got[1] != `\ud83d` || got[2] != "é" {
		t.Errorf("command = %q", got)
	}
}

// TestTheAngleBracketProbeIsTooLarge replays the probe of issue 10: a
// 196,672-byte submission of '<', which JSON escaping makes a 1.18 MB record.
func TestTheAngleBracketProbeIsTooLarge(t *testing.T) {
	t.Parallel()
	prefix, suffix := `{"v":1,"id":"poison","gpus":1,"cost":10,"command":["sh","`, `"]}`
	body := prefix + strings.Repeat("<", 196_672-len(prefix)-len(suffix)) + suffix
	if len(body) != 196_672 {
		t.Fatalf("body is %d bytes", len(body))
	}
	de := decodeErr(t, n.Submit("a"), body)
	if de.Reason != ledger.ReasonTooLarge || de.Account != "a" || de.Job != "poison" || !strings.Contains(de.Error(), "131072") {
		t.Errorf("%s for %s/%s: %v; want too_large for a/poison naming the limit", de.Reason, de.Account, de.Job, de)
	}
	// So does the Go client's encoder, before anything is sent.
	_, err := wire.EncodeSubmit(n, ledger.Submit{Account: "a", ID: "poison", GPUs: 1, Cost: 10, Command: []string{"sh", strings.Repeat("<", 196_600)}})
	if !errors.Is(err, ledger.ErrTooLarge) {
		t.Errorf("EncodeSubmit = %v, want ErrTooLarge", err)
	}
	_, err = wire.EncodeSubmit(n, ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 10, Command: []string{"caf\xe9"}})
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("EncodeSubmit of invalid UTF-8 = %v, want refused", err)
	}
	big := `{"v":1,"id":"j","pad":"` + strings.Repeat("x", wire.MaxMessageBytes) + `"}`
	if de := decodeErr(t, n.Cancel("a"), big); de.Reason != ledger.ReasonTooLarge {
		t.Errorf("a body over MaxMessageBytes: %s, want too_large", de.Reason)
	}
}

func TestPricingFixedCostPolicy(t *testing.T) {
	t.Parallel()
	for _, p := range []ledger.FixedCostPolicy{ledger.FixedCostAny, ledger.FixedCostFloor, ledger.FixedCostRefused} {
		msg, err := wire.EncodePricing(n, ledger.SetPricing{ID: "p", Default: 5, FailurePercent: 10, FixedCost: p})
		if err != nil {
			t.Fatal(err)
		}
		got, err := wire.DecodeCommand(n, msg.Subject, msg.Data)
		if err != nil || got.(ledger.SetPricing).FixedCost != p {
			t.Errorf("%q round trip = %+v, %v", p, got, err)
		}
		if p == ledger.FixedCostAny && strings.Contains(string(msg.Data), "fixed_cost") {
			t.Errorf("the default policy is written out: %s", msg.Data)
		}
	}
	for body, want := range map[string]ledger.FixedCostPolicy{
		`{"v":1,"id":"p","failure_percent":1}`:                             ledger.FixedCostAny, // a body from before the policy
		`{"v":1,"id":"p","failure_percent":1,"fixed_cost":"any"}`:          ledger.FixedCostAny,
		`{"v":1,"id":"p","failure_percent":1,"fixed_cost":"floor"}`:        ledger.FixedCostFloor,
		`{"v":1,"id":"p","failure_percent":1,"fixed_cost":"metered_only"}`: ledger.FixedCostRefused,
	} {
		got, err := wire.DecodeCommand(n, n.Config("pricing"), []byte(body))
		if err != nil || got.(ledger.SetPricing).FixedCost != want {
			t.Errorf("%s = %+v, %v; want %q", body, got, err, want)
		}
	}
	if de := decodeErr(t, n.Config("pricing"), `{"v":1,"id":"p","failure_percent":1,"fixed_cost":"cheap"}`); !strings.Contains(de.Error(), "fixed_cost") {
		t.Errorf("an unknown policy: %v", de)
	}
}
