package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// outage follows one kind of call to the server (heartbeats, the order
// stream, job output, record reads) and logs each change of its state once:
// the first failure after a success, and the first success after failures,
// never once per retry. It is safe for concurrent use.
type outage struct {
	log      *slog.Logger
	down, up string // the messages of the two changes

	mu       sync.Mutex
	failing  bool
	since    time.Time
	failures int
}

func newOutage(log *slog.Logger, down, up string) *outage {
	return &outage{log: log, down: down, up: up}
}

// fail records a failure; the first since the last success is logged.
func (o *outage) fail(err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failures++
	if o.failing {
		return
	}
	o.failing, o.since = true, time.Now()
	o.log.Warn(o.down, slog.Any("err", err))
}

// ok records a success; the first after failures is logged.
func (o *outage) ok() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.failing {
		return
	}
	o.log.Info(o.up, slog.Duration("after", time.Since(o.since).Round(time.Millisecond)), slog.Int("failures", o.failures))
	o.failing, o.failures = false, 0
}

// retryBackoff is the backoff of a call retried for as long as it takes:
// from initial, doubling up to max, with no limit on the time spent.
func retryBackoff(initial, max time.Duration) *backoff.ExponentialBackOff {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = initial, max, 0
	bo.Reset()
	return bo
}

// retry calls op until it succeeds or ctx ends, with backoff, recording
// each failure and the success in o. It returns nil or ctx's error.
func retry(ctx context.Context, o *outage, op func(ctx context.Context) error) error {
	err := backoff.RetryNotify(func() error {
		if err := op(ctx); err != nil {
			if ctx.Err() != nil {
				return backoff.Permanent(ctx.Err())
			}
			return err
		}
		return nil
	}, backoff.WithContext(retryBackoff(50*time.Millisecond, 5*time.Second), ctx), func(err error, _ time.Duration) {
		o.fail(err)
	})
	if err == nil {
		o.ok()
	}
	return err
}

// sleep waits d or until ctx ends, and reports whether ctx is still going.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
