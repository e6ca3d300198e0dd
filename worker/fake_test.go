package worker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// fakeGPU is a host of healthy, idle devices that never fail.
type fakeGPU struct{ n int }

func (g fakeGPU) Devices() ([]Device, error) {
	devs := make([]Device, g.n)
	for i := range devs {
		devs[i] = Device{Index: i, UUID: fmt.Sprintf("GPU-fake-%d", i), Model: "fake", MemoryMiB: 1024}
	}
	return devs, nil
}

func (fakeGPU) WatchHealth(ctx context.Context, _ func(uuid, reason string)) error {
	<-ctx.Done()
	return nil
}

func (fakeGPU) Simulated() bool { return true }
func (fakeGPU) Close() error    { return nil }

// fakeBus records what the worker sends, and delivers the orders sent on
// its orders channel. Every job's record shows the attempt ordered
// dispatched to the host unless job is set.
type fakeBus struct {
	// leave, if set, runs inside Leave, after it is recorded.
	leave func()
	// orders are delivered by Orders.
	orders chan Order
	// job, if set, answers Job. install and beatErr, if set, answer
	// Installation and Beat.
	job     func(id string) (*ledger.Job, error)
	install func() (string, error)
	beatErr func() error
	// onReport, if set, runs in Report before it is recorded.
	onReport func(ledger.Report)
	// ordersLost is passed to Orders' lost callback, in order, before any
	// order is delivered.
	ordersLost []error

	mu       sync.Mutex
	events   []string // "beat" and "leave", in the order they arrived
	chunks   []wire.LogChunk
	reports  []ledger.Report
	beat     chan struct{}      // gets a value, if there is room, on each beat
	logged   chan struct{}      // gets a value, if there is room, on each log chunk
	reported chan ledger.Report // gets each report, if there is room
	// current is what the default job record shows: the last dispatch
	// order sent to the host by sendOrder.
	current map[string]ledger.DispatchOrder
}

func newFakeBus() *fakeBus {
	return &fakeBus{beat: make(chan struct{}, 1), logged: make(chan struct{}, 1), reported: make(chan ledger.Report, 64), orders: make(chan Order),
		current: map[string]ledger.DispatchOrder{}}
}

func (b *fakeBus) Orders(ctx context.Context, lost func(error)) <-chan Order {
	ch := make(chan Order)
	go func() {
		defer close(ch)
		for _, err := range b.ordersLost {
			lost(err)
		}
		for {
			select {
			case o := <-b.orders:
				select {
				case ch <- o:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

// sendOrder delivers e as an order and returns a channel that is closed
// when the worker acks it (or terms it).
func (b *fakeBus) sendOrder(t *testing.T, e ledger.Effect) <-chan struct{} {
	t.Helper()
	acked := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(acked) }) }
	if d, ok := e.(ledger.DispatchOrder); ok {
		b.mu.Lock()
		b.current[d.Job] = d
		b.mu.Unlock()
	}
	o := Order{Effect: e,
		Ack:  func(context.Context) error { done(); return nil },
		Term: func(context.Context, string) error { done(); return nil }}
	select {
	case b.orders <- o:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker took no order within 10s")
	}
	return acked
}

func (b *fakeBus) Job(_ context.Context, id string) (*ledger.Job, error) {
	if b.job != nil {
		return b.job(id)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.current[id]
	if !ok {
		return nil, nil
	}
	return &ledger.Job{ID: id, Account: d.Account, GPUs: d.GPUs, Attempt: d.Attempt, State: ledger.StateDispatched, JobOutcome: &ledger.JobOutcome{Host: d.Host}}, nil
}

func (b *fakeBus) Report(_ context.Context, r ledger.Report) error {
	if b.onReport != nil {
		b.onReport(r)
	}
	b.mu.Lock()
	b.reports = append(b.reports, r)
	b.mu.Unlock()
	select {
	case b.reported <- r:
	default:
	}
	return nil
}

// nextReport waits for the worker's next report.
func (b *fakeBus) nextReport(t *testing.T) ledger.Report {
	t.Helper()
	select {
	case r := <-b.reported:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no report within 10s")
	}
	return ledger.Report{}
}

func (b *fakeBus) Log(_ context.Context, c wire.LogChunk) error {
	b.mu.Lock()
	b.chunks = append(b.chunks, c)
	b.mu.Unlock()
	select {
	case b.logged <- struct{}{}:
	default:
	}
	return nil
}

func (b *fakeBus) Beat(context.Context, wire.Heartbeat, time.Duration) error {
	if b.beatErr != nil {
		if err := b.beatErr(); err != nil {
			return err
		}
	}
	b.mu.Lock()
	b.events = append(b.events, "beat")
	b.mu.Unlock()
	select {
	case b.beat <- struct{}{}:
	default:
	}
	return nil
}

func (b *fakeBus) Leave(context.Context) error {
	b.mu.Lock()
	b.events = append(b.events, "leave")
	b.mu.Unlock()
	if b.leave != nil {
		b.leave()
	}
	return nil
}

func (b *fakeBus) Installation(context.Context) (string, error) {
	if b.install != nil {
		return b.install()
	}
	return "fake", nil
}

func (b *fakeBus) recorded() ([]string, []wire.LogChunk) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...), append([]wire.LogChunk(nil), b.chunks...)
}

func (b *fakeBus) allReports() []ledger.Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]ledger.Report(nil), b.reports...)
}
