package worker

import (
	"context"
	"fmt"
	"sync"
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

// fakeBus records what the worker sends. It takes no orders.
type fakeBus struct {
	// leave, if set, runs inside Leave, after it is recorded.
	leave func()

	mu     sync.Mutex
	events []string // "beat" and "leave", in the order they arrived
	chunks []wire.LogChunk
	beat   chan struct{} // gets a value, if there is room, on each beat
}

func newFakeBus() *fakeBus { return &fakeBus{beat: make(chan struct{}, 1)} }

func (b *fakeBus) Orders(ctx context.Context) (<-chan Order, error) {
	ch := make(chan Order)
	go func() {
		<-ctx.Done()
		close(ch)
	}()
	return ch, nil
}

func (b *fakeBus) Report(context.Context, ledger.Report) error { return nil }

func (b *fakeBus) Log(_ context.Context, c wire.LogChunk) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.chunks = append(b.chunks, c)
	return nil
}

func (b *fakeBus) Beat(context.Context, wire.Host, time.Duration) error {
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

func (b *fakeBus) Installation(context.Context) (string, error) { return "fake", nil }

func (b *fakeBus) recorded() ([]string, []wire.LogChunk) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.events...), append([]wire.LogChunk(nil), b.chunks...)
}
