package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/gpuq/gpuq/wire"
)

// The flush pipeline. A term's batches are carried out in order, in two
// stages on two goroutines of their own, so that one batch's records are
// written while the batch before it sends its effects and checkpoints:
//
//	stage 1 (persist):  the history of archived jobs, then the records,
//	                    but those where a removal meets a write of the
//	                    batch before at one key
//	stage 2 (complete): the records it held back, the effects, the
//	                    checkpoint
//
// What each batch must keep, as a flush one at a time did:
//   - its effects are sent only after all its records are stored, and its
//     checkpoint only after its effects;
//   - effects go out in batch order, and checkpoints rise: stage 2 takes
//     one batch at a time, in order;
//   - a checkpoint is written only once every earlier batch's records and
//     effects are stored: a batch enters stage 2 only after the one before
//     it has left it;
//   - a load after a crash can always rewind a key to its version at the
//     checkpoint from the key's history: a key holds at most one stored
//     version past the checkpoint for each batch in flight (two, in a
//     bucket that keeps at least [MinLedgerHistory] versions), and a
//     removal is never stored beside another version past the checkpoint
//     (an archived job's removal marks the end of the history a load walks
//     back through), so a record of either kind whose key the batch in
//     stage 2 also writes with a removal is held back to stage 2, after
//     that batch's checkpoint;
//   - once a batch fails, in either stage, nothing more is written (see
//     [leased]): the term ends as a crash there would end it, and the next
//     term folds again from the checkpoint.
//
// A batch's records of a key the batch in stage 2 also puts are written in
// stage 1 all the same: holding them back put a third round trip (records,
// effects, checkpoint) into stage 2 for nearly every batch, since the
// account a job is charged to changes in each.

// MinLedgerHistory is the fewest versions of each record the ledger bucket
// must keep for a load to rewind every key to the checkpoint after a crash
// with both of the pipeline's batches written: the version at the
// checkpoint and one of each batch past it.
const MinLedgerHistory = maxInFlight + 1

// maxInFlight is how many batches the pipeline holds at once: one in each
// stage.
const maxInFlight = 2

// errHalted is the outcome of a batch that was not carried out (or not
// wholly) because another batch failed first; the term reports that one.
var errHalted = errors.New("another batch failed first, so this one writes nothing more")

// flusher carries out a term's batches through the two stages. Only the
// flusher uses the Store while the term runs.
type flusher struct {
	in  chan *batch  // to stage 1
	mid chan *batch  // from stage 1 to stage 2, unbuffered: one batch in each
	out chan flushed // one outcome per batch sent: room for all in flight
	// sent is when each batch in flight was sent, oldest first; the
	// service goroutine's own.
	sent []time.Time
	// inStage1 is set while a batch sent is in stage 1 (set by send,
	// cleared as the batch leaves it), and free wakes the service
	// goroutine after each batch leaves: stage 1 is free to take the
	// next. A batch is prepared only then, so that it holds what was
	// folded while the one before was in stage 1, rather than queue
	// behind it with a few commands.
	inStage1 atomic.Bool
	free     chan struct{}
	// halted is set once a batch failed, before its outcome is sent, so
	// the other stage and the service goroutine write nothing more.
	halted atomic.Bool
	// checkpointed is the last sequence stage 2 checkpointed.
	checkpointed atomic.Uint64
	done         chan struct{} // closed once both stages have ended
}

// startFlusher starts the term's flusher, which runs until stop.
func (s *Service) startFlusher(ctx context.Context) *flusher {
	f := &flusher{in: make(chan *batch, maxInFlight), mid: make(chan *batch), out: make(chan flushed, maxInFlight),
		free: make(chan struct{}, 1), done: make(chan struct{})}
	w := leased{s: s, halted: &f.halted}
	go func() {
		defer close(f.mid)
		var prev *batch // the last batch handed to stage 2
		for b := range f.in {
			b.began = time.Now()
			if err := s.persist(ctx, w, b, f.inStage2(prev)); err != nil {
				f.fail(b, err)
				f.leave()
				continue
			}
			prev = b
			f.mid <- b
			f.leave()
		}
	}()
	go func() {
		defer close(f.done) // after stage 1, which closes mid as it ends
		for b := range f.mid {
			if err := s.complete(ctx, w, b); err != nil {
				f.fail(b, err)
				continue
			}
			f.checkpointed.Store(b.applied)
			f.out <- b.outcome(nil)
		}
	}()
	return f
}

// inStage2 returns prev if it may still be in stage 2, not checkpointed,
// so that the next batch holds back the records its removals touch.
func (f *flusher) inStage2(prev *batch) *batch {
	if prev == nil || f.checkpointed.Load() >= prev.applied {
		return nil
	}
	return prev
}

// fail halts the pipeline and reports b's failure.
func (f *flusher) fail(b *batch, err error) {
	if !errors.Is(err, errHalted) {
		f.halted.Store(true)
	}
	f.out <- b.outcome(err)
}

// leave marks stage 1 free and wakes the service goroutine.
func (f *flusher) leave() {
	f.inStage1.Store(false)
	select {
	case f.free <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// ready says stage 1 is free and the pipeline has room: the next batch
// may be sent.
func (f *flusher) ready() bool {
	return len(f.sent) < maxInFlight && !f.inStage1.Load()
}

// send hands b to the flusher, which must be ready.
func (f *flusher) send(b *batch, now time.Time) {
	f.sent = append(f.sent, now)
	f.inStage1.Store(true) // before stage 1 can take b, and leave it
	f.in <- b
}

// received takes r, the outcome of the oldest batch in flight, off the
// count. Outcomes of failures may come out of order; the term ends at the
// first.
func (f *flusher) received() { f.sent = f.sent[1:] }

// stalled returns how long the oldest batch has been in flight, if one is.
func (f *flusher) stalled(now time.Time) time.Duration {
	if len(f.sent) == 0 {
		return 0
	}
	return now.Sub(f.sent[0])
}

// failure returns the failure that halted the pipeline: r, or the first
// outcome after it that is neither a batch carried out before the halt nor
// one stopped by it. The batch that halted the pipeline reports after it
// set halted, so once halted is set, that outcome is on its way.
func (f *flusher) failure(r flushed) flushed {
	for r.err == nil || errors.Is(r.err, errHalted) {
		r = <-f.out
	}
	return r
}

// stop ends the flusher and waits for it; the caller has cancelled the
// context of the batches in flight.
func (f *flusher) stop() {
	close(f.in)
	<-f.done
}

// persist is b's first stage: the history of its archived jobs, then its
// records, except those where a removal meets a write of prev (the batch
// in stage 2, if any) at one key, which wait for stage 2 (b.later). The
// final records of archived jobs reach the history stream before their
// keys are deleted: however a flush is cut short, no record is only in a
// deleted key. (Sent again after a cut, a record is the same message,
// de-duplicated within the window and identical after it.)
func (s *Service) persist(ctx context.Context, w leased, b *batch, prev *batch) error {
	if len(b.history) > 0 {
		if _, err := w.publish(ctx, b.history); err != nil {
			return fmt.Errorf("send the history of archived jobs through %d: %w", b.applied, err)
		}
	}
	b.keys = make(map[string]bool, len(b.recs))
	for _, r := range b.recs {
		b.keys[r.Key] = b.keys[r.Key] || r.Delete
	}
	// The records this stage writes: those not held back for prev, and
	// of those only the first n where a test hook cuts the batch.
	limit, cut := len(b.recs), false
	if hook := s.cfg.Hooks.CutPersist; hook != nil {
		if n := hook(b.applied, len(b.recs)); n < len(b.recs) {
			limit, cut = max(n, 0), true
		}
	}
	now := b.recs[:limit]
	if prev != nil {
		now = make([]Record, 0, limit)
		for i, r := range b.recs {
			removal, both := prev.keys[r.Key]
			switch {
			case both && (removal || r.Delete):
				b.later = append(b.later, r)
			case i < limit:
				now = append(now, r)
			}
		}
	}
	if len(now) > 0 {
		if err := w.write(ctx, now); err != nil {
			return fmt.Errorf("persist through %d: %w", b.applied, err)
		}
	}
	if cut {
		return fmt.Errorf("cut after %d of %d records at %d: %w", limit, len(b.recs), b.applied, ErrStopped)
	}
	return nil
}

// complete is b's second stage, once the batch before it has checkpointed:
// the records persist held back, then the effects, then the checkpoint. A
// crash at any point leaves a state from which a new term recomputes the
// same records and re-sends the same effects, which the servers
// de-duplicate.
func (s *Service) complete(ctx context.Context, w leased, b *batch) error {
	hooks := s.cfg.Hooks
	if err := w.clear(); err != nil {
		// Halted (or the lease in doubt) before it began: a batch
		// with nothing held back would otherwise meet the hooks first.
		return err
	}
	if len(b.later) > 0 {
		if err := w.write(ctx, b.later); err != nil {
			return fmt.Errorf("persist through %d: %w", b.applied, err)
		}
	}
	if hooks.AfterPersist != nil {
		if err := hooks.AfterPersist(b.applied); err != nil {
			return fmt.Errorf("%v: %w", err, ErrStopped)
		}
	}
	if _, err := w.publish(ctx, b.rest); err != nil {
		return fmt.Errorf("send effects through %d: %w", b.applied, err)
	}
	if hooks.AfterEffects != nil {
		if err := hooks.AfterEffects(b.applied); err != nil {
			return fmt.Errorf("%v: %w", err, ErrStopped)
		}
	}
	if err := w.checkpoint(ctx, b.applied); err != nil {
		return fmt.Errorf("checkpoint %d: %w", b.applied, err)
	}
	s.log.Debug("flushed", slog.Uint64("seq", b.applied), slog.Int("records", len(b.recs)), slog.Int("effects", len(b.history)+len(b.rest)))
	if hooks.Checkpointed != nil {
		hooks.Checkpointed(b.applied)
	}
	return nil
}

// leased makes a term's writes, each only while the lease is surely held
// (see [Service.stillHeld]) and, where halted is set, no batch has failed:
// a write after either could be a deposed leader's, or land past a failure
// that ended the term.
type leased struct {
	s      *Service
	halted *atomic.Bool // nil: the term's batches are not its concern
}

// clear returns why nothing may be written now, if anything.
func (w leased) clear() error {
	if w.halted != nil && w.halted.Load() {
		return errHalted
	}
	return w.s.stillHeld()
}

func (w leased) write(ctx context.Context, recs []Record) error {
	if err := w.clear(); err != nil {
		return err
	}
	return w.s.cfg.Store.Write(ctx, recs)
}

func (w leased) checkpoint(ctx context.Context, seq uint64) error {
	if err := w.clear(); err != nil {
		return err
	}
	return w.s.cfg.Store.Checkpoint(ctx, seq)
}

func (w leased) refuse(ctx context.Context, seq uint64, why string) error {
	if err := w.clear(); err != nil {
		return err
	}
	return w.s.cfg.Store.Refuse(ctx, seq, why)
}

func (w leased) publish(ctx context.Context, msgs []wire.Message) (int, error) {
	if err := w.clear(); err != nil {
		return 0, err
	}
	return w.s.cfg.Publisher.Publish(ctx, msgs)
}
