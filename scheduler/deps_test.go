// Gating tests: Core does not dispatch a pending job that waits on a
// dependency or that its owner paused, Explain and the published facts name
// why, and the job is dispatched once the fold clears the gate. The ledger
// is the real fold through ledgertest.Log; decisions are applied as the
// service applies them.
package scheduler_test

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
)

func TestDependantWaitsForSuccess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h1", 4)
	h.submit("a", "first", 1, 0)
	res := h.apply(ledger.Submit{Account: "a", ID: "second", GPUs: 1, Cost: 1, Priority: 10, Command: []string{"x"}, After: []string{"first"}})
	if ev, _ := ledgertest.First[ledger.JobEvent](res); ev.Type != ledger.EventAccepted {
		t.Fatalf("submit second: %+v", ev)
	}
	got := dispatches(h.decide())
	if _, ok := got["second"]; ok || got["first"] != "h1" {
		t.Fatalf("dispatches = %v, want first only (second waits on it, though of higher priority)", got)
	}
	bs, err := scheduler.Explain(h.l.State, h.core.Hosts(), "second", h.l.Now, scheduler.CoreConfig{})
	if err != nil {
		t.Fatalf("Explain: %v", err)
	}
	if len(bs) != 1 || bs[0].Kind != "waiting_on_dependency" || !strings.Contains(bs[0].Message, "first") {
		t.Fatalf("Explain(second) = %+v, want one waiting_on_dependency naming first", bs)
	}
	ws, _ := h.core.Waiting(h.l.State, h.l.Now, 10)
	var named bool
	for _, w := range ws {
		if w.Job == "second" && len(w.Blockers) > 0 && w.Blockers[0].Kind == "waiting_on_dependency" {
			named = true
		}
	}
	if !named {
		t.Fatalf("Waiting = %+v, want second waiting_on_dependency", ws)
	}
	// Running, first still holds second back.
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: "first", Attempt: 1, Devices: []string{"h1-0"}})
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Fatalf("dispatches while first runs = %v, want none", got)
	}
	h.apply(ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "first", Attempt: 1, ExitCode: 0})
	if got := dispatches(h.decide()); got["second"] != "h1" {
		t.Fatalf("dispatches after first succeeded = %v, want second on h1", got)
	}
}

func TestPausedJobNotDispatched(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.submit("a", "j", 1, 0)
	h.submit("a", "k", 1, 0)
	h.apply(ledger.Modify{Account: "a", Job: "j", Op: ledger.OpHold})
	h.apply(ledger.Modify{Account: "a", Job: "k", Op: ledger.OpPriority, Priority: 9})
	h.host("h1", 1)
	if got := dispatches(h.decide()); len(got) != 1 || got["k"] != "h1" {
		t.Fatalf("dispatches = %v, want k only", got)
	}
	bs, err := scheduler.Explain(h.l.State, h.core.Hosts(), "j", h.l.Now, scheduler.CoreConfig{})
	if err != nil || len(bs) != 1 || bs[0].Kind != "user_hold" {
		t.Fatalf("Explain(j) = %+v, %v; want one user_hold", bs, err)
	}
	h.apply(ledger.Modify{Account: "a", Job: "j", Op: ledger.OpRelease})
	h.host("h2", 1)
	if got := dispatches(h.decide()); got["j"] != "h2" {
		t.Fatalf("dispatches after release = %v, want j on h2", got)
	}
}

func TestUpdatedPriorityReordersQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.submit("a", "old", 1, 0)
	h.submit("a", "new", 1, 0)
	h.apply(ledger.Modify{Account: "a", Job: "new", Op: ledger.OpPriority, Priority: 5})
	h.host("h1", 1)
	if got := dispatches(h.decide()); got["new"] != "h1" {
		t.Fatalf("dispatches = %v, want new first (its priority was raised)", got)
	}
}
