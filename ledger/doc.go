// Package ledger is gpuq's credit state machine: accounts with credit
// balances, jobs with reservations, and the one function that moves them,
// [State.Apply].
//
// Apply folds one command of the ordered command log into the state, given
// the command's log sequence and its server timestamp, and returns the keys it
// changed and the effects to send (job and account events, journal entries,
// dispatch and cancel orders). It performs no I/O, reads no clock, starts no
// goroutine and logs nothing: callers persist the changed keys, send the
// effects and supply the time, so a replay of the same log computes the same
// ledger to the credit. The package imports only the standard library.
//
// # Sizes
//
// Every record and effect Apply produces fits [MaxRecordBytes] as JSON, by
// construction: each free-form field of a command is bounded by the size of
// its JSON encoding, escapes included ([EncodedLen]), strings must be valid
// UTF-8, messages are cut to [MaxMessageBytes], and Apply refuses, with
// [ReasonTooLarge], any command whose outcome would still pass the limit.
// A refused submission keeps no command or env.
//
// A [Job] holds what every job has in the struct itself; its rarely-set
// submit options ([JobOptions]) and what its dispatches, runs and end record
// ([JobOutcome]) sit behind pointers that stay nil while empty, read through
// methods of the fields' names: a pending job submitted without options
// holds neither. Its encoding is the flat [JobRecord]'s, written and read by
// a codec of the package's own that matches encoding/json byte for byte and
// hands anything unusual to it.
//
// # Money
//
// Credits are integers ([Credits]) bounded by [MaxCredits]; every sum is
// checked. A submission's cost is the one it gives, or for a metered job
// gpus × walltime at the highest price of the table ([Pricing]). A table
// may refuse fixed costs, or those below gpus × walltime at its highest price
// ([FixedCostPolicy]), so a submitter cannot name its own price. A
// submission reserves its cost at once if the account can pay for it;
// otherwise it is rejected, unless it asked to be held ([Submit.Hold]). A
// held job reserves nothing while it waits: an account's held jobs are
// reserved in submit order as it can pay for them, and a submission that asks
// to be held queues behind them even if it could be paid for now. An account
// can never have more reserved than it owns. The reservation is held while
// the job is pending, dispatched or running, and is then settled exactly
// once: what the job owes is charged and the rest released. A fixed-cost job
// is charged its cost on success and nothing otherwise. A metered job is
// charged for the runtime it used at its GPU model's price on success (never
// more than it reserved), and [Pricing.FailurePercent] of that when its
// attempt exits non-zero, cancelled or not. An attempt that is lost, refused
// by its worker or ended by the infrastructure is never charged, nor is a job
// cancelled before it runs. Every balance movement is also a journal
// [Entry], so balances can be recomputed from the journal alone ([Books]).
// [Pricing.Quote] computes what a submission reserves, the same function the
// fold uses, so a dry run quotes exactly.
//
// # Dependencies and pauses
//
// A submission may wait for jobs of its account ([Submit.After] for
// afterok, [Submit.AfterAny] for afterany, at most [MaxDependencies]). The
// dependant is reserved like any job and stays pending, not dispatchable,
// while [Job.WaitingOn] is not empty; when an afterok dependency ends
// without success, the fold fails it with [ReasonDependencyFailed] and
// releases its reservation (see deps.go for the rules of refusal). Its
// owner may also pause a waiting job, release it, or change its priority
// ([Modify]): a paused job ([Job.Paused]) keeps its reservation and its
// place. [Job.Gated] says a pending job is held back by either; the fold
// ignores a dispatch of it.
//
// # Attempts
//
// Each dispatch is an attempt. One that is lost, refused by its worker or
// ended by the infrastructure counts in [Job.Failures], and the job fails
// once they reach its max_attempts. A refusal only because the GPUs were
// taken ([Report.Busy]) spends no attempt, up to [MaxBusyRefusals] of them
// per job. A worker's report counts only from the job's current attempt and
// host; a started report for any other run (an order taken after its
// attempt was lost, or run again by a restarted worker) also sends that
// host a [CancelOrder] for it, so the run nobody wants is stopped.
//
// # Caps
//
// An account's [Limits] cap the jobs it runs at once and their GPUs.
// [CapBlocks] is the rule: the fold ignores a dispatch decision it blocks
// (with its reason, max_running_jobs or max_running_gpus), and the scheduler
// applies the same function before deciding one and when explaining a
// waiting job, so the three cannot disagree.
//
// # Replays
//
// Every account and job, and the price table, records the sequence of the
// last command that changed it. A command at sequence s whose keys (the
// accounts and jobs it names, and the price table if it reads it: a
// submission, a report or a new table) include one with a recorded sequence
// of s or more is already reflected in the state, and Apply skips it. A
// command whose keys are all older was applied against exactly these values
// the first time, so applying it again changes nothing. Together, re-applying
// any prefix of the log is harmless, with one exception: a command naming a
// job that an [Archive] has since removed no longer finds it. The scheduler
// replays only the commands after its checkpoint, against the records as of
// the checkpoint, which still hold such a job.
//
// # Archives
//
// A job that ended more than a retention ago leaves the state by an
// [Archive] decision, which hands its final record over for the history
// store ([ArchivedJob]) and frees its id. Archives move no credit.
//
// # Invariants
//
// After every transition Apply checks the invariants of what it touched and
// panics if one is broken: a wrong balance must never be persisted.
// [State.CheckInvariants] checks the whole state, including that each
// account's reserved credits equal the sum held by its unfinished jobs.
//
// A minimal flow:
//
//	s := ledger.New()
//	s.Apply(ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 1000}, 1, t0)
//	s.Apply(ledger.Submit{Account: "vision", ID: "train-42", GPUs: 2, Cost: 120, Command: []string{"python", "train.py"}}, 2, t0)
//	s.Apply(ledger.Dispatch{Job: "train-42", Attempt: 1, Host: "h1"}, 3, t0)
//	s.Apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: "train-42", Attempt: 1, Devices: []string{"GPU-a", "GPU-b"}}, 4, t0)
//	s.Apply(ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "train-42", Attempt: 1, ExitCode: 0}, 5, t0)
//	// vision: balance 880, reserved 0
package ledger
