package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// submit reserves the job's cost and queues it, holds it, or rejects it.
//
// A job id held by an accepted (or held) job is taken for good: the same
// terms again are a harmless duplicate, other terms are a conflict. A
// rejected job does not hold its id; submitting it again is evaluated
// afresh, so a pipeline can retry a job that was refused for credits once
// the account is topped up.
func (t *tx) submit(c Submit) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		if checkID("account", c.Account) != nil || checkID("id", c.ID) != nil {
			t.emit(InvalidEvent{Account: c.Account, Job: c.ID, Reason: ReasonFor(err), Message: "submission rejected: " + err.Error()})
			return
		}
		// The event carries the state of the job holding the id, if any, so
		// a watcher of that job sees it is unaffected; else "rejected".
		t.jobEvent(c.Account, t.s.Jobs[c.ID], JobEvent{Type: EventRejected, Job: c.ID, State: StateRejected, Reason: ReasonFor(err),
			Message: fmt.Sprintf("submission of %s rejected: %v", c.ID, err)})
		return
	}
	if j, ok := t.s.Jobs[c.ID]; ok && j.State != StateRejected {
		if j.sameTerms(c) {
			t.jobEvent(c.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonDuplicate,
				Message: fmt.Sprintf("job %s was already submitted with the same terms; it is %s", c.ID, j.State)})
			return
		}
		t.jobEvent(c.Account, nil, JobEvent{Type: EventRejected, Job: c.ID, Reason: ReasonDuplicateConflict,
			Message: fmt.Sprintf("job id %s is taken by a job with other terms (%s); submit under a new id", c.ID, termDiff(j, c))})
		return
	}
	a := t.s.Accounts[c.Account]
	if a == nil {
		t.rejectSubmission(c, ReasonUnknownAccount,
			fmt.Sprintf("account %s does not exist; an admin must create it first", c.Account))
		return
	}
	waiting, reason, msg := t.dependencies(c)
	if reason != "" {
		t.rejectSubmission(c, reason, msg)
		return
	}
	cost, reason, msg := t.s.Pricing.Quote(c)
	if reason != "" {
		t.rejectSubmission(c, reason, msg)
		return
	}
	c.Cost = cost
	t.touch(a)
	if c.Cost > a.Available() || c.Hold && len(a.HeldJobs) > 0 {
		if !c.Hold {
			t.rejectSubmission(c, ReasonInsufficientCredits,
				fmt.Sprintf("job %s costs %d but account %s has %d available (balance %d, reserved %d)",
					c.ID, c.Cost, a.ID, a.Available(), a.Balance, a.Reserved))
			return
		}
		if len(a.HeldJobs) >= MaxHeldJobs {
			t.rejectSubmission(c, ReasonTooManyHeld, fmt.Sprintf("account %s already holds %d jobs waiting for credits", a.ID, len(a.HeldJobs)))
			return
		}
		// Held jobs are admitted in submit order, so a new one waits behind
		// any already held even if it is cheap enough now.
		j := newJob(c, t.seq, t)
		t.await(a, j, waiting)
		j.State = StateHeld
		t.s.Jobs[j.ID] = j
		t.changedJob(j)
		a.HeldJobs = append(a.HeldJobs, j.ID)
		t.changedAccount(a)
		msg := fmt.Sprintf("held: it costs %d, account %s has %d available; it is reserved and queued when the account can pay", j.Cost, a.ID, a.Available())
		if ahead := len(a.HeldJobs) - 1; ahead > 0 {
			msg += fmt.Sprintf(", after the %d held jobs before it", ahead)
		}
		t.jobEvent(a.ID, j, JobEvent{Type: EventHeld, Message: msg})
		return
	}
	j := newJob(c, t.seq, t)
	t.await(a, j, waiting)
	t.reserve(a, j, fmt.Sprintf("reserved %d of %d available%s", c.Cost, a.Available(), waitNote(j)))
}

// reserve holds j's cost on a and queues j.
func (t *tx) reserve(a *Account, j *Job, msg string) {
	j.State, j.Reserved = StatePending, j.Cost
	a.Reserved += j.Cost // cannot overflow: Cost ≤ Available ≤ Balance - Reserved
	t.s.Jobs[j.ID] = j
	t.changedJob(j)
	t.changedAccount(a)
	t.journal(a, Entry{Kind: EntryReserve, Job: j.ID, Amount: j.Cost})
	t.jobEvent(a.ID, j, JobEvent{Type: EventAccepted, Message: msg})
}

// admitHeld reserves and queues a's held jobs, oldest first, while the
// account can pay for the next one.
func (t *tx) admitHeld(a *Account) {
	if len(a.HeldJobs) == 0 {
		return
	}
	t.touch(a)
	for len(a.HeldJobs) > 0 {
		j := t.s.Jobs[a.HeldJobs[0]]
		if j.Cost > a.Available() {
			return
		}
		a.HeldJobs = a.HeldJobs[1:]
		t.reserve(a, j, fmt.Sprintf("reserved %d of %d available after waiting for credits since %s",
			j.Cost, a.Available(), j.SubmittedAt.Format(time.RFC3339)))
	}
}

// setPricing replaces the price table.
func (t *tx) setPricing(c SetPricing) {
	if err := c.Validate(); err != nil {
		t.emit(ConfigEvent{Type: EventRejected, OpID: c.ID, Reason: ReasonFor(err), Message: "price table rejected: " + err.Error()})
		return
	}
	if p := t.s.Pricing; p != nil && p.OpID == c.ID {
		t.emit(ConfigEvent{Type: EventIgnored, OpID: c.ID, Reason: ReasonDuplicate, Message: fmt.Sprintf("op %s was already applied", c.ID)})
		return
	}
	t.s.Pricing = &Pricing{PerGPUHour: maps.Clone(c.PerGPUHour), Default: c.Default, FailurePercent: c.FailurePercent,
		FixedCost: c.FixedCost, OpID: c.ID, Seq: t.seq}
	t.res.Changed = append(t.res.Changed, Key{Kind: KeyPricing})
	t.emit(ConfigEvent{Type: EventPricingSet, OpID: c.ID, Message: t.s.Pricing.String()})
}

// admit brings an account's refill up to now; admitHeld, which runs after
// every command that touched an account, then admits what it can pay for.
func (t *tx) admit(c Admit) {
	if err := c.Validate(); err != nil {
		t.emit(InvalidEvent{Reason: ReasonFor(err), Message: "admit decision rejected: " + err.Error()})
		return
	}
	a := t.s.Accounts[c.Account]
	if a == nil {
		t.emit(InvalidEvent{Account: c.Account, Reason: ReasonUnknownAccount, Message: fmt.Sprintf("admit decision for unknown account %s", c.Account)})
		return
	}
	t.touch(a)
}

// rejectSubmission records a refused submission as a rejected job, replacing
// an earlier rejected record of the same id, and says why. The record keeps
// only what the answer states (the id, the account, the terms that set the
// price, the reason): not the command or the env, which a refused job never
// needs and which would keep every refused submission's bulk in memory and
// in the store.
func (t *tx) rejectSubmission(c Submit, reason Reason, msg string) {
	c.Command, c.Env = nil, nil
	j := newJob(c, 0, t)
	t.s.Jobs[j.ID] = j
	t.end(j, StateRejected, reason, msg)
}

func newJob(c Submit, submitSeq uint64, t *tx) *Job {
	j := &Job{
		ID:          c.ID,
		Account:     c.Account,
		Priority:    c.Priority,
		GPUs:        c.GPUs,
		Cost:        c.Cost,
		Command:     slices.Clone(c.Command),
		Walltime:    c.Walltime,
		MaxAttempts: c.MaxAttempts,
		Metered:     c.Metered,
		Hold:        c.Hold,
		SubmitSeq:   submitSeq,
		SubmittedAt: t.at,
	}
	o := JobOptions{
		Env:        maps.Clone(c.Env),
		Name:       c.Name,
		GPUModel:   c.GPUModel,
		Workdir:    c.Workdir,
		ArrayID:    c.ArrayID,
		ArrayIndex: c.ArrayIndex,
		After:      slices.Clone(c.After),
		AfterAny:   slices.Clone(c.AfterAny),
	}
	if !o.zero() {
		j.JobOptions = new(JobOptions) // not &o, which would put every o on the heap
		*j.JobOptions = o
	}
	return j
}

// termDiff names the terms in which c differs from the existing job j.
func termDiff(j *Job, c Submit) string {
	var d []string
	if j.Account != c.Account {
		return "it belongs to another account"
	}
	if p := j.submittedPriority(); p != c.Priority {
		d = append(d, fmt.Sprintf("priority %d, not %d", p, c.Priority))
	}
	if !slices.Equal(j.After(), c.After) || !slices.Equal(j.AfterAny(), c.AfterAny) {
		d = append(d, "other dependencies")
	}
	if j.GPUs != c.GPUs {
		d = append(d, fmt.Sprintf("gpus %d, not %d", j.GPUs, c.GPUs))
	}
	if j.Metered != c.Metered {
		d = append(d, fmt.Sprintf("metered %v, not %v", j.Metered, c.Metered))
	} else if !j.Metered && j.Cost != c.Cost {
		d = append(d, fmt.Sprintf("cost %d, not %d", j.Cost, c.Cost))
	}
	if j.Hold != c.Hold {
		d = append(d, fmt.Sprintf("hold %v, not %v", j.Hold, c.Hold))
	}
	if !slices.Equal(j.Command, c.Command) {
		d = append(d, "another command")
	}
	if !maps.Equal(j.Env(), c.Env) {
		d = append(d, "another env")
	}
	if j.Walltime != c.Walltime {
		d = append(d, fmt.Sprintf("walltime %v, not %v", j.Walltime, c.Walltime))
	}
	if j.MaxAttempts != c.MaxAttempts {
		d = append(d, fmt.Sprintf("max_attempts %d, not %d", j.MaxAttempts, c.MaxAttempts))
	}
	if j.Name() != c.Name {
		d = append(d, fmt.Sprintf("name %s, not %s", preview(j.Name()), preview(c.Name)))
	}
	if j.GPUModel() != c.GPUModel {
		d = append(d, fmt.Sprintf("gpu_model %s, not %s", preview(j.GPUModel()), preview(c.GPUModel)))
	}
	if j.Workdir() != c.Workdir {
		d = append(d, fmt.Sprintf("workdir %s, not %s", preview(j.Workdir()), preview(c.Workdir)))
	}
	if j.ArrayID() != c.ArrayID || j.ArrayIndex() != c.ArrayIndex {
		d = append(d, fmt.Sprintf("array task %s[%d], not %s[%d]", preview(j.ArrayID()), j.ArrayIndex(), preview(c.ArrayID), c.ArrayIndex))
	}
	return "it has " + strings.Join(d, ", ")
}

// jobEvent emits e about job j (nil when e concerns a job id with no record,
// in which case e.Job must be set) on account's subject, filling in the job's
// state and the account's balances.
func (t *tx) jobEvent(account string, j *Job, e JobEvent) {
	e.Account = account
	if j != nil {
		e.Job, e.State, e.Attempt, e.Host = j.ID, j.State, j.Attempt, j.Host()
		if e.Reason == "" && e.Message == "" {
			e.Reason, e.Message = j.Reason(), j.Message()
		}
		e.Charged = j.Charged
		if e.ExitCode == nil && j.State.Terminal() && j.ExitCode() != nil {
			code := *j.ExitCode()
			e.ExitCode = &code
		}
	}
	if a := t.s.Accounts[account]; a != nil {
		e.Balance, e.Available = a.Balance, a.Available()
	}
	t.emit(e)
}
