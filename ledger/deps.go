package ledger

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Dependencies.
//
// A submission may name jobs it waits for: After (afterok: each must
// succeed) and AfterAny (afterany: each must only end). Every one must be a
// job of the same account that the ledger still holds and that was
// accepted: an unknown id, a rejected one, one of another account or one
// already archived is refused with [ReasonUnknownDependency]. An afterok
// dependency that has already ended without success is refused with
// [ReasonDependencyFailed]. Dependencies are fixed at submit and must exist
// already, so no cycle can form.
//
// An accepted dependant is reserved (or held for credits) like any job and
// lists in WaitingOn the dependencies that have not ended. While WaitingOn
// is not empty the job is pending but not dispatchable: the scheduler does
// not queue it and the fold ignores a dispatch of it. Each time a
// dependency ends, the fold (after the command, like the admission of held
// jobs) takes it off its dependants' WaitingOn; when an afterok dependency
// ended without success the dependant fails at once with
// [ReasonDependencyFailed] and its reservation is released, which may in
// turn fail its own dependants.

// checkDependencies reports what is wrong with s's dependency lists.
func checkDependencies(s Submit) []error {
	var errs []error
	if n := len(s.After) + len(s.AfterAny); n > MaxDependencies {
		return []error{tooLarge("%d dependencies, more than %d", n, MaxDependencies)}
	}
	seen := map[string]bool{}
	for _, list := range [][]string{s.After, s.AfterAny} {
		for i, id := range list {
			if err := checkID(fmt.Sprintf("dependency %d", i), id); err != nil {
				errs = append(errs, err)
				continue
			}
			switch {
			case id == s.ID:
				errs = append(errs, fmt.Errorf("job %s cannot depend on itself", id))
			case seen[id]:
				errs = append(errs, fmt.Errorf("dependency %s is named twice", id))
			}
			seen[id] = true
		}
	}
	return errs
}

func noneIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// dependencies checks c's dependencies against the state and returns those
// it must wait for, in the order named, or why it is refused.
func (t *tx) dependencies(c Submit) (waiting []string, reason Reason, msg string) {
	for _, id := range slices.Concat(c.After, c.AfterAny) {
		d := t.s.Jobs[id]
		afterOK := slices.Contains(c.After, id)
		switch {
		case d == nil:
			return nil, ReasonUnknownDependency, fmt.Sprintf("dependency %s is not a job of account %s: it was never submitted, or it ended and was archived", id, c.Account)
		case d.Account != c.Account:
			return nil, ReasonUnknownDependency, fmt.Sprintf("dependency %s belongs to another account; a job may depend only on jobs of its own account", id)
		case d.State == StateRejected:
			return nil, ReasonUnknownDependency, fmt.Sprintf("dependency %s was rejected (%s) and will never run", id, d.Reason())
		case afterOK && d.State.Terminal() && d.State != StateSucceeded:
			return nil, ReasonDependencyFailed, fmt.Sprintf("dependency %s has already ended %s (%s); a job after it could never run", id, d.State, d.Reason())
		case !d.State.Terminal():
			waiting = append(waiting, id)
		}
	}
	return waiting, "", ""
}

// await sets the dependencies j waits for and counts it on a.
func (t *tx) await(a *Account, j *Job, waiting []string) {
	if len(waiting) == 0 {
		return
	}
	j.EditOptions().WaitingOn = waiting
	a.Waiting++
	t.changedAccount(a)
}

// waitNote says what a just-accepted job waits for, if anything.
func waitNote(j *Job) string {
	if len(j.WaitingOn()) == 0 {
		return ""
	}
	return fmt.Sprintf("; it waits for %s before it may run", strings.Join(j.WaitingOn(), ", "))
}

// stopWaiting clears what held back j, which is ending: it waits no more.
func (t *tx) stopWaiting(j *Job) {
	j.Paused = false
	if len(j.WaitingOn()) == 0 {
		return
	}
	j.EditOptions().WaitingOn = nil
	if a := t.s.Accounts[j.Account]; a != nil && a.Waiting > 0 {
		a.Waiting--
		t.changedAccount(a)
	}
}

// submittedPriority is the priority j was submitted with.
func (j *Job) submittedPriority() int {
	if j.SubmittedPriority() != nil {
		return *j.SubmittedPriority()
	}
	return j.Priority
}

// Gated reports whether j is waiting but held back from dispatch: it waits
// on a dependency or its owner paused it.
func (j *Job) Gated() bool { return len(j.WaitingOn()) > 0 || j.Paused }

// gateProblem says why a dispatch of j must not go, if it must not.
func gateProblem(j *Job) (Reason, string) {
	switch {
	case j.Paused:
		return ReasonUserHold, "its owner holds it; gpuq release lets it run"
	case len(j.WaitingOn()) > 0:
		return ReasonDependency, fmt.Sprintf("it waits for %s", strings.Join(j.WaitingOn(), ", "))
	}
	return "", ""
}

// settleDependants takes every job that ended in this command off the
// WaitingOn of its dependants, failing those whose afterok dependency did
// not succeed; their ends are handled in turn, in the same loop.
func (t *tx) settleDependants() {
	for i := 0; i < len(t.ended); i++ {
		d := t.ended[i]
		a := t.s.Accounts[d.Account]
		if d.State == StateRejected || a == nil || a.Waiting == 0 {
			continue
		}
		var deps []*Job
		// A scan of every job, done only for an account with jobs waiting
		// on a dependency; sorted, so the events come in the same order on
		// every replay.
		for _, j := range t.s.Jobs {
			if j.Account == d.Account && slices.Contains(j.WaitingOn(), d.ID) {
				deps = append(deps, j)
			}
		}
		slices.SortFunc(deps, func(x, y *Job) int { return cmp.Compare(x.ID, y.ID) })
		for _, j := range deps {
			t.dependencyEnded(a, j, d)
		}
	}
}

// dependencyEnded applies the end of d to its dependant j.
func (t *tx) dependencyEnded(a *Account, j, d *Job) {
	if slices.Contains(j.After(), d.ID) && d.State != StateSucceeded {
		msg := fmt.Sprintf("dependency %s ended %s (%s), and this job was to run only after it succeeded", d.ID, d.State, d.Reason())
		if j.State == StateHeld {
			a.HeldJobs = slices.DeleteFunc(slices.Clone(a.HeldJobs), func(id string) bool { return id == j.ID })
			t.changedAccount(a)
			t.end(j, StateFailed, ReasonDependencyFailed, msg) // end stops its waiting
			return
		}
		t.finish(j, StateFailed, ReasonDependencyFailed, msg, 0)
		return
	}
	j.EditOptions().WaitingOn = noneIfEmpty(slices.DeleteFunc(slices.Clone(j.WaitingOn()), func(id string) bool { return id == d.ID }))
	t.changedJob(j)
	msg := fmt.Sprintf("dependency %s ended %s; ", d.ID, d.State)
	if len(j.WaitingOn()) > 0 {
		msg += fmt.Sprintf("it still waits for %s", strings.Join(j.WaitingOn(), ", "))
	} else {
		a.Waiting--
		t.changedAccount(a)
		msg += "it waits on no dependency now"
		if j.Paused {
			msg += ", but its owner holds it"
		}
	}
	t.jobEvent(a.ID, j, JobEvent{Type: EventDependencyMet, Reason: ReasonDependency, Message: msg})
}

// checkWaits reports a broken rule of what holds j back.
func (j *Job) checkWaits() error {
	waiting := j.State == StatePending || j.State == StateHeld
	switch {
	case !waiting && (len(j.WaitingOn()) > 0 || j.Paused):
		return brokenf("%s job still waits on %v (paused %v)", j.State, j.WaitingOn(), j.Paused)
	case len(j.After())+len(j.AfterAny()) > MaxDependencies:
		return brokenf("%d dependencies, more than %d", len(j.After())+len(j.AfterAny()), MaxDependencies)
	}
	for _, id := range j.WaitingOn() {
		if !slices.Contains(j.After(), id) && !slices.Contains(j.AfterAny(), id) {
			return brokenf("waits on %s, which it does not depend on", id)
		}
	}
	return nil
}
