package ledger

import (
	"fmt"
	"slices"
)

// cancel stops a job of the requesting account. A pending job is cancelled
// and released at once. A dispatched or running job gets a cancel order to
// its host and is settled when the worker reports (or when the attempt is
// declared lost); until then its reservation stays held.
func (t *tx) cancel(c Cancel) {
	if err := c.Validate(); err != nil {
		t.emit(InvalidEvent{Account: c.Account, Job: c.Job, Reason: ReasonFor(err), Message: "cancel rejected: " + err.Error()})
		return
	}
	j := t.s.Jobs[c.Job]
	switch {
	case j == nil:
		t.jobEvent(c.Account, nil, JobEvent{Type: EventIgnored, Job: c.Job, Reason: ReasonUnknownJob,
			Message: fmt.Sprintf("no job %s to cancel", c.Job)})
	case j.Account != c.Account:
		t.jobEvent(c.Account, nil, JobEvent{Type: EventIgnored, Job: c.Job, Reason: ReasonAccountMismatch,
			Message: fmt.Sprintf("job %s belongs to another account; cancel it through that account", c.Job)})
	case j.State == StatePending:
		t.finish(j, StateCancelled, ReasonCancelled, "cancelled while pending", 0)
	case j.State == StateHeld:
		a := t.s.Accounts[j.Account]
		// A new slice: the fold never writes into one a record already
		// holds (see State.Apply's guard, which restores records).
		a.HeldJobs = slices.DeleteFunc(slices.Clone(a.HeldJobs), func(id string) bool { return id == j.ID })
		t.changedAccount(a)
		t.end(j, StateCancelled, ReasonCancelled, "cancelled while held")
	case j.State.OnHost() && j.CancelRequested:
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonAlreadyCancelling,
			Message: fmt.Sprintf("a cancel of attempt %d on %s is already on its way", j.Attempt, j.Host())})
	case j.State.OnHost():
		j.CancelRequested = true
		t.changedJob(j)
		t.jobEvent(j.Account, j, JobEvent{Type: EventCancelRequested, Reason: ReasonCancelled,
			Message: fmt.Sprintf("cancel sent to %s for attempt %d; the reservation is released when the worker reports", j.Host(), j.Attempt)})
		t.emit(CancelOrder{Host: j.Host(), Job: j.ID, Account: j.Account, Attempt: j.Attempt})
	default:
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonAlreadyTerminal,
			Message: fmt.Sprintf("job %s has already ended: %s", j.ID, j.State)})
	}
}
