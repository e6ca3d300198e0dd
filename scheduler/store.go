package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// The seams between the scheduler and JetStream. internal/natsstore and
// internal/natsbus implement them; cmd/gpuq plugs them in.

// ErrConflict reports a compare-and-swap write that found a revision other
// than the one this scheduler last wrote: another scheduler has written, so
// this one is no longer the leader and must stop.
var ErrConflict = errors.New("scheduler: ledger revision conflict")

// ErrLeaseLost reports that another scheduler holds the leader lease.
var ErrLeaseLost = errors.New("scheduler: leader lease lost")

// ErrLogGap reports that the command log is missing entries the ledger has
// not applied.
var ErrLogGap = errors.New("scheduler: command log has a gap")

// ErrMisconfigured reports a failure no retry can mend: the lease or store is
// set up wrong (a bucket without per-key TTLs, a connection closed for good).
// [Service.Run] returns it rather than retry forever.
var ErrMisconfigured = errors.New("scheduler: misconfigured")

// ErrTooLarge reports a record or a message that the server will never
// store because of its size (past the server's max_payload, or the
// stream's or bucket's maximum message size). No retry can mend it: the
// command that produced it is refused instead (see [Store.Refuse]).
var ErrTooLarge = errors.New("scheduler: too large for the store")

// TooLargeError is a record or an effect that the store refused for its
// size, with the log sequence of the command that last changed it.
type TooLargeError struct {
	What string // the key or subject
	Seq  uint64
	Err  error
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s from command %d is too large to store: %v", e.What, e.Seq, e.Err)
}

func (e *TooLargeError) Unwrap() []error { return []error{ErrTooLarge, e.Err} }

// ErrForeignValue reports a ledger key holding a value gpuq did not write
// (one that does not decode as its record, or names another id than its
// key's): a value another client put there.
var ErrForeignValue = errors.New("scheduler: a ledger key holds a value gpuq did not write")

// Repairer is a [Store] that can put back, from a key's history, the newest
// value gpuq wrote at a key that now holds a foreign one. The scheduler
// calls it, as leader, when Load fails with [ErrForeignValue].
type Repairer interface {
	// Repair restores the key err names, with a compare-and-swap on the
	// foreign revision, and says what it did. It fails, saying exactly what
	// is wrong, when the key's history holds no value gpuq wrote.
	Repair(ctx context.Context, err error) (string, error)
}

// View is the ledger as stored, made consistent as of its checkpoint: every
// record is the version that reflects exactly the commands up to Checkpoint,
// even where a crash left later versions stored.
type View struct {
	State      *ledger.State
	Checkpoint uint64
	// Ahead is the highest sequence stored on any record. When it is above
	// Checkpoint, a flush was cut short, and the next flush must not end
	// before Ahead, so every record is caught up again before the
	// checkpoint moves.
	Ahead uint64
	// Refused are the commands above Checkpoint that a term found it
	// could not store the outcome of (see [Store.Refuse]), by sequence,
	// with why: the fold answers each with a rejection instead of
	// applying it.
	Refused map[uint64]string
}

// Record is one ledger key to store, with the sequence of the last command
// that changed it.
type Record struct {
	Key   string
	Seq   uint64
	Value []byte
	// Delete says the command at Seq removed the key (an archived job):
	// the store deletes it, and Value is the record it held before, which
	// a load whose checkpoint is below Seq puts back (the archive is then
	// applied again).
	Delete bool
}

// Store persists the ledger view. The scheduler is its only writer; every
// write is a compare-and-swap on the revision the store last read or wrote.
// Within a term the flusher's two stages call Write at the same time as
// another Write or Checkpoint, on other keys: an implementation must be
// safe for that. Load and Refuse run alone.
type Store interface {
	// Load reads the whole view. It records the revision of every key for
	// the writes that follow.
	Load(ctx context.Context) (*View, error)
	// Write stores each record, or deletes its key where the record says
	// so, unless the stored version already carries its sequence or a
	// later one. It returns an error wrapping [ErrConflict] if any key's
	// revision moved. Load treats a deleted key as absent, or, where the
	// delete is past the checkpoint, as the record it held before.
	Write(ctx context.Context, recs []Record) error
	// Checkpoint stores seq as the last command whose effects were sent,
	// with the refusals above it.
	Checkpoint(ctx context.Context, seq uint64) error
	// Refuse records, with the checkpoint and a compare-and-swap, that the
	// command at seq is to be refused for why rather than applied: its
	// outcome cannot be stored. Every later Load reports it in
	// View.Refused until the checkpoint passes it.
	Refuse(ctx context.Context, seq uint64, why string) error
}

// Lease is the leader lease. Exactly one scheduler holds it at a time.
type Lease interface {
	// TryAcquire tries once to take the lease: true if this scheduler
	// holds it now, false if another does. An error means the lease could
	// not be reached (the server away, a timeout) and the caller tries
	// again later, unless it wraps [ErrMisconfigured].
	TryAcquire(ctx context.Context) (bool, error)
	// Renew extends the lease. It returns an error wrapping [ErrLeaseLost]
	// if another scheduler holds it.
	Renew(ctx context.Context) error
	// Release gives the lease up so a standby can take over at once.
	Release(ctx context.Context) error
	// TTL is how long the lease lasts without renewal.
	TTL() time.Duration
}

// LogEntry is one entry of the command log.
type LogEntry struct {
	Seq     uint64
	Time    time.Time // the server's timestamp: the command's time in the fold
	Subject string
	Data    []byte
	Pending uint64 // entries after this one when it was delivered
}

// CommandLog is the command log.
type CommandLog interface {
	// Follow delivers every entry after seq, in order, on the returned
	// channel until ctx ends or the follower stops. If the log fails, the
	// follower stops and Err says why; the channel may stay open (entries
	// already queued stay readable), so a reader polls Err too.
	Follow(ctx context.Context, after uint64) (Follower, error)
	// Trim drops entries up to and including seq, which must be applied.
	Trim(ctx context.Context, upTo uint64) error
}

// Follower is a running read of the log.
type Follower interface {
	C() <-chan LogEntry
	Err() error
	Stop()
}

// Publisher publishes messages, each with its de-duplication id, and
// returns once the server has stored every one. stored counts the messages
// this call stored anew; the others the server already had (duplicates
// inside its window), so they bring nothing new to a reader.
type Publisher interface {
	Publish(ctx context.Context, msgs []wire.Message) (stored int, err error)
}

// HostUpdate is a change to the hosts bucket: a heartbeat, or Host nil when
// the host's key expired or was deleted.
type HostUpdate struct {
	Name string
	Host *wire.Heartbeat
}

// HostWatcher reports host heartbeats: first every current one, then changes.
type HostWatcher interface {
	Watch(ctx context.Context) (<-chan HostUpdate, error)
}
