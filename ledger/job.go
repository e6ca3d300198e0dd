package ledger

import (
	"maps"
	"slices"
	"time"
)

// JobState is where a job is in its life.
//
//	pending → dispatched → running → succeeded | failed | cancelled
//	pending → cancelled
//	dispatched | running → (lost, or rejected by the worker) → pending (retry) | failed | cancelled
//	dispatched → (refused by the worker, its GPUs busy) → pending, the attempt not spent
//	held → pending (the account can pay) | cancelled
//
// A submission that is never accepted is rejected and never holds credits.
// One submitted with hold that the account cannot pay for yet is held: it
// waits without reserving, and is reserved and queued, in submit order, when
// a refill or a grant lets the account pay.
type JobState string

// Job states.
const (
	StatePending    JobState = "pending"    // reserved, waiting for a host
	StateDispatched JobState = "dispatched" // sent to a host, not yet started
	StateRunning    JobState = "running"    // the worker reported it started
	StateSucceeded  JobState = "succeeded"  // exited 0; charged
	StateFailed     JobState = "failed"     // exited non-zero or ran out of attempts; released
	StateCancelled  JobState = "cancelled"  // cancelled by a user; released
	StateRejected   JobState = "rejected"   // never accepted; never held credits
	StateHeld       JobState = "held"       // waiting, unreserved, for the account to afford it
)

// Active reports whether a job in state s holds a reservation.
func (s JobState) Active() bool {
	return s == StatePending || s == StateDispatched || s == StateRunning
}

// OnHost reports whether a job in state s has been sent to a host and not
// yet come back: it counts against its account's running caps.
func (s JobState) OnHost() bool { return s == StateDispatched || s == StateRunning }

// Terminal reports whether s is a final state.
func (s JobState) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled || s == StateRejected
}

// Job is one submitted job. Its ID is the submitter's idempotency key and is
// unique across accounts.
//
// What every job has is held in the struct itself; the submit options most
// jobs leave unset ([JobOptions]) and what a dispatch, a run and an end
// record ([JobOutcome]) are held behind pointers that stay nil while all of
// it is unset, so a pending job costs its ledger a third of the memory (a
// million of them are a takeover's load). Read those fields through the
// methods of the same names, which answer the zero value while the pointer
// is nil, and write them through [Job.EditOptions] and [Job.EditOutcome].
// The stored and wire encoding is that of the flat struct: the pointers do
// not show in it.
type Job struct {
	ID          string
	Account     string
	Priority    int
	GPUs        int
	Cost        Credits // reserved at submit
	Command     []string
	Walltime    time.Duration
	MaxAttempts int
	// Metered jobs reserve Cost = gpus × walltime × the highest price and
	// are charged for the runtime they use; see [Pricing].
	Metered bool
	// Hold asks to wait, unreserved, when the account cannot pay yet,
	// instead of being rejected.
	Hold bool
	// Paused is a hold its owner put on the waiting job ([Modify]): it
	// keeps its reservation and place but is not dispatched until released.
	Paused bool
	// CancelRequested is set when a cancel reaches a job on a host.
	CancelRequested bool

	*JobOptions // nil while every option is unset

	State JobState
	// Attempt is the number of the current or last dispatch; 0 before the
	// first. Each dispatch decision names Attempt+1.
	Attempt int
	// Failures counts attempts that ended lost, rejected by a worker or
	// ended by the infrastructure; the job fails when it reaches
	// MaxAttempts. A busy refusal counts here only past MaxBusyRefusals.
	Failures int
	// BusyRefusals counts attempts a worker refused only because the GPUs
	// it was sent to were taken ([Report.Busy]). They spend no attempt and
	// start no retry delay, up to [MaxBusyRefusals]; a busy refusal past
	// that counts in Failures as an ordinary worker rejection.
	BusyRefusals int

	Reserved Credits // credits the job's reservation holds now (0 unless pending, dispatched or running)
	Charged  Credits // credits charged at settlement

	*JobOutcome // nil until a dispatch or an end records anything

	// SubmitSeq is the log sequence of the accepted submission; it orders
	// jobs of equal priority by age.
	SubmitSeq   uint64
	SubmittedAt time.Time
	// Seq is the log sequence of the last command that changed the job.
	Seq uint64
}

// JobOptions are the submit options most jobs leave unset.
type JobOptions struct {
	Env map[string]string
	// Name is the submitter's display name for the job, if any.
	Name string
	// GPUModel is the GPU model the job asks for; empty is any. The
	// scheduler places it only on hosts whose every GPU is that model.
	GPUModel string
	// Workdir is the job's working directory on its host; empty is the
	// attempt's own directory.
	Workdir string
	// ArrayID names the job array the job is task ArrayIndex of; empty
	// when it is no array's. An absent array_index is 0.
	ArrayID    string
	ArrayIndex int
	// After and AfterAny are the jobs it was submitted to wait for (see
	// [Submit]); WaitingOn those of them that have not ended yet. A pending
	// job with WaitingOn is reserved but not dispatched.
	After     []string
	AfterAny  []string
	WaitingOn []string
	// SubmittedPriority is the priority it was submitted with, once an
	// update changed Priority; a resubmission is compared against it.
	SubmittedPriority *int
}

// JobOutcome is what a job's dispatches, runs and end record.
type JobOutcome struct {
	Host    string
	Devices []string
	Model   string // GPU model of the current attempt, as its worker reported

	ExitCode  *int
	RuntimeMS int64
	Reason    Reason // why it was rejected, failed, cancelled or requeued
	Message   string

	Attempts []Attempt // every attempt that has ended

	DispatchedAt time.Time
	StartedAt    time.Time
	EndedAt      time.Time
}

// EditOptions returns j's options to write, allocating them on first use.
func (j *Job) EditOptions() *JobOptions {
	if j.JobOptions == nil {
		j.JobOptions = &JobOptions{}
	}
	return j.JobOptions
}

// EditOutcome returns j's outcome to write, allocating it on first use.
func (j *Job) EditOutcome() *JobOutcome {
	if j.JobOutcome == nil {
		j.JobOutcome = &JobOutcome{}
	}
	return j.JobOutcome
}

func (j *Job) opts() *JobOptions {
	if j.JobOptions == nil {
		return &noOptions
	}
	return j.JobOptions
}

func (j *Job) out() *JobOutcome {
	if j.JobOutcome == nil {
		return &noOutcome
	}
	return j.JobOutcome
}

// noOptions and noOutcome are what a job without them reads; never written.
var (
	noOptions JobOptions
	noOutcome JobOutcome
)

// Env is the job's environment beyond its host's.
func (j *Job) Env() map[string]string { return j.opts().Env }

// Name is the submitter's display name for the job, if any.
func (j *Job) Name() string { return j.opts().Name }

// GPUModel is the GPU model the job asks for; empty is any.
func (j *Job) GPUModel() string { return j.opts().GPUModel }

// Workdir is the job's working directory on its host, if set.
func (j *Job) Workdir() string { return j.opts().Workdir }

// ArrayID names the job array the job is a task of, if any.
func (j *Job) ArrayID() string { return j.opts().ArrayID }

// ArrayIndex is the job's index in its array.
func (j *Job) ArrayIndex() int { return j.opts().ArrayIndex }

// After are the jobs it waits to succeed.
func (j *Job) After() []string { return j.opts().After }

// AfterAny are the jobs it waits to end.
func (j *Job) AfterAny() []string { return j.opts().AfterAny }

// WaitingOn are those of After and AfterAny that have not ended yet.
func (j *Job) WaitingOn() []string { return j.opts().WaitingOn }

// SubmittedPriority is the priority it was submitted with, once an update
// changed Priority; nil before.
func (j *Job) SubmittedPriority() *int { return j.opts().SubmittedPriority }

// Host is the host of the current or last attempt.
func (j *Job) Host() string { return j.out().Host }

// Devices are the GPUs of the current attempt.
func (j *Job) Devices() []string { return j.out().Devices }

// Model is the GPU model of the current attempt, as its worker reported.
func (j *Job) Model() string { return j.out().Model }

// ExitCode is the exit code of the job's end, if it ran to one.
func (j *Job) ExitCode() *int { return j.out().ExitCode }

// RuntimeMS is the runtime of the last attempt, once it ended.
func (j *Job) RuntimeMS() int64 { return j.out().RuntimeMS }

// Reason says why it was rejected, failed, cancelled or requeued.
func (j *Job) Reason() Reason { return j.out().Reason }

// Message explains Reason.
func (j *Job) Message() string { return j.out().Message }

// Attempts are every attempt that has ended.
func (j *Job) Attempts() []Attempt { return j.out().Attempts }

// DispatchedAt is when the current or last attempt was dispatched.
func (j *Job) DispatchedAt() time.Time { return j.out().DispatchedAt }

// StartedAt is when the current or last attempt started.
func (j *Job) StartedAt() time.Time { return j.out().StartedAt }

// EndedAt is when the job ended.
func (j *Job) EndedAt() time.Time { return j.out().EndedAt }

// Attempt records how one dispatch of a job ended.
type Attempt struct {
	N         int       `json:"n"`
	Host      string    `json:"host"`
	GPUs      int       `json:"gpus"`
	Outcome   JobState  `json:"outcome"` // the state the attempt led to
	Reason    Reason    `json:"reason,omitempty"`
	Message   string    `json:"message,omitempty"`
	StartedAt time.Time `json:"started_at,omitzero"` // zero if it never started
	EndedAt   time.Time `json:"ended_at"`
	Charged   Credits   `json:"charged,omitempty"`
}

// Clone returns a deep copy.
func (j *Job) Clone() *Job {
	c := *j
	c.Command = slices.Clone(j.Command)
	if o := j.JobOptions; o != nil {
		co := *o
		co.Env = maps.Clone(o.Env)
		co.After, co.AfterAny, co.WaitingOn = slices.Clone(o.After), slices.Clone(o.AfterAny), slices.Clone(o.WaitingOn)
		if o.SubmittedPriority != nil {
			p := *o.SubmittedPriority
			co.SubmittedPriority = &p
		}
		c.JobOptions = &co
	}
	if o := j.JobOutcome; o != nil {
		co := *o
		co.Devices = slices.Clone(o.Devices)
		co.Attempts = slices.Clone(o.Attempts)
		if o.ExitCode != nil {
			e := *o.ExitCode
			co.ExitCode = &e
		}
		c.JobOutcome = &co
	}
	return &c
}

// sameTerms reports whether s asks for exactly what j was submitted with.
// s must have its defaults filled in.
func (j *Job) sameTerms(s Submit) bool {
	return j.Account == s.Account && j.submittedPriority() == s.Priority && j.GPUs == s.GPUs &&
		slices.Equal(j.After(), s.After) && slices.Equal(j.AfterAny(), s.AfterAny) &&
		(j.Metered || j.Cost == s.Cost) && j.Metered == s.Metered && j.Hold == s.Hold &&
		slices.Equal(j.Command, s.Command) && maps.Equal(j.Env(), s.Env) &&
		j.Walltime == s.Walltime && j.MaxAttempts == s.MaxAttempts &&
		j.Name() == s.Name &&
		j.GPUModel() == s.GPUModel &&
		j.Workdir() == s.Workdir &&
		j.ArrayID() == s.ArrayID && j.ArrayIndex() == s.ArrayIndex
}
