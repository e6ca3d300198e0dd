package ledger

import "time"

// Result is what one [State.Apply] did.
type Result struct {
	// Skipped is true when the command was already reflected in the state
	// (a replay) and nothing was done or emitted.
	Skipped bool
	// Changed lists the keys the command changed, each once, in the order
	// first changed. The caller persists exactly these; a job key whose job
	// is no longer in the state was archived, and the caller removes it.
	Changed []Key
	// Effects are the messages to send, in order, after Changed is persisted.
	Effects []Effect
}

// KeyKind says which map of [State] a [Key] names.
type KeyKind uint8

// Key kinds.
const (
	KeyAccount KeyKind = iota + 1
	KeyJob
	KeyPricing // State.Pricing; its ID is ""
)

// Key names one account or job of the state.
type Key struct {
	Kind KeyKind
	ID   string
}

// Effect is a message Apply asks the caller to send: a [JobEvent],
// [AccountEvent], [ConfigEvent], [InvalidEvent], [Entry], [DispatchOrder],
// [CancelOrder] or [ArchivedJob].
type Effect interface{ isEffect() }

// EventType is the type of a [JobEvent] or [AccountEvent].
type EventType string

// Job event types.
const (
	EventAccepted        EventType = "accepted"         // reserved and queued
	EventHeld            EventType = "held"             // waiting, unreserved, until the account can pay
	EventRejected        EventType = "rejected"         // the submission was refused; nothing held
	EventDispatched      EventType = "dispatched"       // sent to a host
	EventStarted         EventType = "started"          // running on its devices
	EventSucceeded       EventType = "succeeded"        // exited 0; charged
	EventFailed          EventType = "failed"           // ended without success; released
	EventCancelled       EventType = "cancelled"        // cancelled; released
	EventCancelRequested EventType = "cancel_requested" // a cancel order went to the host
	EventLost            EventType = "lost"             // the attempt vanished
	EventRequeued        EventType = "requeued"         // pending again, for another attempt
	EventIgnored         EventType = "ignored"          // a command about the job changed nothing
	EventDependencyMet   EventType = "dependency_met"   // a dependency ended and no longer holds it back
	EventPaused          EventType = "paused"           // its owner holds it: not dispatched until released
	EventResumed         EventType = "resumed"          // its owner released it
	EventUpdated         EventType = "updated"          // its owner changed its priority
)

// Account event types.
const (
	EventCreated   EventType = "created"
	EventGranted   EventType = "granted"
	EventLimitsSet EventType = "limits_set"
	EventRefillSet EventType = "refill_set"
	EventWeightSet EventType = "weight_set"
	// EventRejected and EventIgnored are used for account events too.
)

// JobEvent is a fact about a job, published on gpuq.event.<account>.job.<job>.
// Balance and Available are the account's after the command.
type JobEvent struct {
	Type      EventType
	Job       string
	Account   string
	State     JobState // the job's state after the command ("" if it has no record)
	Attempt   int
	Host      string
	Devices   []string
	Reason    Reason
	Message   string
	Charged   Credits
	Balance   Credits
	Available Credits
	ExitCode  *int
}

// AccountEvent is an account fact or an admin outcome, published on
// gpuq.event.<account>.account.
type AccountEvent struct {
	Type      EventType
	Account   string
	OpID      string
	Op        AdminOp
	Reason    Reason
	Message   string
	Balance   Credits
	Reserved  Credits
	Available Credits
}

// ConfigEvent is the outcome of a configuration command (the price table),
// published on gpuq.event.config.
type ConfigEvent struct {
	Type    EventType // EventPricingSet, EventRejected or EventIgnored
	OpID    string
	Reason  Reason
	Message string
}

// EventPricingSet is the type of a [ConfigEvent] for a new price table.
const EventPricingSet EventType = "pricing_set"

// InvalidEvent is the rejection of a command that could not be decoded or
// addressed, published on gpuq.event.<account>.invalid, or on
// gpuq.event.invalid when no valid account is known.
type InvalidEvent struct {
	Account string // "" when the command named no valid account
	Job     string // the job the command was about, if known
	Reason  Reason
	Message string
}

// EntryKind is the kind of balance movement a journal [Entry] records.
type EntryKind string

// Entry kinds and what each does to the account:
//
//	grant:   balance += amount (amount may be negative)
//	refill:  balance += amount
//	reserve: reserved += amount
//	settle:  reserved -= held, balance -= amount (the charge); held - amount is released
//	seal:    nothing; states balance and reserved (see [EntrySeal])
//
// A job is reserved once and settled once; its settle entry says what it
// held, what it was charged and what was released, and why.
const (
	EntryGrant   EntryKind = "grant"
	EntryRefill  EntryKind = "refill"
	EntryReserve EntryKind = "reserve"
	EntrySettle  EntryKind = "settle"
)

// Entry is one balance movement, published on gpuq.journal.<account>.
// Balance and Reserved are the account's after the movement.
type Entry struct {
	Kind        EntryKind
	Account     string
	Job         string // reserve, settle
	OpID        string // grant
	Amount      Credits
	Reservation Credits // settle: the reservation being settled
	Released    Credits // settle: Reservation - Amount
	Balance     Credits
	Reserved    Credits
	Reason      Reason // settle: how the job ended ("" for success)
	// Where the entry stands in the account's hash chain (see [EntryHash]):
	// the command it came from and that command's time, its position
	// (1 for the first), the hash of the entry before it ("" for the
	// first) and its own.
	Seq  uint64
	Time time.Time
	N    uint64
	Prev string
	Hash string
}

// DispatchOrder tells Host to run attempt Attempt of a job, published on
// gpuq.dispatch.<host>. It carries everything the worker needs.
type DispatchOrder struct {
	Host     string
	Job      string
	Account  string
	Attempt  int
	GPUs     int
	Command  []string
	Env      map[string]string
	Walltime time.Duration
	// Workdir is the job's working directory; empty is the attempt's own.
	Workdir string
	// ArrayID and ArrayIndex place the job in its array, if any: the
	// worker sets GPUQ_ARRAY_ID and GPUQ_ARRAY_INDEX from them.
	ArrayID    string
	ArrayIndex int
}

// CancelOrder tells Host to stop attempt Attempt of Job, published on the
// same subject as the dispatch so it arrives after it.
type CancelOrder struct {
	Host    string
	Job     string
	Account string
	Attempt int
}

func (JobEvent) isEffect()      {}
func (AccountEvent) isEffect()  {}
func (ConfigEvent) isEffect()   {}
func (InvalidEvent) isEffect()  {}
func (Entry) isEffect()         {}
func (DispatchOrder) isEffect() {}
func (CancelOrder) isEffect()   {}
