// Modify tests: a job's owner pauses a waiting job (it keeps its reservation
// and is not dispatched), releases it, and changes its priority; a change of
// a job that is not waiting, of another account's job, or to what the job
// already has is ignored, and no balance moves on any of them.
package ledger_test

import (
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
)

func TestHoldRelease(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 10, 0)
	l.Submit("a", "k", 10, 0)
	wantEvent(t, l.Apply(ledger.Modify{Account: "a", Job: "j", Op: ledger.OpHold}), ledger.EventPaused, ledger.ReasonUserHold)
	wantMoney(t, l, "a", 100, 80)
	if j := ledgertest.Next(l.State); j == nil || j.ID != "k" {
		t.Fatalf("Next = %v, want k (j is paused)", j)
	}
	wantEvent(t, l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h1"}), ledger.EventIgnored, ledger.ReasonUserHold)
	wantEvent(t, l.Apply(ledger.Modify{Account: "a", Job: "j", Op: ledger.OpHold}), ledger.EventIgnored, ledger.ReasonUnchanged)
	wantEvent(t, l.Apply(ledger.Modify{Account: "a", Job: "j", Op: ledger.OpRelease}), ledger.EventResumed, "")
	wantEvent(t, l.Apply(ledger.Modify{Account: "a", Job: "j", Op: ledger.OpRelease}), ledger.EventIgnored, ledger.ReasonUnchanged)
	if j := ledgertest.Next(l.State); j == nil || j.ID != "j" {
		t.Fatalf("Next = %v, want j (released, older than k)", j)
	}
	wantMoney(t, l, "a", 100, 80)
}

func TestModifyRefused(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Create("b", 100)
	l.Submit("a", "run", 10, 0)
	l.Start("run", "h1")
	l.Submit("a", "wait", 10, 0)
	for _, tc := range []struct {
		name   string
		m      ledger.Modify
		reason ledger.Reason
	}{
		{"running", ledger.Modify{Account: "a", Job: "run", Op: ledger.OpHold}, ledger.ReasonNotWaiting},
		{"other account", ledger.Modify{Account: "b", Job: "wait", Op: ledger.OpHold}, ledger.ReasonAccountMismatch},
		{"unknown", ledger.Modify{Account: "a", Job: "nope", Op: ledger.OpRelease}, ledger.ReasonUnknownJob},
		{"same priority", ledger.Modify{Account: "a", Job: "wait", Op: ledger.OpPriority, Priority: 0}, ledger.ReasonUnchanged},
	} {
		wantEvent(t, l.Apply(tc.m), ledger.EventIgnored, tc.reason)
		wantMoney(t, l, "a", 100, 80)
		wantMoney(t, l, "b", 100, 100)
	}
	if l.Job("wait").Paused {
		t.Error("another account's hold paused the job")
	}
	res := l.Apply(ledger.Modify{Account: "a", Job: "wait", Op: ledger.OpPriority, Priority: 5000})
	if ev, ok := ledgertest.First[ledger.InvalidEvent](res); !ok || ev.Reason != ledger.ReasonInvalid {
		t.Errorf("out-of-range priority: %+v, want an invalid event", res.Effects)
	}
}

func TestUpdatePriority(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "old", 10, 0)
	l.Submit("a", "new", 10, 0)
	wantEvent(t, l.Apply(ledger.Modify{Account: "a", Job: "new", Op: ledger.OpPriority, Priority: 7}), ledger.EventUpdated, "")
	if j := ledgertest.Next(l.State); j == nil || j.ID != "new" {
		t.Fatalf("Next = %v, want new (priority 7)", j)
	}
	// A retried submission with the original terms is still a duplicate.
	wantEvent(t, l.Submit("a", "new", 10, 0), ledger.EventIgnored, ledger.ReasonDuplicate)
	wantMoney(t, l, "a", 100, 80)
}
