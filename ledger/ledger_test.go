// Transition tests for the ledger. Each test drives a fresh ledger through
// ledgertest.Log, which checks every invariant and recomputes every balance
// from the journal after each command, so a test that passes has also shown
// that no step charged twice, released twice or let reserved pass balance.
// The first four are the reference pattern's tests, rewritten for this API.
package ledger_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
)

// firstJobEvent returns the first job event of res, failing if there is none.
func firstJobEvent(t *testing.T, res ledger.Result) ledger.JobEvent {
	t.Helper()
	ev, ok := ledgertest.First[ledger.JobEvent](res)
	if !ok {
		t.Fatalf("no job event in %+v", res.Effects)
	}
	return ev
}

func wantEvent(t *testing.T, res ledger.Result, typ ledger.EventType, reason ledger.Reason) ledger.JobEvent {
	t.Helper()
	ev := firstJobEvent(t, res)
	if ev.Type != typ || ev.Reason != reason {
		t.Fatalf("event = %s/%s (%s), want %s/%s", ev.Type, ev.Reason, ev.Message, typ, reason)
	}
	return ev
}

func wantMoney(t *testing.T, l *ledgertest.Log, account string, balance, available ledger.Credits) {
	t.Helper()
	a := l.Account(account)
	if a.Balance != balance || a.Available() != available {
		t.Fatalf("account %s: balance %d, available %d; want balance %d, available %d", account, a.Balance, a.Available(), balance, available)
	}
}

func TestRejectWhenUnaffordable(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	wantEvent(t, l.Submit("a", "j1", 8, 1), ledger.EventAccepted, "")
	ev := wantEvent(t, l.Submit("a", "j2", 5, 9), ledger.EventRejected, ledger.ReasonInsufficientCredits)
	if !strings.Contains(ev.Message, "costs 5") || !strings.Contains(ev.Message, "2 available") {
		t.Errorf("message %q does not give the amounts", ev.Message)
	}
	wantMoney(t, l, "a", 10, 2)
	if j := l.Job("j2"); j.State != ledger.StateRejected || j.Reserved != 0 {
		t.Errorf("j2 = %s holding %d, want rejected holding 0", j.State, j.Reserved)
	}
}

func TestPriorityThenAge(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "low", 1, 1)
	l.Submit("a", "high1", 1, 5)
	l.Submit("a", "high2", 1, 5)
	var order []string
	for range 3 {
		j := ledgertest.Next(l.State)
		order = append(order, j.ID)
		l.Start(j.ID, "h1")
	}
	if got, want := strings.Join(order, ","), "high1,high2,low"; got != want {
		t.Errorf("start order = %s, want %s", got, want)
	}
	if j := ledgertest.Next(l.State); j != nil {
		t.Errorf("Next after all started = %s, want nil", j.ID)
	}
}

func TestFailureReleasesReservation(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.Submit("a", "j", 7, 1)
	l.Start("j", "h1")
	wantMoney(t, l, "a", 10, 3)
	wantEvent(t, l.Done("j", 1), ledger.EventFailed, ledger.ReasonExitCode)
	wantMoney(t, l, "a", 10, 10)
	if j := l.Job("j"); j.Charged != 0 || *j.ExitCode() != 1 {
		t.Errorf("failed job charged %d, exit %d; want 0, 1", j.Charged, *j.ExitCode())
	}
}

func TestCancelledPendingIsSkipped(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.Submit("a", "j1", 3, 1)
	l.Submit("a", "j2", 3, 1)
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "j1"}), ledger.EventCancelled, ledger.ReasonCancelled)
	wantMoney(t, l, "a", 10, 7)
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "j1"}), ledger.EventIgnored, ledger.ReasonAlreadyTerminal)
	wantMoney(t, l, "a", 10, 7)
	if j := ledgertest.Next(l.State); j == nil || j.ID != "j2" {
		t.Fatalf("Next = %v, want j2", j)
	}
	// A stale decision to dispatch the cancelled job changes nothing.
	wantEvent(t, l.Apply(ledger.Dispatch{Job: "j1", Attempt: 1, Host: "h1"}), ledger.EventIgnored, ledger.ReasonNotPending)
}

func TestSuccessChargesOnce(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 30, 0)
	l.Start("j", "h1")
	ev := wantEvent(t, l.Done("j", 0), ledger.EventSucceeded, "")
	if ev.Charged != 30 || ev.Balance != 70 || ev.Available != 70 {
		t.Errorf("succeeded event charged %d, balance %d, available %d; want 30, 70, 70", ev.Charged, ev.Balance, ev.Available)
	}
	wantMoney(t, l, "a", 70, 70)
}

func TestNegativeCostIsRejected(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	ev := wantEvent(t, l.Submit("a", "j", -1, 0), ledger.EventRejected, ledger.ReasonInvalid)
	if !strings.Contains(ev.Message, "cost -1 is negative") {
		t.Errorf("message %q does not say the cost is negative", ev.Message)
	}
	wantMoney(t, l, "a", 10, 10)
	if _, ok := l.State.Jobs["j"]; ok {
		t.Error("an invalid submission left a job record")
	}
}

func TestValidationListsEveryProblem(t *testing.T) {
	t.Parallel()
	err := ledger.Submit{Account: "a", ID: "j", GPUs: 0, Cost: -1, Priority: 5000, Walltime: -time.Second}.Validate()
	for _, want := range []string{"gpus 0", "cost -1", "priority 5000", "command is empty", "walltime -1s"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
	env := ledger.Submit{Account: "a", ID: "j", GPUs: 1, Command: []string{"x"}, Env: map[string]string{"CUDA_VISIBLE_DEVICES": "0"}}
	if err := env.Validate(); err == nil || !strings.Contains(err.Error(), "set by the worker") {
		t.Errorf("Validate(env CUDA_VISIBLE_DEVICES) = %v, want a refusal", err)
	}
}

func TestDuplicateSubmission(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 10, 1)

	// The same terms again (a retried publish past the duplicate window):
	// nothing new is created and nothing more is reserved.
	wantEvent(t, l.Submit("a", "j", 10, 1), ledger.EventIgnored, ledger.ReasonDuplicate)
	wantMoney(t, l, "a", 100, 90)

	// Other terms under the same id: rejected, the original untouched.
	ev := wantEvent(t, l.Submit("a", "j", 20, 1), ledger.EventRejected, ledger.ReasonDuplicateConflict)
	if !strings.Contains(ev.Message, "cost 10, not 20") {
		t.Errorf("conflict message %q does not name the difference", ev.Message)
	}
	if j := l.Job("j"); j.Cost != 10 || j.State != ledger.StatePending {
		t.Errorf("original job changed: cost %d, %s", j.Cost, j.State)
	}
	wantMoney(t, l, "a", 100, 90)

	// Another account reusing the id conflicts too, and learns nothing of it.
	l.Create("b", 100)
	ev = wantEvent(t, l.Submit("b", "j", 10, 1), ledger.EventRejected, ledger.ReasonDuplicateConflict)
	if ev.Account != "b" || !strings.Contains(ev.Message, "another account") {
		t.Errorf("cross-account conflict event = %+v", ev)
	}
	wantMoney(t, l, "b", 100, 100)
}

func TestRejectedIDCanBeSubmittedAgain(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 5)
	wantEvent(t, l.Submit("a", "j", 10, 0), ledger.EventRejected, ledger.ReasonInsufficientCredits)
	l.Apply(ledger.Admin{Account: "a", ID: "top-up", Op: ledger.OpGrant, Amount: 10})
	wantEvent(t, l.Submit("a", "j", 10, 0), ledger.EventAccepted, "")
	wantMoney(t, l, "a", 15, 5)
}

func TestUnknownAccount(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	ev := wantEvent(t, l.Submit("ghost", "j", 1, 0), ledger.EventRejected, ledger.ReasonUnknownAccount)
	if ev.Account != "ghost" {
		t.Errorf("event account = %q, want ghost", ev.Account)
	}
	res := l.Apply(ledger.Admin{Account: "ghost", ID: "g", Op: ledger.OpGrant, Amount: 5})
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Reason != ledger.ReasonUnknownAccount {
		t.Errorf("grant to unknown account: %+v", ev)
	}
}

func TestRepeatedCancellationOfRunningJob(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.Submit("a", "j", 4, 0)
	l.Start("j", "h1")

	res := l.Apply(ledger.Cancel{Account: "a", Job: "j"})
	wantEvent(t, res, ledger.EventCancelRequested, ledger.ReasonCancelled)
	if o, ok := ledgertest.First[ledger.CancelOrder](res); !ok || o.Host != "h1" || o.Attempt != 1 {
		t.Fatalf("cancel order = %+v, %v; want one for h1 attempt 1", o, ok)
	}
	// Until the worker reports, the reservation is still held.
	wantMoney(t, l, "a", 10, 6)

	res = l.Apply(ledger.Cancel{Account: "a", Job: "j"})
	wantEvent(t, res, ledger.EventIgnored, ledger.ReasonAlreadyCancelling)
	if orders := ledgertest.All[ledger.CancelOrder](res); len(orders) != 0 {
		t.Errorf("repeated cancel sent %d more orders", len(orders))
	}
	wantEvent(t, l.Done("j", 143), ledger.EventCancelled, ledger.ReasonCancelled)
	wantMoney(t, l, "a", 10, 10)
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "j"}), ledger.EventIgnored, ledger.ReasonAlreadyTerminal)
}

func TestCancelOfOtherAccountsJob(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.Create("b", 10)
	l.Submit("a", "j", 4, 0)
	wantEvent(t, l.Apply(ledger.Cancel{Account: "b", Job: "j"}), ledger.EventIgnored, ledger.ReasonAccountMismatch)
	if j := l.Job("j"); j.State != ledger.StatePending {
		t.Errorf("job is %s after another account's cancel, want pending", j.State)
	}
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "nope"}), ledger.EventIgnored, ledger.ReasonUnknownJob)
}

func TestCompletionReplayed(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 40, 0)
	l.Start("j", "h1")
	done := ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "j", Attempt: 1, ExitCode: 0, Runtime: time.Second}
	l.Apply(done)
	doneSeq, doneAt := l.Seq, l.Now
	wantMoney(t, l, "a", 60, 60)

	// The same log entry replayed at its own sequence (a scheduler restart
	// re-reading the log): skipped without a trace.
	if res := l.ApplyAt(done, doneSeq, doneAt); !res.Skipped || len(res.Effects) != 0 {
		t.Errorf("replay at the old sequence: %+v, want skipped", res)
	}
	// The same report published again as a new entry: a logged no-op.
	wantEvent(t, l.Apply(done), ledger.EventIgnored, ledger.ReasonBadState)
	wantMoney(t, l, "a", 60, 60)
}

func TestReplayOfAnyPrefixChangesNothing(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	type entry struct {
		cmd ledger.Command
		seq uint64
		at  time.Time
	}
	var log []entry
	apply := func(c ledger.Command) {
		l.Advance(time.Minute)
		l.Apply(c)
		log = append(log, entry{c, l.Seq, l.Now})
	}
	apply(ledger.Admin{Account: "a", ID: "c", Op: ledger.OpCreate, Balance: 50})
	apply(ledger.Cancel{Account: "a", Job: "j"}) // before the job exists
	apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 60, Command: []string{"x"}})
	apply(ledger.Admin{Account: "a", ID: "g", Op: ledger.OpGrant, Amount: 20})
	apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 60, Command: []string{"x"}})
	apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"})
	before := l.State.Clone()
	for _, e := range log {
		if res := l.ApplyAt(e.cmd, e.seq, e.at); len(res.Changed) != 0 {
			t.Errorf("replaying %s at seq %d changed %v", e.cmd.Kind(), e.seq, res.Changed)
		}
	}
	if l.Job("j").State != before.Jobs["j"].State || l.Account("a").Reserved != before.Accounts["a"].Reserved {
		t.Errorf("replay moved the ledger")
	}
}

func TestReportFromStaleAttemptOrWrongHost(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 10, Command: []string{"x"}, MaxAttempts: 3})
	l.Start("j", "h1")
	wantEvent(t, l.Apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "h1 heartbeat expired"}), ledger.EventLost, ledger.ReasonLost)
	if j := l.Job("j"); j.State != ledger.StatePending || j.Failures != 1 {
		t.Fatalf("after lost: %s with %d failures, want pending with 1", j.State, j.Failures)
	}
	l.Advance(time.Hour)
	l.Start("j", "h2")

	// h1 comes back and reports the old attempt done.
	stale := ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "j", Attempt: 1, ExitCode: 0}
	wantEvent(t, l.Apply(stale), ledger.EventIgnored, ledger.ReasonStaleAttempt)
	// Another host claims the current attempt.
	wrong := ledger.Report{Type: ledger.ReportDone, Host: "h3", Job: "j", Attempt: 2, ExitCode: 0}
	wantEvent(t, l.Apply(wrong), ledger.EventIgnored, ledger.ReasonWrongHost)
	wantMoney(t, l, "a", 100, 90)

	wantEvent(t, l.Done("j", 0), ledger.EventSucceeded, "")
	wantMoney(t, l, "a", 90, 90)
	if atts := l.Job("j").Attempts(); len(atts) != 2 || atts[0].Outcome != ledger.StatePending || atts[1].Outcome != ledger.StateSucceeded {
		t.Errorf("attempts = %+v", atts)
	}
}

func TestStartedNeedsItsDevices(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 2, Cost: 10, Command: []string{"x"}})
	l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"})
	wantEvent(t, l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: 1, Devices: []string{"GPU-1"}}),
		ledger.EventIgnored, ledger.ReasonBadDevices)
	wantEvent(t, l.Apply(ledger.Report{Type: ledger.ReportDone, Host: "h", Job: "j", Attempt: 1}),
		ledger.EventIgnored, ledger.ReasonBadState)
	ev := wantEvent(t, l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: 1, Devices: []string{"GPU-1", "GPU-2"}}),
		ledger.EventStarted, "")
	if len(ev.Devices) != 2 {
		t.Errorf("started event devices = %v", ev.Devices)
	}
}

func TestLostRetriesThenFails(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 10, Command: []string{"x"}, MaxAttempts: 2})
	l.Start("j", "h1")
	res := l.Apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "host gone"})
	req, _ := ledgertest.All[ledger.JobEvent](res), 0
	if len(req) != 2 || req[1].Type != ledger.EventRequeued || req[1].Reason != ledger.ReasonLost {
		t.Fatalf("lost events = %+v, want lost then requeued", req)
	}
	l.Advance(time.Minute)
	l.Start("j", "h2")
	wantEvent(t, l.Apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "late"}), ledger.EventIgnored, ledger.ReasonStaleAttempt)
	res = l.Apply(ledger.Lost{Job: "j", Attempt: 2, Reason: "host gone"})
	evs := ledgertest.All[ledger.JobEvent](res)
	if last := evs[len(evs)-1]; last.Type != ledger.EventFailed || last.Reason != ledger.ReasonAttemptsExhausted {
		t.Fatalf("second loss ended with %+v, want failed/attempts_exhausted", last)
	}
	wantMoney(t, l, "a", 100, 100) // never charged for lost attempts
}

func TestWorkerRejectionRequeues(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 10, 0)
	l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"})
	wantEvent(t, l.Apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 1, Reason: "GPU busy"}),
		ledger.EventRequeued, ledger.ReasonWorkerRejected)
	j := l.Job("j")
	if j.State != ledger.StatePending || j.Reason() != ledger.ReasonWorkerRejected || !strings.Contains(j.Message(), "GPU busy") {
		t.Errorf("after worker rejection: %s %s %q", j.State, j.Reason(), j.Message())
	}
	if a := l.Account("a"); a.RunningJobs != 0 || a.RunningGPUs != 0 {
		t.Errorf("running counts %d/%d after requeue", a.RunningJobs, a.RunningGPUs)
	}
}

func TestCancelOfDispatchedJobSettlesWhenLost(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 10, 0)
	l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"})
	l.Apply(ledger.Cancel{Account: "a", Job: "j"})
	res := l.Apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "host gone"})
	evs := ledgertest.All[ledger.JobEvent](res)
	if last := evs[len(evs)-1]; last.Type != ledger.EventCancelled {
		t.Fatalf("lost after cancel ended with %+v, want cancelled", last)
	}
	wantMoney(t, l, "a", 100, 100)
}

func TestAccountCapsHoldDispatch(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Admin{Account: "a", ID: "lim", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 1, MaxRunningGPUs: 3}})
	l.Apply(ledger.Submit{Account: "a", ID: "j1", GPUs: 2, Cost: 1, Command: []string{"x"}})
	l.Apply(ledger.Submit{Account: "a", ID: "j2", GPUs: 1, Cost: 1, Command: []string{"x"}})
	l.Apply(ledger.Dispatch{Job: "j1", Attempt: 1, Host: "h"})
	wantEvent(t, l.Apply(ledger.Dispatch{Job: "j2", Attempt: 1, Host: "h"}), ledger.EventIgnored, ledger.ReasonMaxRunningJobs)
	l.Apply(ledger.Admin{Account: "a", ID: "lim2", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 5, MaxRunningGPUs: 2}})
	wantEvent(t, l.Apply(ledger.Dispatch{Job: "j2", Attempt: 1, Host: "h"}), ledger.EventIgnored, ledger.ReasonMaxRunningGPUs)
}

func TestConflictingDispatchDecisions(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 1, 0)
	res := l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h1"})
	if orders := ledgertest.All[ledger.DispatchOrder](res); len(orders) != 1 || orders[0].Host != "h1" {
		t.Fatalf("first decision orders = %+v", orders)
	}
	res = l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h2"})
	wantEvent(t, res, ledger.EventIgnored, ledger.ReasonNotPending)
	if orders := ledgertest.All[ledger.DispatchOrder](res); len(orders) != 0 {
		t.Errorf("second decision sent %+v", orders)
	}
	if a := l.Account("a"); a.RunningJobs != 1 {
		t.Errorf("running jobs = %d, want 1", a.RunningJobs)
	}
}

func TestRefillUpToCap(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 0)
	l.Apply(ledger.Admin{Account: "a", ID: "r", Op: ledger.OpRefill, RatePerHour: 100, Cap: 250})

	l.Advance(30 * time.Minute)
	wantEvent(t, l.Submit("a", "j1", 50, 0), ledger.EventAccepted, "")
	wantMoney(t, l, "a", 50, 0)
	wantEvent(t, l.Submit("a", "j2", 1, 0), ledger.EventRejected, ledger.ReasonInsufficientCredits)

	// Fractions carry: 36s at 100/h is exactly one credit.
	l.Advance(36 * time.Second)
	wantEvent(t, l.Submit("a", "j3", 1, 0), ledger.EventAccepted, "")
	wantMoney(t, l, "a", 51, 0)

	l.Advance(100 * time.Hour)
	l.Apply(ledger.Cancel{Account: "a", Job: "j1"})
	wantMoney(t, l, "a", 250, 249) // capped; 1 still held by j3
}

func TestRefillCarriesFractions(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 0)
	l.Apply(ledger.Admin{Account: "a", ID: "r", Op: ledger.OpRefill, RatePerHour: 7, Cap: 1000})
	// Touch the account every 5 minutes for 12 hours: 84 credits in all,
	// exactly, whatever the rounding of each step.
	for i := range 144 {
		l.Advance(5 * time.Minute)
		l.Apply(ledger.Admin{Account: "a", ID: "w" + string(rune('A'+i%26)) + string(rune('A'+i/26)), Op: ledger.OpGrant, Amount: 1})
	}
	wantMoney(t, l, "a", 84+144, 84+144)
}

func TestOverflowIsRejected(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", ledger.MaxCredits)
	res := l.Apply(ledger.Admin{Account: "a", ID: "g", Op: ledger.OpGrant, Amount: 1})
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Type != ledger.EventRejected || ev.Reason != ledger.ReasonOverflow {
		t.Errorf("grant past MaxCredits: %+v, want rejected/overflow", ev)
	}
	wantMoney(t, l, "a", ledger.MaxCredits, ledger.MaxCredits)
	wantEvent(t, l.Submit("a", "j", ledger.MaxCredits+1, 0), ledger.EventRejected, ledger.ReasonInvalid)
	wantEvent(t, l.Submit("a", "j", ledger.MaxCredits, 0), ledger.EventAccepted, "")
	// A huge refill rate over a long time fills to the cap without wrapping.
	l.Create("b", 0)
	l.Apply(ledger.Admin{Account: "b", ID: "r", Op: ledger.OpRefill, RatePerHour: ledger.MaxCredits, Cap: ledger.MaxCredits})
	l.Advance(200 * 365 * 24 * time.Hour)
	l.Submit("b", "k", 1, 0)
	wantMoney(t, l, "b", ledger.MaxCredits, ledger.MaxCredits-1)
}

func TestTakingCreditsCannotPassReserved(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 60, 0)
	res := l.Apply(ledger.Admin{Account: "a", ID: "take", Op: ledger.OpGrant, Amount: -50})
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Reason != ledger.ReasonInsufficientCredits {
		t.Errorf("taking into reserved: %+v", ev)
	}
	l.Apply(ledger.Admin{Account: "a", ID: "take2", Op: ledger.OpGrant, Amount: -40})
	wantMoney(t, l, "a", 60, 0)
}

func TestAdminIdempotency(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 0)
	grant := ledger.Admin{Account: "a", ID: "op-7", Op: ledger.OpGrant, Amount: 25}
	l.Apply(grant)
	res := l.Apply(grant)
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Type != ledger.EventIgnored || ev.Reason != ledger.ReasonDuplicate {
		t.Errorf("repeated grant: %+v", ev)
	}
	grant.Amount = 30
	res = l.Apply(grant)
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Reason != ledger.ReasonDuplicateConflict {
		t.Errorf("reused op id: %+v", ev)
	}
	wantMoney(t, l, "a", 25, 25)
	res = l.Apply(ledger.Admin{Account: "a", ID: "again", Op: ledger.OpCreate, Balance: 5})
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Reason != ledger.ReasonAccountExists {
		t.Errorf("second create: %+v", ev)
	}
	res = l.Apply(ledger.Admin{Account: "a", ID: "w", Op: "frobnicate"})
	if ev, _ := ledgertest.First[ledger.AccountEvent](res); ev.Reason != ledger.ReasonInvalid || !strings.Contains(ev.Message, `unknown op "frobnicate"`) {
		t.Errorf("unknown op: %+v", ev)
	}
}

func TestInvalidCommandIsReported(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	res := l.Apply(ledger.Invalid{Account: "a", Reason: ledger.ReasonInvalid, Message: "not JSON"})
	ev, ok := ledgertest.First[ledger.InvalidEvent](res)
	if !ok || ev.Account != "a" || ev.Message != "not JSON" || len(res.Changed) != 0 {
		t.Errorf("invalid command result = %+v", res)
	}
}

func TestBrokenInvariantPanics(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.State.Accounts["a"].Reserved = 11 // corrupt the state behind Apply's back
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "balance 10 is below reserved 11") {
			t.Errorf("recover() = %v, want a panic naming the broken invariant", r)
		}
	}()
	l.State.Apply(ledger.Admin{Account: "a", ID: "w", Op: ledger.OpWeight, Weight: 2}, 100, l.Now)
}

func TestCheckInvariantsFindsMismatch(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.Submit("a", "j", 4, 0)
	s := l.State.Clone()
	s.Jobs["j"].Reserved = 3
	s.Jobs["j"].Cost = 3
	err := s.CheckInvariants()
	if !errors.Is(err, ledger.ErrInvariant) || !strings.Contains(err.Error(), "reserves 4 but its unfinished jobs hold 3") {
		t.Errorf("CheckInvariants() = %v", err)
	}
}

// An unfinished metered job is charged by the price table, so the table
// must exist while one is pending, dispatched or running.
func TestCheckInvariantsFindsMeteredJobWithoutPrices(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 1000)
	l.Apply(ledger.SetPricing{ID: "p1", Default: 100})
	wantEvent(t, l.Apply(ledger.Submit{Account: "a", ID: "m", GPUs: 1, Metered: true, Command: []string{"x"}}), ledger.EventAccepted, "")
	s := l.State.Clone()
	s.Pricing = nil
	err := s.CheckInvariants()
	if !errors.Is(err, ledger.ErrInvariant) || !strings.Contains(err.Error(), "metered job m is pending but there is no price table") {
		t.Errorf("CheckInvariants() = %v", err)
	}
}

func TestBooksCatchDoubleSettlement(t *testing.T) {
	t.Parallel()
	b := ledger.NewBooks()
	posts := []ledger.Entry{
		{Kind: ledger.EntryGrant, Account: "a", Amount: 10, Balance: 10},
		{Kind: ledger.EntryReserve, Account: "a", Job: "j", Amount: 4, Balance: 10, Reserved: 4},
		{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 4, Reservation: 4, Balance: 6, Reserved: 0},
	}
	for _, e := range posts {
		if err := b.Post(e); err != nil {
			t.Fatalf("Post(%+v) = %v", e, err)
		}
	}
	err := b.Post(ledger.Entry{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 0, Reservation: 4, Released: 4, Balance: 6, Reserved: -4})
	if !errors.Is(err, ledger.ErrAudit) || !strings.Contains(err.Error(), "already settled") {
		t.Errorf("second settlement: %v", err)
	}
}

func TestSnapshotsAreCheckedBothWays(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10)
	l.Submit("a", "j", 4, 0)
	l.Start("j", "h")
	data, err := ledger.MarshalJob(l.Job("j"))
	if err != nil {
		t.Fatal(err)
	}
	j, err := ledger.UnmarshalJob(data)
	if err != nil || j.State != ledger.StateRunning || len(j.Devices()) != 1 || j.Walltime != ledger.DefaultWalltime {
		t.Fatalf("UnmarshalJob = %+v, %v", j, err)
	}
	bad := l.Account("a").Clone()
	bad.Reserved = 20
	if _, err := ledger.MarshalAccount(bad); !errors.Is(err, ledger.ErrInvariant) {
		t.Errorf("MarshalAccount(reserved > balance) = %v", err)
	}
	if _, err := ledger.UnmarshalAccount([]byte(`{"id":"a","balance":1,"reserved":2,"weight":1}`)); !errors.Is(err, ledger.ErrInvariant) {
		t.Errorf("UnmarshalAccount(reserved > balance) = %v", err)
	}
}

func TestInfrastructureFailureRetriesUncharged(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 30, Command: []string{"x"}, MaxAttempts: 2})
	l.Start("j", "h1")
	res := l.Apply(ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "j", Attempt: 1, ExitCode: 137, Infra: "Xid 79 on GPU-h1-a"})
	ev := wantEvent(t, res, ledger.EventRequeued, ledger.ReasonInfrastructure)
	if !strings.Contains(ev.Message, "Xid 79") {
		t.Errorf("requeued message %q does not say why", ev.Message)
	}
	wantMoney(t, l, "a", 100, 70)
	l.Advance(time.Hour)
	l.Start("j", "h2")
	res = l.Apply(ledger.Report{Type: ledger.ReportDone, Host: "h2", Job: "j", Attempt: 2, ExitCode: 137, Infra: "worker drained"})
	evs := ledgertest.All[ledger.JobEvent](res)
	if last := evs[len(evs)-1]; last.Type != ledger.EventFailed || last.Reason != ledger.ReasonAttemptsExhausted {
		t.Errorf("second infrastructure failure ended with %+v", last)
	}
	wantMoney(t, l, "a", 100, 100)
}

func TestHeldJobsAreAdmittedInSubmitOrder(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 0)
	l.Apply(ledger.Admin{Account: "a", ID: "r", Op: ledger.OpRefill, RatePerHour: 100, Cap: 1000})
	hold := func(id string, cost ledger.Credits) ledger.Result {
		return l.Apply(ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: cost, Command: []string{"x"}, Hold: true})
	}
	wantEvent(t, hold("big", 50), ledger.EventHeld, "")
	wantEvent(t, hold("small", 10), ledger.EventHeld, "") // affordable soon, but behind big
	if a := l.Account("a"); a.Reserved != 0 || len(a.HeldJobs) != 2 {
		t.Fatalf("held jobs reserved %d, list %v", a.Reserved, a.HeldJobs)
	}
	l.Advance(6 * time.Minute) // 10 credits: enough for small, not for big
	if res := l.Apply(ledger.Admit{Account: "a"}); len(ledgertest.All[ledger.JobEvent](res)) != 0 {
		t.Fatalf("admitted out of submit order: %+v", res.Effects)
	}
	l.Advance(24*time.Minute - time.Nanosecond) // one nanosecond short of 50
	l.Apply(ledger.Admit{Account: "a"})
	if j := l.Job("big"); j.State != ledger.StateHeld {
		t.Fatalf("big admitted before the bucket covered it: %s", j.State)
	}
	l.Advance(time.Nanosecond)
	res := l.Apply(ledger.Admit{Account: "a"})
	if evs := ledgertest.All[ledger.JobEvent](res); len(evs) != 1 || evs[0].Job != "big" || evs[0].Type != ledger.EventAccepted {
		t.Fatalf("at 30 minutes: %+v", evs)
	}
	wantMoney(t, l, "a", 50, 0)
	// A grant admits what it pays for at once.
	l.Apply(ledger.Admin{Account: "a", ID: "g", Op: ledger.OpGrant, Amount: 10})
	if j := l.Job("small"); j.State != ledger.StatePending || j.Reserved != 10 {
		t.Errorf("small after a grant: %s holding %d", j.State, j.Reserved)
	}
	// A held job can be cancelled; it never held anything.
	hold("later", 500)
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "later"}), ledger.EventCancelled, ledger.ReasonCancelled)
	if a := l.Account("a"); len(a.HeldJobs) != 0 || a.Reserved != 60 {
		t.Errorf("after cancelling the held job: %v, reserved %d", a.HeldJobs, a.Reserved)
	}
}

func TestMeteredJobsPayForRuntime(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 10_000)
	metered := func(id string) {
		t.Helper()
		res := l.Apply(ledger.Submit{Account: "a", ID: id, GPUs: 2, Metered: true, Walltime: time.Hour, Command: []string{"x"}, MaxAttempts: 2})
		wantEvent(t, res, ledger.EventAccepted, "")
	}
	wantEvent(t, l.Apply(ledger.Submit{Account: "a", ID: "early", GPUs: 1, Metered: true, Command: []string{"x"}}), ledger.EventRejected, ledger.ReasonNoPrice)
	l.Apply(ledger.SetPricing{ID: "p1", PerGPUHour: map[string]ledger.Credits{"H100": 360, "H200": 720}, Default: 100, FailurePercent: 50})
	metered("ok")
	if j := l.Job("ok"); j.Cost != 2*720 {
		t.Fatalf("reservation = %d, want 2 GPUs × 1h × 720 (the highest price)", j.Cost)
	}
	run := func(id, model string, exit int, runtime time.Duration, infra string) ledger.Result {
		t.Helper()
		l.Apply(ledger.Dispatch{Job: id, Attempt: l.Job(id).Attempt + 1, Host: "h"})
		l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: id, Attempt: l.Job(id).Attempt, Devices: []string{"g0", "g1"}, Model: model})
		return l.Apply(ledger.Report{Type: ledger.ReportDone, Host: "h", Job: id, Attempt: l.Job(id).Attempt, ExitCode: exit, Runtime: runtime, Infra: infra})
	}
	// 90.5s rounds up to 91s: ⌈2 × 91 × 360 / 3600⌉ = ⌈18.2⌉ = 19.
	res := run("ok", "H100", 0, 90500*time.Millisecond, "")
	var e ledger.Entry
	for _, x := range ledgertest.All[ledger.Entry](res) {
		if x.Kind == ledger.EntrySettle {
			e = x
		}
	}
	if e.Kind != ledger.EntrySettle || e.Amount != 19 || e.Reservation != 1440 || e.Released != 1421 {
		t.Errorf("settle entry = %+v, want charged 19 of 1440 held, 1421 released", e)
	}
	if ev := firstJobEvent(t, res); ev.Charged != 19 || !strings.Contains(ev.Message, "2 GPUs × 91s at 360 per GPU-hour = 19") {
		t.Errorf("succeeded event = %+v", ev)
	}
	// A failure pays FailurePercent of its runtime: ⌈2 × 100 × 360 / 3600⌉ = 20, half is 10.
	metered("fails")
	run("fails", "H100", 1, 100*time.Second, "")
	if j := l.Job("fails"); j.Charged != 10 || j.State != ledger.StateFailed {
		t.Errorf("failed metered job: %s charged %d, want 10", j.State, j.Charged)
	}
	// An infrastructure failure pays nothing; the retry pays for itself only.
	metered("infra")
	run("infra", "H200", 137, 30*time.Minute, "Xid 79")
	run("infra", "", 0, 3600*time.Second, "") // an unknown model pays the default
	if j := l.Job("infra"); j.Charged != 200 || len(j.Attempts()) != 2 || j.Attempts()[0].Charged != 0 {
		t.Errorf("retried metered job: charged %d over attempts %+v, want 200 (2 GPUs × 1h × 100)", j.Charged, j.Attempts())
	}
	wantMoney(t, l, "a", 10_000-19-10-200, 10_000-19-10-200)
}

// TestBusyRefusalSpendsNoAttempt: a worker that refuses an attempt only
// because its GPUs were taken requeues the job without spending one of its
// attempts, and the refusal is in the job's record; past MaxBusyRefusals a
// busy refusal is an ordinary worker rejection, so no job is refused forever.
func TestBusyRefusalSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 10, Command: []string{"x"}, MaxAttempts: 1})
	refuse := func() ledger.Result {
		t.Helper()
		next := l.Job("j").Attempt + 1
		if ev, _ := ledgertest.First[ledger.JobEvent](l.Apply(ledger.Dispatch{Job: "j", Attempt: next, Host: "h"})); ev.Type != ledger.EventDispatched {
			t.Fatalf("dispatch: %+v", ev)
		}
		l.Advance(time.Second)
		return l.Apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: next, Reason: "GPU-0 in use", Busy: true})
	}
	for n := 1; n <= ledger.MaxBusyRefusals; n++ {
		wantEvent(t, refuse(), ledger.EventRequeued, ledger.ReasonHostBusy)
		j := l.Job("j")
		if j.State != ledger.StatePending || j.Failures != 0 || j.BusyRefusals != n || j.Reason() != ledger.ReasonHostBusy {
			t.Fatalf("after busy refusal %d: %s, %d failures, %d busy refusals, reason %s", n, j.State, j.Failures, j.BusyRefusals, j.Reason())
		}
		last := j.Attempts()[len(j.Attempts())-1]
		if len(j.Attempts()) != n || last.N != n || last.Host != "h" || last.Reason != ledger.ReasonHostBusy || last.Outcome != ledger.StatePending {
			t.Fatalf("after busy refusal %d: attempts %+v", n, j.Attempts())
		}
	}
	wantMoney(t, l, "a", 100, 90)
	// One more busy refusal spends the job's only attempt.
	res := refuse()
	evs := ledgertest.All[ledger.JobEvent](res)
	if last := evs[len(evs)-1]; last.Type != ledger.EventFailed || last.Reason != ledger.ReasonAttemptsExhausted {
		t.Fatalf("busy refusal past the limit ended with %+v, want failed/attempts_exhausted", evs)
	}
	j := l.Job("j")
	if last := j.Attempts()[len(j.Attempts())-1]; last.Reason != ledger.ReasonWorkerRejected || !strings.Contains(last.Message, "busy refusals") {
		t.Errorf("the attempt past the limit is recorded as %s %q, want a worker rejection that says why", last.Reason, last.Message)
	}
	if j.Failures != 1 || j.BusyRefusals != ledger.MaxBusyRefusals {
		t.Errorf("failures %d, busy refusals %d; want 1 and %d", j.Failures, j.BusyRefusals, ledger.MaxBusyRefusals)
	}
	wantMoney(t, l, "a", 100, 100)
}

// TestBusyRefusalCountsOnlyFromTheAttempt: a busy refusal from another host
// or for an old attempt changes nothing, and one for a job with a cancel
// requested ends it cancelled.
func TestBusyRefusalCountsOnlyFromTheAttempt(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 10, 0)
	l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"})
	busy := ledger.Report{Type: ledger.ReportRejected, Host: "other", Job: "j", Attempt: 1, Reason: "busy", Busy: true}
	wantEvent(t, l.Apply(busy), ledger.EventIgnored, ledger.ReasonWrongHost)
	busy.Host, busy.Attempt = "h", 2
	wantEvent(t, l.Apply(busy), ledger.EventIgnored, ledger.ReasonStaleAttempt)
	if j := l.Job("j"); j.State != ledger.StateDispatched || j.BusyRefusals != 0 || len(j.Attempts()) != 0 {
		t.Fatalf("misaddressed busy refusals moved the job: %s, %d busy refusals, %d attempts", j.State, j.BusyRefusals, len(j.Attempts()))
	}
	l.Apply(ledger.Cancel{Account: "a", Job: "j"})
	busy.Attempt = 1
	res := l.Apply(busy)
	evs := ledgertest.All[ledger.JobEvent](res)
	if last := evs[len(evs)-1]; last.Type != ledger.EventCancelled {
		t.Fatalf("busy refusal of a job being cancelled ended with %+v, want cancelled", evs)
	}
	wantMoney(t, l, "a", 100, 100)
}

// TestStartOfARunNobodyWantsIsCancelled: a started report for an attempt
// that is not the job's current one on that host (the attempt was lost and
// retried elsewhere, the job has ended, it was never sent there) is ignored
// and sends the reporting host a cancel order for exactly that attempt, so
// the run it just started is stopped. A duplicate started report for the
// attempt that runs stops nothing.
func TestStartOfARunNobodyWantsIsCancelled(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 10, Command: []string{"x"}, MaxAttempts: 3})
	l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h1"})
	l.Apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "h1 stopped heartbeating"})
	started := func(host string, attempt int) ledger.Report {
		return ledger.Report{Type: ledger.ReportStarted, Host: host, Job: "j", Attempt: attempt, Devices: []string{"GPU-" + host}}
	}
	cases := []struct {
		name   string
		before func()
		report ledger.Report
		reason ledger.Reason
	}{
		{"pending after its attempt was lost", func() {}, started("h1", 1), ledger.ReasonWrongHost},
		{"retried on another host", func() { l.Apply(ledger.Dispatch{Job: "j", Attempt: 2, Host: "h2"}) }, started("h1", 1), ledger.ReasonStaleAttempt},
		{"current attempt, another host", func() {}, started("h3", 2), ledger.ReasonWrongHost},
		{"ended", func() { l.Apply(started("h2", 2)); l.Done("j", 0) }, started("h2", 2), ledger.ReasonBadState},
	}
	for _, c := range cases {
		c.before()
		res := l.Apply(c.report)
		wantEvent(t, res, ledger.EventIgnored, c.reason)
		want := ledger.CancelOrder{Host: c.report.Host, Job: "j", Account: "a", Attempt: c.report.Attempt}
		if got := ledgertest.All[ledger.CancelOrder](res); len(got) != 1 || got[0] != want {
			t.Errorf("%s: cancel orders %+v, want %+v", c.name, got, want)
		}
		if len(res.Changed) != 0 {
			t.Errorf("%s: an ignored report changed %v", c.name, res.Changed)
		}
	}
	wantMoney(t, l, "a", 90, 90)

	// A started report sent again while its attempt runs is a duplicate.
	l.Submit("a", "k", 10, 0)
	l.Start("k", "h1")
	dup := ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: "k", Attempt: 1, Devices: l.Job("k").Devices()}
	res := l.Apply(dup)
	wantEvent(t, res, ledger.EventIgnored, ledger.ReasonBadState)
	if got := ledgertest.All[ledger.CancelOrder](res); len(got) != 0 {
		t.Errorf("a duplicate started report of the running attempt sent %+v", got)
	}
}
