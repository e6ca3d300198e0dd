// Dependency tests: a job submitted with After (afterok) or AfterAny
// (afterany) is reserved but not dispatchable until its dependencies end; an
// afterok dependency that fails fails the dependant and releases its
// reservation; a dependency that is unknown, of another account, rejected or
// already failed is refused with nothing held. Each runs through
// ledgertest.Log, which checks every invariant after each command.
package ledger_test

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
)

func submitAfter(l *ledgertest.Log, account, id string, cost ledger.Credits, after, afterAny []string) ledger.Result {
	return l.Apply(ledger.Submit{Account: account, ID: id, GPUs: 1, Cost: cost, Command: []string{"true"},
		After: after, AfterAny: afterAny})
}

func TestDependencySatisfied(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "first", 10, 0)
	ev := wantEvent(t, submitAfter(l, "a", "second", 20, []string{"first"}, nil), ledger.EventAccepted, "")
	if !strings.Contains(ev.Message, "waits for first") {
		t.Errorf("accepted message %q does not name the dependency", ev.Message)
	}
	wantMoney(t, l, "a", 100, 70)
	if j := ledgertest.Next(l.State); j == nil || j.ID != "first" {
		t.Fatalf("Next = %v, want first (second waits on it)", j)
	}
	// A dispatch decision for the waiting job is refused by the fold.
	wantEvent(t, l.Apply(ledger.Dispatch{Job: "second", Attempt: 1, Host: "h1"}), ledger.EventIgnored, ledger.ReasonDependency)
	l.Start("first", "h1")
	res := l.Done("first", 0)
	var met bool
	for _, e := range ledgertest.All[ledger.JobEvent](res) {
		if e.Job == "second" && e.Type == ledger.EventDependencyMet {
			met = true
		}
	}
	if !met {
		t.Fatalf("no dependency_met event for second in %+v", res.Effects)
	}
	if j := l.Job("second"); len(j.WaitingOn()) != 0 || j.State != ledger.StatePending {
		t.Fatalf("second = %s waiting on %v, want pending waiting on nothing", j.State, j.WaitingOn())
	}
	if j := ledgertest.Next(l.State); j == nil || j.ID != "second" {
		t.Fatalf("Next = %v, want second", j)
	}
	if a := l.Account("a"); a.Waiting != 0 {
		t.Errorf("account waiting = %d, want 0", a.Waiting)
	}
}

func TestDependencyFailedFailsDependant(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "first", 10, 0)
	submitAfter(l, "a", "second", 20, []string{"first"}, nil)
	submitAfter(l, "a", "third", 5, []string{"second"}, nil) // fails in turn
	submitAfter(l, "a", "cleanup", 1, nil, []string{"first"})
	wantMoney(t, l, "a", 100, 64)
	l.Start("first", "h1")
	res := l.Done("first", 3)
	var failed []string
	for _, e := range ledgertest.All[ledger.JobEvent](res) {
		if e.Type == ledger.EventFailed && e.Reason == ledger.ReasonDependencyFailed {
			failed = append(failed, e.Job)
			if !strings.Contains(e.Message, "dependency ") {
				t.Errorf("failure message %q does not name the dependency", e.Message)
			}
		}
	}
	if got := strings.Join(failed, ","); got != "second,third" {
		t.Fatalf("failed with dependency_failed = %s, want second,third", got)
	}
	for _, id := range []string{"second", "third"} {
		if j := l.Job(id); j.State != ledger.StateFailed || j.Reserved != 0 || j.Charged != 0 {
			t.Errorf("%s = %s holding %d charged %d, want failed holding 0 charged 0", id, j.State, j.Reserved, j.Charged)
		}
	}
	if !strings.Contains(l.Job("second").Message(), "first") {
		t.Errorf("second's message %q does not name first", l.Job("second").Message())
	}
	// afterany runs however its dependency ended.
	if j := l.Job("cleanup"); j.State != ledger.StatePending || j.Gated() {
		t.Errorf("cleanup = %s gated %v, want pending and dispatchable", j.State, j.Gated())
	}
	wantMoney(t, l, "a", 100, 99)
}

func TestDependencyRefused(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Create("b", 100)
	l.Submit("b", "theirs", 1, 0)
	l.Submit("a", "broke", 1000, 0) // rejected: insufficient credits
	l.Submit("a", "bad", 1, 0)
	l.Start("bad", "h1")
	l.Done("bad", 1)
	for _, tc := range []struct {
		name     string
		after    []string
		afterAny []string
		reason   ledger.Reason
	}{
		{"unknown", []string{"nope"}, nil, ledger.ReasonUnknownDependency},
		{"other account", []string{"theirs"}, nil, ledger.ReasonUnknownDependency},
		{"rejected", nil, []string{"broke"}, ledger.ReasonUnknownDependency},
		{"already failed", []string{"bad"}, nil, ledger.ReasonDependencyFailed},
	} {
		res := submitAfter(l, "a", "dep-"+strings.ReplaceAll(tc.name, " ", "-"), 10, tc.after, tc.afterAny)
		ev := wantEvent(t, res, ledger.EventRejected, tc.reason)
		if ev.Message == "" {
			t.Errorf("%s: rejection without a message", tc.name)
		}
	}
	wantMoney(t, l, "a", 100, 100)
	// afterany on the failed job is satisfied at once.
	wantEvent(t, submitAfter(l, "a", "after-bad", 10, nil, []string{"bad"}), ledger.EventAccepted, "")
	if j := l.Job("after-bad"); j.Gated() {
		t.Errorf("after-bad waits on %v; its dependency has ended", j.WaitingOn())
	}
}

func TestDependencyValidation(t *testing.T) {
	t.Parallel()
	many := make([]string, ledger.MaxDependencies+1)
	for i := range many {
		many[i] = "j" + strings.Repeat("x", i)
	}
	for _, tc := range []struct {
		name     string
		after    []string
		afterAny []string
		want     string
	}{
		{"self", []string{"me"}, nil, "itself"},
		{"twice", []string{"x"}, []string{"x"}, "twice"},
		{"too many", many, nil, "more than"},
		{"empty id", []string{""}, nil, "empty"},
	} {
		s := ledger.Submit{Account: "a", ID: "me", GPUs: 1, Cost: 1, Command: []string{"true"}, After: tc.after, AfterAny: tc.afterAny}
		if err := s.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Validate = %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestCancelWaitingDependant(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "first", 10, 0)
	submitAfter(l, "a", "second", 20, []string{"first"}, nil)
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "second"}), ledger.EventCancelled, ledger.ReasonCancelled)
	if a := l.Account("a"); a.Waiting != 0 {
		t.Errorf("account waiting = %d after the waiting job was cancelled, want 0", a.Waiting)
	}
	wantMoney(t, l, "a", 100, 90)
}

// TestDependencyProperties drives random submissions with dependencies,
// pauses, priority changes, dispatches, ends and cancels through the fold.
// ledgertest.Log checks every invariant (Waiting counts, what a gated job
// may be, balances recomputed from the journal) after each command; here,
// after each step: no gated job is on a host, no job waits on one that has
// ended, and a job whose afterok dependency ended without success has
// failed with dependency_failed or never ran.
func TestDependencyProperties(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		l := ledgertest.NewLog(rt)
		l.Create("a", 10_000)
		var ids []string
		pick := func(label string) string { return rapid.SampledFrom(ids).Draw(rt, label) }
		rt.Repeat(map[string]func(*rapid.T){
			"submit": func(rt *rapid.T) {
				id := fmt.Sprintf("j%d", len(ids))
				var after, afterAny []string
				if len(ids) > 0 {
					for _, d := range rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 0, 3, rapid.ID[string]).Draw(rt, "deps") {
						if rapid.Bool().Draw(rt, "afterok") {
							after = append(after, d)
						} else {
							afterAny = append(afterAny, d)
						}
					}
				}
				submitAfter(l, "a", id, 10, after, afterAny)
				ids = append(ids, id)
			},
			"modify": func(rt *rapid.T) {
				if len(ids) == 0 {
					rt.Skip("no jobs")
				}
				op := rapid.SampledFrom([]ledger.ModifyOp{ledger.OpHold, ledger.OpRelease, ledger.OpPriority}).Draw(rt, "op")
				m := ledger.Modify{Account: "a", Job: pick("job"), Op: op}
				if op == ledger.OpPriority {
					m.Priority = rapid.IntRange(-5, 5).Draw(rt, "priority")
				}
				l.Apply(m)
			},
			"run": func(rt *rapid.T) {
				j := ledgertest.Next(l.State)
				if j == nil {
					rt.Skip("nothing dispatchable")
				}
				l.Start(j.ID, "h1")
				l.Done(j.ID, rapid.SampledFrom([]int{0, 1}).Draw(rt, "exit"))
			},
			"dispatch gated": func(rt *rapid.T) {
				if len(ids) == 0 {
					rt.Skip("no jobs")
				}
				j := l.Job(pick("job"))
				l.Apply(ledger.Dispatch{Job: j.ID, Attempt: j.Attempt + 1, Host: "h1"})
				if j.Gated() && j.State.OnHost() {
					rt.Fatalf("gated job %s was dispatched", j.ID)
				}
				if j.State.OnHost() {
					l.Done(j.ID, 0)
				}
			},
			"cancel": func(rt *rapid.T) {
				if len(ids) == 0 {
					rt.Skip("no jobs")
				}
				l.Apply(ledger.Cancel{Account: "a", Job: pick("job")})
			},
			"": func(rt *rapid.T) {
				for _, j := range l.State.Jobs {
					for _, d := range j.WaitingOn() {
						if l.Job(d).State.Terminal() {
							rt.Fatalf("job %s still waits on %s, which is %s", j.ID, d, l.Job(d).State)
						}
					}
					if j.State.Terminal() || j.State == ledger.StateRejected {
						continue
					}
					for _, d := range j.After() {
						if dj := l.Job(d); dj.State.Terminal() && dj.State != ledger.StateSucceeded {
							rt.Fatalf("job %s is %s though its afterok dependency %s is %s", j.ID, j.State, d, dj.State)
						}
					}
				}
			},
		})
	})
}
