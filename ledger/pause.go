package ledger

import "fmt"

// ModifyOp is the operation of a [Modify] command.
type ModifyOp string

// Modify operations.
const (
	OpHold     ModifyOp = "hold"     // pause the waiting job: it keeps its reservation and is not dispatched
	OpRelease  ModifyOp = "release"  // lift the pause
	OpPriority ModifyOp = "priority" // set the waiting job's priority to Priority
)

// Modify changes a job of Account that is still waiting (pending, or held
// for credits): its owner pauses it (hold), lets it go again (release) or
// sets its priority. A paused job stays pending and keeps its reservation
// and its place (its submit sequence), but is not dispatched until
// released. It is called a pause here, not a hold, because a held job
// ([StateHeld]) is one waiting, unreserved, for credits.
//
// A job that has been dispatched, or has ended, is not changed
// ([ReasonNotWaiting]); a change to what the job already has is ignored
// ([ReasonUnchanged]). Neither moves any credits.
type Modify struct {
	Account  string
	Job      string
	Op       ModifyOp
	Priority int // OpPriority only
}

func (Modify) Kind() string { return "modify" }
func (Modify) isCommand()   {}

// Validate reports every way m is malformed or out of range.
func (m Modify) Validate() error {
	var errs []error
	errs = append(errs, nonNil(checkID("account", m.Account), checkID("id of the job to change", m.Job))...)
	switch m.Op {
	case OpHold, OpRelease:
		if m.Priority != 0 {
			errs = append(errs, fmt.Errorf("a %s takes no priority", m.Op))
		}
	case OpPriority:
		if m.Priority < MinPriority || m.Priority > MaxPriority {
			errs = append(errs, fmt.Errorf("priority %d is out of range [%d, %d]", m.Priority, MinPriority, MaxPriority))
		}
	case "":
		errs = append(errs, fmt.Errorf("op is empty; want one of hold, release, priority"))
	default:
		errs = append(errs, fmt.Errorf("unknown op %s; want one of hold, release, priority", preview(string(m.Op))))
	}
	return joinProblems(errs)
}

// modify applies m: see [Modify].
func (t *tx) modify(m Modify) {
	if err := m.Validate(); err != nil {
		t.emit(InvalidEvent{Account: m.Account, Job: m.Job, Reason: ReasonFor(err), Message: string(m.Op) + " rejected: " + err.Error()})
		return
	}
	j := t.s.Jobs[m.Job]
	ignore := func(j *Job, r Reason, format string, args ...any) {
		e := JobEvent{Type: EventIgnored, Job: m.Job, Reason: r, Message: fmt.Sprintf("%s of job %s ignored: ", m.Op, m.Job) + fmt.Sprintf(format, args...)}
		t.jobEvent(m.Account, j, e)
	}
	switch {
	case j == nil:
		ignore(nil, ReasonUnknownJob, "there is no such job")
		return
	case j.Account != m.Account:
		ignore(nil, ReasonAccountMismatch, "it belongs to another account; change it through that account")
		return
	case j.State != StatePending && j.State != StateHeld:
		ignore(j, ReasonNotWaiting, "it is %s; only a waiting job (pending or held) can be changed", j.State)
		return
	}
	switch m.Op {
	case OpHold:
		if j.Paused {
			ignore(j, ReasonUnchanged, "it is already held by its owner")
			return
		}
		j.Paused = true
		t.changedJob(j)
		t.jobEvent(j.Account, j, JobEvent{Type: EventPaused, Reason: ReasonUserHold,
			Message: fmt.Sprintf("held by its owner: it keeps its reservation of %d and its place, and is not dispatched until released", j.Reserved)})
	case OpRelease:
		if !j.Paused {
			ignore(j, ReasonUnchanged, "it is not held by its owner")
			return
		}
		j.Paused = false
		t.changedJob(j)
		msg := "released by its owner"
		if len(j.WaitingOn()) > 0 {
			msg += "; it still waits for its dependencies"
		}
		t.jobEvent(j.Account, j, JobEvent{Type: EventResumed, Message: msg})
	case OpPriority:
		if j.Priority == m.Priority {
			ignore(j, ReasonUnchanged, "its priority is already %d", m.Priority)
			return
		}
		if j.SubmittedPriority() == nil {
			p := j.Priority
			j.EditOptions().SubmittedPriority = &p
		}
		old := j.Priority
		j.Priority = m.Priority
		t.changedJob(j)
		t.jobEvent(j.Account, j, JobEvent{Type: EventUpdated,
			Message: fmt.Sprintf("priority %d, was %d", j.Priority, old)})
	}
}
