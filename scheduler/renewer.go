package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// startRenewer keeps the lease renewed while a term starts: loading a large
// ledger takes longer than a lease TTL (a million jobs take seconds), and a
// term that renewed only once it led would find its lease lapsed at the first
// renewal, step down, load again and lose it again. It renews every third of
// the TTL, as the term's loop does, from a goroutine of its own; the term's
// goroutine does not touch the lease until stop returns, so the lease is
// still used by one goroutine at a time.
//
// When a renewal finds the lease taken (ErrLeaseLost), or renewals fail for
// so long that the lease lapses before the next try, it cancels the term's
// start with that cause at once: the load is abandoned and nothing of the
// term is written or sent. A renewal that fails for another reason (a
// timeout) is tried again at the next tick while the lease can still be
// held.
func (s *Service) startRenewer(ctx context.Context, cancel context.CancelCauseFunc) *renewer {
	r := &renewer{done: make(chan struct{}), stopc: make(chan struct{}), last: s.cfg.NowFunc()}
	every := s.cfg.Lease.TTL() / 3
	go func() {
		defer close(r.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-r.stopc:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// A renewal in flight is never cut short by stop: one whose
			// outcome is unknown would leave the lease's revision
			// unknown, and the next renewal would take the lease for lost.
			// The lease runs from when the renewal was sent, not from when
			// its answer came: a late answer must not stretch it.
			sent := s.cfg.NowFunc()
			err := s.cfg.Lease.Renew(ctx)
			now := s.cfg.NowFunc()
			if err == nil {
				r.last = sent
				continue
			}
			if !errors.Is(err, ErrLeaseLost) && now.Sub(r.last)+every < s.cfg.Lease.TTL() {
				s.log.WarnContext(ctx, "cannot renew the leader lease while the term starts; trying again", slog.Any("err", err))
				continue
			}
			r.err = fmt.Errorf("renew the leader lease while the term starts: %w", err)
			cancel(r.err)
			return
		}
	}()
	return r
}

// renewer is the lease's renewal while a term starts.
type renewer struct {
	stopc, done chan struct{}
	// Set by the goroutine, read after done: when the last successful
	// renewal was sent (or the start), and why renewing ended the term's
	// start.
	last time.Time
	err  error
}

// stop ends the renewals, waiting for one in flight, and returns when the
// lease was last renewed (or the renewer started), or the error that
// cancelled the term's start.
func (r *renewer) stop() (time.Time, error) {
	close(r.stopc)
	<-r.done
	return r.last, r.err
}
