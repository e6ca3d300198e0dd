package ledger

import (
	"fmt"
	"time"
)

// dispatch applies the scheduler's decision to run the job's next attempt on
// a host. The fold re-checks what the decision assumed: the job is pending,
// this is its next attempt and its account's caps allow one more. A decision
// that no longer holds is a logged no-op. (When a retry may go is the
// scheduler's policy, not the ledger's.)
func (t *tx) dispatch(c Dispatch) {
	if err := c.Validate(); err != nil {
		t.emit(InvalidEvent{Job: c.Job, Reason: ReasonFor(err), Message: "dispatch decision rejected: " + err.Error()})
		return
	}
	j := t.s.Jobs[c.Job]
	if j == nil {
		t.emit(InvalidEvent{Job: c.Job, Reason: ReasonUnknownJob, Message: fmt.Sprintf("dispatch decision for unknown job %s", c.Job)})
		return
	}
	ignore := func(r Reason, format string, args ...any) {
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: r,
			Message: fmt.Sprintf("dispatch of attempt %d to %s ignored: ", c.Attempt, c.Host) + fmt.Sprintf(format, args...)})
	}
	a := t.s.Accounts[j.Account]
	caps := CapBlocks(a, Running{}, j.GPUs)
	switch {
	case j.State != StatePending:
		ignore(ReasonNotPending, "job is %s", j.State)
	case c.Attempt != j.Attempt+1:
		ignore(ReasonStaleAttempt, "the next attempt is %d", j.Attempt+1)
	case j.Gated():
		r, msg := gateProblem(j)
		ignore(r, "%s", msg)
	case len(caps) > 0:
		ignore(caps[0].Reason, "%s", caps[0].Message())
	case encodedStringsLen(j.Command)+encodedMapLen(j.Env())+EncodedLen(j.Workdir())+orderOverhead > MaxRecordBytes:
		// Only a job stored by a version with larger limits can get here:
		// its order could not be sent, so it can never run.
		t.finish(j, StateFailed, ReasonTooLarge, fmt.Sprintf("its dispatch order would take more than the %d bytes a message may: its command and env are too large to send to a worker", MaxRecordBytes), 0)
	default:
		j.State, j.Attempt, j.EditOutcome().Host, j.EditOutcome().Devices, j.EditOutcome().DispatchedAt = StateDispatched, c.Attempt, c.Host, nil, t.at
		j.EditOutcome().Reason, j.EditOutcome().Message = "", ""
		a.RunningJobs++
		a.RunningGPUs += j.GPUs
		t.changedJob(j)
		t.changedAccount(a)
		t.jobEvent(a.ID, j, JobEvent{Type: EventDispatched, Message: fmt.Sprintf("attempt %d sent to %s", j.Attempt, j.Host())})
		t.emit(DispatchOrder{Host: j.Host(), Job: j.ID, Account: j.Account, Attempt: j.Attempt,
			GPUs: j.GPUs, Command: j.Command, Env: j.Env(), Walltime: j.Walltime,
			Workdir: j.Workdir(), ArrayID: j.ArrayID(), ArrayIndex: j.ArrayIndex()})
	}
}

// orderOverhead bounds what a dispatch order holds besides the command and
// the env: ids, numbers and field names.
const orderOverhead = 1024

// report applies a worker's report. It counts only from the attempt and host
// the job was last dispatched to, and only in a state where it makes sense;
// anything else is a no-op with the reason recorded in an event, except that
// an ignored started report for a run that is not the job's current one also
// sends the reporting host a cancel order for that attempt. A busy refusal
// ([Report.Busy]) requeues the job without spending an attempt, up to
// [MaxBusyRefusals] times; after that it is an ordinary worker rejection.
func (t *tx) report(r Report) {
	if err := r.Validate(); err != nil {
		t.emit(InvalidEvent{Job: r.Job, Reason: ReasonFor(err), Message: fmt.Sprintf("report from %s rejected: %v", r.Host, err)})
		return
	}
	j := t.s.Jobs[r.Job]
	if j == nil {
		t.emit(InvalidEvent{Job: r.Job, Reason: ReasonUnknownJob, Message: fmt.Sprintf("%s report from %s for unknown job %s", r.Type, r.Host, r.Job)})
		return
	}
	ignore := func(reason Reason, format string, args ...any) {
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: reason,
			Message: fmt.Sprintf("%s report from %s for attempt %d ignored: ", r.Type, r.Host, r.Attempt) + fmt.Sprintf(format, args...)})
	}
	want := StateDispatched
	if r.Type == ReportDone {
		want = StateRunning
	}
	// A started report that is not for the job's current attempt on its
	// host means a worker has just started a run nobody wants (an order it
	// took after the attempt was lost, or one it ran again after a
	// restart): the host is told to stop it. A started report for the
	// current attempt that comes again while it runs is only a duplicate.
	stop := r.Type == ReportStarted && (r.Attempt != j.Attempt || r.Host != j.Host() || !j.State.OnHost())
	switch {
	case r.Attempt != j.Attempt:
		ignore(ReasonStaleAttempt, "the job's attempt is %d%s", j.Attempt, stopNote(stop, r))
	case r.Host != j.Host():
		ignore(ReasonWrongHost, "attempt %d was dispatched to %s%s", j.Attempt, orNone(j.Host()), stopNote(stop, r))
	case j.State != want:
		ignore(ReasonBadState, "the job is %s%s", j.State, stopNote(stop, r))
	case r.Type == ReportStarted && len(r.Devices) != j.GPUs:
		ignore(ReasonBadDevices, "the job needs %d GPUs, the report lists %d devices", j.GPUs, len(r.Devices))
	case r.Type == ReportStarted:
		j.State, j.EditOutcome().StartedAt, j.EditOutcome().Model = StateRunning, t.at, r.Model
		j.EditOutcome().Devices = append([]string(nil), r.Devices...)
		t.changedJob(j)
		t.jobEvent(j.Account, j, JobEvent{Type: EventStarted, Devices: j.Devices(),
			Message: fmt.Sprintf("attempt %d running on %s", j.Attempt, j.Host())})
	case r.Type == ReportDone && r.Infra != "":
		j.EditOutcome().RuntimeMS = r.Runtime.Milliseconds()
		t.retry(j, ReasonInfrastructure, fmt.Sprintf("attempt %d on %s ended by the infrastructure: %s", j.Attempt, j.Host(), r.Infra))
	case r.Type == ReportDone:
		t.exited(j, r.ExitCode, r.Runtime)
	case r.Busy && j.BusyRefusals < MaxBusyRefusals && !j.CancelRequested:
		// The GPUs were taken when the order arrived: a race the job did
		// not lose through any fault of its own, so it spends no attempt.
		// Bounded, so a host that always says busy cannot keep a job, and
		// its record, going forever.
		j.BusyRefusals++
		msg := fmt.Sprintf("%s refused attempt %d, its GPUs busy: %s", j.Host(), j.Attempt, r.Reason)
		t.endAttempt(j, StatePending, ReasonHostBusy, msg, 0)
		t.requeue(j, ReasonHostBusy, msg, fmt.Sprintf("%s; attempt %d follows, and this one is not spent (busy refusal %d of at most %d; %d of %d attempts spent)",
			msg, j.Attempt+1, j.BusyRefusals, MaxBusyRefusals, j.Failures, j.MaxAttempts))
	default: // ReportRejected
		msg := fmt.Sprintf("%s could not start attempt %d: %s", j.Host(), j.Attempt, r.Reason)
		if r.Busy && !j.CancelRequested {
			msg += fmt.Sprintf(" (busy, but the job has had its %d busy refusals: this one spends an attempt)", MaxBusyRefusals)
		}
		t.retry(j, ReasonWorkerRejected, msg)
	}
	if stop {
		t.emit(CancelOrder{Host: r.Host, Job: j.ID, Account: j.Account, Attempt: r.Attempt})
	}
}

// stopNote says, in an ignored started report's message, that the run it
// announced is being stopped.
func stopNote(stop bool, r Report) string {
	if !stop {
		return ""
	}
	return fmt.Sprintf("; a cancel order goes to %s to stop the run", r.Host)
}

func orNone(host string) string {
	if host == "" {
		return "no host now"
	}
	return host
}

// exited settles j, whose attempt exited with code after runtime: a success
// pays its full charge; a failure, cancelled or not, pays its failure share.
func (t *tx) exited(j *Job, code int, runtime time.Duration) {
	j.EditOutcome().ExitCode, j.EditOutcome().RuntimeMS = &code, runtime.Milliseconds()
	to, reason, pct, attemptMsg, how := StateSucceeded, Reason(""), 100, "", fmt.Sprintf("exited %d", code)
	if code != 0 {
		to, reason, pct, attemptMsg = StateFailed, ReasonExitCode, t.failurePercent(j), fmt.Sprintf("exit code %d", code)
		if j.CancelRequested {
			to, reason, how = StateCancelled, ReasonCancelled, "cancelled; "+how
		}
	}
	charge, note := t.charge(j, runtime, pct)
	t.endAttempt(j, to, reason, attemptMsg, charge)
	t.finish(j, to, reason, fmt.Sprintf("%s after %v%s", how, runtime, note), charge)
}

// lost applies the scheduler's decision that an attempt vanished.
func (t *tx) lost(l Lost) {
	if err := l.Validate(); err != nil {
		t.emit(InvalidEvent{Job: l.Job, Reason: ReasonFor(err), Message: "lost decision rejected: " + err.Error()})
		return
	}
	j := t.s.Jobs[l.Job]
	if j == nil {
		t.emit(InvalidEvent{Job: l.Job, Reason: ReasonUnknownJob, Message: fmt.Sprintf("lost decision for unknown job %s", l.Job)})
		return
	}
	switch {
	case l.Attempt != j.Attempt:
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonStaleAttempt,
			Message: fmt.Sprintf("lost decision for attempt %d ignored: the job's attempt is %d", l.Attempt, j.Attempt)})
	case !j.State.OnHost():
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonBadState,
			Message: fmt.Sprintf("lost decision for attempt %d ignored: the job is %s", l.Attempt, j.State)})
	default:
		t.jobEvent(j.Account, j, JobEvent{Type: EventLost, Reason: ReasonLost,
			Message: fmt.Sprintf("attempt %d on %s lost: %s", j.Attempt, j.Host(), l.Reason)})
		t.retry(j, ReasonLost, fmt.Sprintf("attempt %d on %s lost: %s", j.Attempt, j.Host(), l.Reason))
	}
}

// unplaceable fails a pending job no host can fit, releasing its reservation.
func (t *tx) unplaceable(u Unplaceable) {
	if err := u.Validate(); err != nil {
		t.emit(InvalidEvent{Job: u.Job, Reason: ReasonFor(err), Message: "unplaceable decision rejected: " + err.Error()})
		return
	}
	j := t.s.Jobs[u.Job]
	switch {
	case j == nil:
		t.emit(InvalidEvent{Job: u.Job, Reason: ReasonUnknownJob, Message: fmt.Sprintf("unplaceable decision for unknown job %s", u.Job)})
	case j.State != StatePending:
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonNotPending,
			Message: fmt.Sprintf("unplaceable decision ignored: the job is %s", j.State)})
	default:
		t.finish(j, StateFailed, ReasonUnplaceable, u.Message, 0)
	}
}

// retry ends an attempt that failed through no fault of the job (lost,
// refused by the worker, or ended by the infrastructure). The job is never
// charged for it: it goes back to pending, to be dispatched again when the
// scheduler's retry policy allows, or its reservation is released in full
// when it was cancelled or has no attempts left.
func (t *tx) retry(j *Job, reason Reason, msg string) {
	j.Failures++
	switch {
	case j.CancelRequested:
		t.endAttempt(j, StateCancelled, reason, msg, 0)
		t.finish(j, StateCancelled, ReasonCancelled, "cancelled; "+msg, 0)
	case j.Failures >= j.MaxAttempts:
		t.endAttempt(j, StateFailed, reason, msg, 0)
		t.finish(j, StateFailed, ReasonAttemptsExhausted,
			fmt.Sprintf("%s; no attempts left (%d of %d failed)", msg, j.Failures, j.MaxAttempts), 0)
	default:
		t.endAttempt(j, StatePending, reason, msg, 0)
		t.requeue(j, reason, msg, fmt.Sprintf("%s; attempt %d follows, %d of %d attempts spent (never charged for this one)",
			msg, j.Attempt+1, j.Failures, j.MaxAttempts))
	}
}

// requeue moves j, whose attempt has ended (see endAttempt), from its host
// back to pending, and announces it with the event message note.
func (t *tx) requeue(j *Job, reason Reason, msg, note string) {
	a := t.s.Accounts[j.Account]
	a.RunningJobs--
	a.RunningGPUs -= j.GPUs
	t.changedAccount(a)
	j.State, j.EditOutcome().Host, j.EditOutcome().Devices, j.EditOutcome().Model = StatePending, "", nil, ""
	j.EditOutcome().StartedAt = time.Time{}
	j.EditOutcome().Reason, j.EditOutcome().Message = reason, clip(msg)
	t.changedJob(j)
	t.jobEvent(j.Account, j, JobEvent{Type: EventRequeued, Reason: reason, Message: note})
}

// endAttempt records how the job's current attempt ended and what it was
// charged.
func (t *tx) endAttempt(j *Job, outcome JobState, reason Reason, msg string, charged Credits) {
	j.EditOutcome().Attempts = append(j.Attempts(), Attempt{N: j.Attempt, Host: j.Host(), GPUs: j.GPUs, Outcome: outcome, Reason: reason,
		Message: clip(msg), StartedAt: j.StartedAt(), EndedAt: t.at, Charged: charged})
	t.changedJob(j)
}

// failurePercent is the share of its runtime charge a failed or cancelled
// attempt of j pays: the price table's for metered jobs (an unfinished
// metered job implies a table, see [State.CheckInvariants]); none for
// fixed-cost jobs, which are released in full.
func (t *tx) failurePercent(j *Job) int {
	if !j.Metered {
		return 0
	}
	return t.s.Pricing.FailurePercent
}

// charge returns what j's attempt that ran for runtime is charged, pct
// percent of its full charge, and a note for the message. A fixed-cost job's
// full charge is its cost, all it holds; a metered job's is its GPU-seconds,
// rounded up to the second, at its model's price from the table (which an
// unfinished metered job implies), never more than it reserved.
func (t *tx) charge(j *Job, runtime time.Duration, pct int) (Credits, string) {
	if pct == 0 {
		return 0, ""
	}
	full, note := j.Reserved, ""
	if j.Metered {
		secs := ceilSeconds(runtime)
		price := t.s.Pricing.Price(j.Model())
		if c, ok := gpuSecondsCost(j.GPUs, secs, price); ok && c < j.Reserved {
			full = c
		}
		note = fmt.Sprintf("; metered: %d GPUs × %ds at %d per GPU-hour = %d", j.GPUs, secs, price, full)
	}
	c := full * Credits(pct) / 100 // no overflow: full ≤ MaxCredits < 2^53
	if j.Metered && pct < 100 {
		note += fmt.Sprintf(", %d%% charged = %d", pct, c)
	}
	return c, note
}

// finish settles j's reservation and moves it to a final state: it charges
// charged (at most what is held) and releases the rest. It is the only place
// a job leaves the active states, so no job is settled twice.
func (t *tx) finish(j *Job, to JobState, reason Reason, msg string, charged Credits) {
	if !j.State.Active() || !to.Terminal() || charged < 0 || charged > j.Reserved {
		panic(fmt.Sprintf("ledger: finish of job %s from %s to %s charging %d of %d", j.ID, j.State, to, charged, j.Reserved))
	}
	a := t.s.Accounts[j.Account]
	t.touch(a)
	if j.State.OnHost() {
		a.RunningJobs--
		a.RunningGPUs -= j.GPUs
	}
	held := j.Reserved
	j.Reserved, j.Charged = 0, charged
	a.Reserved -= held
	a.Balance -= charged
	t.journal(a, Entry{Kind: EntrySettle, Job: j.ID, Amount: charged, Reservation: held, Released: held - charged, Reason: reason})
	t.end(j, to, reason, msg)
}

// end moves j, which holds nothing (any reservation already settled), to the
// final state to and announces it.
func (t *tx) end(j *Job, to JobState, reason Reason, msg string) {
	t.stopWaiting(j)
	t.ended = append(t.ended, j)
	j.State, j.EditOutcome().Reason, j.EditOutcome().Message, j.EditOutcome().EndedAt = to, reason, clip(msg), t.at
	t.changedJob(j)
	t.jobEvent(j.Account, j, JobEvent{Type: finalEvent[to]})
}

var finalEvent = map[JobState]EventType{
	StateSucceeded: EventSucceeded,
	StateFailed:    EventFailed,
	StateCancelled: EventCancelled,
	StateRejected:  EventRejected,
}
