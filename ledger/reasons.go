package ledger

// Reason is the machine-readable cause carried by a rejection, an ignored
// command, a failure or a requeue. Scripts branch on it; people read the
// message that comes with it.
type Reason string

// Reasons a command is rejected: it asked for something and got nothing.
const (
	ReasonInvalid             Reason = "invalid"              // the command is malformed or out of range
	ReasonUnknownAccount      Reason = "unknown_account"      // the account does not exist
	ReasonInsufficientCredits Reason = "insufficient_credits" // the account cannot pay
	ReasonDuplicateConflict   Reason = "duplicate_conflict"   // the id was used before with other terms
	ReasonAccountMismatch     Reason = "account_mismatch"     // the body or the job names another account
	ReasonAccountExists       Reason = "account_exists"       // create of an existing account
	ReasonOverflow            Reason = "overflow"             // an amount would leave the credit range
	ReasonUnknownJob          Reason = "unknown_job"          // no job has this id
	ReasonUnplaceable         Reason = "unplaceable"          // no host could ever fit the job (scheduler)
	ReasonNoPrice             Reason = "no_price"             // a metered job with no price table, or only zero prices
	ReasonTooManyHeld         Reason = "too_many_held"        // the account already has MaxHeldJobs held
	ReasonTooLarge            Reason = "too_large"            // a field, or a record the command would produce, passes its size limit
	ReasonMeteredOnly         Reason = "metered_only"         // a fixed cost where the price table takes metered jobs only
	ReasonBelowPriceFloor     Reason = "below_price_floor"    // a fixed cost below the price table's floor for the job
	ReasonUnknownDependency   Reason = "unknown_dependency"   // a dependency names no job of the account (never submitted, rejected, or archived)
	ReasonNotWaiting          Reason = "not_waiting"          // a hold, release or update of a job that is no longer waiting
)

// Reasons a well-formed command changed nothing. The command is consumed; the
// event that says so lets a user or an operator see why.
const (
	ReasonDuplicate         Reason = "duplicate"          // the same command was applied before
	ReasonAlreadyTerminal   Reason = "already_terminal"   // the job has finished
	ReasonAlreadyCancelling Reason = "already_cancelling" // a cancel is already on its way
	ReasonStaleAttempt      Reason = "stale_attempt"      // the report or decision is for another attempt
	ReasonWrongHost         Reason = "wrong_host"         // the report is not from the job's host
	ReasonBadState          Reason = "bad_state"          // the report makes no sense in the job's state
	ReasonBadDevices        Reason = "bad_devices"        // started with a device count other than the job's GPUs
	ReasonNotPending        Reason = "not_pending"        // a dispatch decision for a job that is not pending
	ReasonMaxRunningJobs    Reason = "max_running_jobs"   // the dispatch would exceed the account's job cap
	ReasonMaxRunningGPUs    Reason = "max_running_gpus"   // the dispatch would exceed the account's GPU cap
	ReasonUnchanged         Reason = "unchanged"          // a hold of a paused job, a release of one not paused, an update to the same priority
)

// Reasons an attempt or a job ended without success.
const (
	ReasonExitCode          Reason = "exit_code"       // the command exited non-zero
	ReasonCancelled         Reason = "cancelled"       // a user cancelled the job
	ReasonLost              Reason = "lost"            // the attempt's host or process vanished
	ReasonWorkerRejected    Reason = "worker_rejected" // the worker could not start the attempt
	ReasonHostBusy          Reason = "host_busy"       // the worker found the GPUs it was sent to taken; the attempt is not spent
	ReasonInfrastructure    Reason = "infrastructure"  // the attempt ended through no fault of the job (a GPU error, a drained worker)
	ReasonAttemptsExhausted Reason = "attempts_exhausted"
	ReasonDependencyFailed  Reason = "dependency_failed" // a job it waited for (afterok) ended without success
)

// Reasons a waiting job is held back, in a [JobEvent] when it starts or
// stops waiting.
const (
	ReasonUserHold   Reason = "user_hold"  // its owner paused it ([Modify] hold)
	ReasonDependency Reason = "dependency" // it waits for jobs named by after or after_any
)
