package jslimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// Worker is a host's worker that costs nothing: it reads the host's orders
// through its durable consumer as gpuq's worker does, and for each dispatch
// reports the attempt started (on the devices named after the host), acks
// the order once that report is stored, and reports it done with exit code
// 0. It claims no GPU, starts no process and writes no state of its own. A
// cancel order is acked and nothing more. Whatever heartbeat announces the
// host (and its device names) is the caller's.
type Worker struct {
	bus  *natsbus.WorkerBus
	host string
	// Received, if set, is called with each dispatch order as it is
	// taken, before anything is reported (benchmarks time dispatches with
	// it). Set it before Run.
	Received func(ledger.DispatchOrder)
	// Done counts the attempts reported done.
	Done atomic.Int64
}

// NewWorker returns the worker of host.
func NewWorker(js jetstream.JetStream, n subjects.Names, host string) (*Worker, error) {
	bus, err := natsbus.NewWorkerBus(js, n, host, nil)
	if err != nil {
		return nil, err
	}
	return &Worker{bus: bus, host: host}, nil
}

// Device is the name of GPU i of host, as the worker reports it.
func Device(host string, i int) string { return fmt.Sprintf("GPU-%s-%d", host, i) }

// Run takes orders until ctx ends, handling each on a goroutine of its own
// as gpuq's worker runs each attempt on its own, and returns once every one
// it began has ended: nil when ctx ended, the first failure otherwise (a
// report or ack that did not go through, an order that does not decode).
func (w *Worker) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	fail := func(err error) {
		once.Do(func() { first = err })
		cancel()
	}
	// The orders channel closes only once ctx (or a failure) ends it.
	for o := range w.bus.Orders(ctx, func(error) {}) {
		if o.Err != nil {
			fail(fmt.Errorf("jslimit: worker %s: an order does not decode: %w", w.host, o.Err))
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.handle(ctx, o.Effect, o.Ack); err != nil && ctx.Err() == nil {
				fail(fmt.Errorf("jslimit: worker %s: %w", w.host, err))
			}
		}()
	}
	wg.Wait()
	return first
}

// handle reports one order's attempt started and done, or acks a cancel.
func (w *Worker) handle(ctx context.Context, eff ledger.Effect, ack func(context.Context) error) error {
	d, ok := eff.(ledger.DispatchOrder)
	if !ok {
		return ack(ctx) // a cancel: nothing runs, so nothing to stop
	}
	if w.Received != nil {
		w.Received(d)
	}
	devs := make([]string, d.GPUs)
	for i := range devs {
		devs[i] = Device(w.host, i)
	}
	if err := w.bus.Report(ctx, ledger.Report{Type: ledger.ReportStarted, Host: w.host, Job: d.Job, Attempt: d.Attempt,
		Devices: devs, Model: "simulated"}); err != nil {
		return fmt.Errorf("report %s attempt %d started: %w", d.Job, d.Attempt, err)
	}
	if err := ack(ctx); err != nil {
		return fmt.Errorf("ack the order of %s attempt %d: %w", d.Job, d.Attempt, err)
	}
	if err := w.bus.Report(ctx, ledger.Report{Type: ledger.ReportDone, Host: w.host, Job: d.Job, Attempt: d.Attempt}); err != nil {
		return fmt.Errorf("report %s attempt %d done: %w", d.Job, d.Attempt, err)
	}
	w.Done.Add(1)
	return nil
}
