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
type Job struct {
	ID          string            `json:"id"`
	Account     string            `json:"account"`
	Priority    int               `json:"priority"`
	GPUs        int               `json:"gpus"`
	Cost        Credits           `json:"cost"` // reserved at submit
	Command     []string          `json:"command"`
	Env         map[string]string `json:"env,omitempty"`
	Walltime    time.Duration     `json:"walltime"`
	MaxAttempts int               `json:"max_attempts"`
	// Metered jobs reserve Cost = gpus × walltime × the highest price and
	// are charged for the runtime they use; see [Pricing].
	Metered bool `json:"metered,omitempty"`
	// Hold asks to wait, unreserved, when the account cannot pay yet,
	// instead of being rejected.
	Hold bool `json:"hold,omitempty"`
	// Name is the submitter's display name for the job, if any.
	Name string `json:"name,omitempty"`
	// GPUModel is the GPU model the job asks for; empty is any. The
	// scheduler places it only on hosts whose every GPU is that model.
	GPUModel string `json:"gpu_model,omitempty"`
	// Workdir is the job's working directory on its host; empty is the
	// attempt's own directory.
	Workdir string `json:"workdir,omitempty"`
	// ArrayID names the job array the job is task ArrayIndex of; empty
	// when it is no array's. An absent array_index is 0.
	ArrayID    string `json:"array_id,omitempty"`
	ArrayIndex int    `json:"array_index,omitempty"`
	// After and AfterAny are the jobs it was submitted to wait for (see
	// [Submit]); WaitingOn those of them that have not ended yet. A pending
	// job with WaitingOn is reserved but not dispatched.
	After     []string `json:"after,omitempty"`
	AfterAny  []string `json:"after_any,omitempty"`
	WaitingOn []string `json:"waiting_on,omitempty"`
	// Paused is a hold its owner put on the waiting job ([Modify]): it
	// keeps its reservation and place but is not dispatched until released.
	Paused bool `json:"paused,omitempty"`
	// SubmittedPriority is the priority it was submitted with, once an
	// update changed Priority; a resubmission is compared against it.
	SubmittedPriority *int `json:"submitted_priority,omitempty"`

	State JobState `json:"state"`
	// Attempt is the number of the current or last dispatch; 0 before the
	// first. Each dispatch decision names Attempt+1.
	Attempt int `json:"attempt"`
	// Failures counts attempts that ended lost, rejected by a worker or
	// ended by the infrastructure; the job fails when it reaches
	// MaxAttempts. A busy refusal counts here only past MaxBusyRefusals.
	Failures int `json:"failures"`
	// BusyRefusals counts attempts a worker refused only because the GPUs
	// it was sent to were taken ([Report.Busy]). They spend no attempt and
	// start no retry delay, up to [MaxBusyRefusals]; a busy refusal past
	// that counts in Failures as an ordinary worker rejection.
	BusyRefusals    int      `json:"busy_refusals,omitempty"`
	Host            string   `json:"host,omitempty"`
	Devices         []string `json:"devices,omitempty"`
	CancelRequested bool     `json:"cancel_requested,omitempty"`
	Model           string   `json:"model,omitempty"` // GPU model of the current attempt, as its worker reported

	Reserved Credits `json:"reserved"` // credits the job's reservation holds now (0 unless pending, dispatched or running)
	Charged  Credits `json:"charged"`  // credits charged at settlement

	ExitCode  *int   `json:"exit_code,omitempty"`
	RuntimeMS int64  `json:"runtime_ms,omitempty"`
	Reason    Reason `json:"reason,omitempty"` // why it was rejected, failed, cancelled or requeued
	Message   string `json:"message,omitempty"`

	Attempts []Attempt `json:"attempts,omitempty"` // every attempt that has ended

	// SubmitSeq is the log sequence of the accepted submission; it orders
	// jobs of equal priority by age.
	SubmitSeq    uint64    `json:"submit_seq"`
	SubmittedAt  time.Time `json:"submitted_at"`
	DispatchedAt time.Time `json:"dispatched_at,omitzero"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	EndedAt      time.Time `json:"ended_at,omitzero"`
	// Seq is the log sequence of the last command that changed the job.
	Seq uint64 `json:"seq"`
}

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
	c.Env = maps.Clone(j.Env)
	c.Devices = slices.Clone(j.Devices)
	c.Attempts = slices.Clone(j.Attempts)
	c.After, c.AfterAny, c.WaitingOn = slices.Clone(j.After), slices.Clone(j.AfterAny), slices.Clone(j.WaitingOn)
	if j.SubmittedPriority != nil {
		p := *j.SubmittedPriority
		c.SubmittedPriority = &p
	}
	if j.ExitCode != nil {
		e := *j.ExitCode
		c.ExitCode = &e
	}
	return &c
}

// sameTerms reports whether s asks for exactly what j was submitted with.
// s must have its defaults filled in.
func (j *Job) sameTerms(s Submit) bool {
	return j.Account == s.Account && j.submittedPriority() == s.Priority && j.GPUs == s.GPUs &&
		slices.Equal(j.After, s.After) && slices.Equal(j.AfterAny, s.AfterAny) &&
		(j.Metered || j.Cost == s.Cost) && j.Metered == s.Metered && j.Hold == s.Hold &&
		slices.Equal(j.Command, s.Command) && maps.Equal(j.Env, s.Env) &&
		j.Walltime == s.Walltime && j.MaxAttempts == s.MaxAttempts &&
		j.Name == s.Name &&
		j.GPUModel == s.GPUModel &&
		j.Workdir == s.Workdir &&
		j.ArrayID == s.ArrayID && j.ArrayIndex == s.ArrayIndex
}
