package gpuq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// runningWorker is a worker daemon on simulated GPUs, on its own connection.
type runningWorker struct {
	host   string
	w      *worker.Worker
	gpu    *nvmlgpu.GPU
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan error
}

type workerOpts struct {
	gpus     int
	stateDir string
	drain    time.Duration
	ackWait  time.Duration
	maxLog   int
	// wrap, if set, wraps the worker's bus (to lose a report or an ack as a
	// crash would).
	wrap func(worker.Bus) worker.Bus
}

// startWorker runs a worker for host with test timings until stopped or the
// test ends.
func (c *cluster) startWorker(host string, o workerOpts) *runningWorker {
	c.t.Helper()
	if o.gpus == 0 {
		o.gpus = 2
	}
	if o.stateDir == "" {
		o.stateDir = c.t.TempDir()
	}
	if o.drain == 0 {
		o.drain = 10 * time.Second
	}
	if o.ackWait == 0 {
		o.ackWait = 30 * time.Second
	}
	gpu, err := nvmlgpu.Simulate(host, "dgxh100", o.gpus)
	if err != nil {
		c.t.Fatal(err)
	}
	nc, js := c.srv.JetStream(c.t)
	hkv, err := js.KeyValue(context.Background(), c.n.HostsBucket())
	if err != nil {
		c.t.Fatal(err)
	}
	wb, err := natsbus.NewWorkerBus(js, c.n, host, hkv)
	if err != nil {
		c.t.Fatal(err)
	}
	wb.AckWait = o.ackWait
	var bus worker.Bus = wb
	if o.wrap != nil {
		bus = o.wrap(bus)
	}
	w, err := worker.New(worker.Config{Host: host, GPU: gpu, Bus: bus, StateDir: o.stateDir,
		Logger:            slog.New(slog.NewTextHandler(tOutput{c.t, host}, &slog.HandlerOptions{Level: slog.LevelInfo})),
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second, KillGrace: 500 * time.Millisecond,
		DrainTimeout: o.drain, ReportTimeout: 2 * time.Second, LogFlush: 50 * time.Millisecond, MaxLogBytes: o.maxLog})
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{host: host, w: w, gpu: gpu, nc: nc, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	c.t.Cleanup(func() {
		rw.w.Abort()
		rw.stop(c.t)
		_ = gpu.Close() // the test is over; nothing to report
	})
	return rw
}

// stop drains the worker (as SIGTERM does) and waits for Run to return.
func (rw *runningWorker) stop(t testing.TB) {
	t.Helper()
	rw.cancel()
	select {
	case err, ok := <-rw.done:
		if ok {
			close(rw.done)
			if err != nil {
				t.Errorf("worker %s: %v", rw.host, err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("worker %s did not stop", rw.host)
	}
}

// crash stops the worker as a killed process would: its connection goes
// first, so nothing more reaches the server, then its jobs are killed.
func (rw *runningWorker) crash(t testing.TB) {
	t.Helper()
	rw.nc.Close()
	rw.w.Abort()
	rw.stop(t)
}

// submitCmd submits a job running command through the client.
func (c *cluster) submitCmd(account, id string, gpus int, cost ledger.Credits, walltime time.Duration, command ...string) wire.JobEvent {
	c.t.Helper()
	ev, err := c.c.Submit(c.ctx(), ledger.Submit{Account: account, ID: id, GPUs: gpus, Cost: cost,
		Command: command, Walltime: walltime, MaxAttempts: 3})
	if err != nil || ev.Type != ledger.EventAccepted {
		c.t.Fatalf("submit %s: %+v, %v", id, ev, err)
	}
	return ev
}

// logs reads every output chunk of job, in order, and returns the text of
// attempt's chunks and the attempt's end marker. It is for attempts that
// wrote something, or were stopped: a worker stores no end marker for an
// attempt that wrote nothing and exited on its own (client.Logs makes one
// from the job's record), and logs fails the test on such an attempt.
func (c *cluster) logs(job string, attempt int) (stdout, stderr string, end wire.LogChunk) {
	c.t.Helper()
	ctx := c.ctx()
	cons, err := c.js.OrderedConsumer(ctx, c.n.LogsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.n.LogFilter()}})
	if err != nil {
		c.t.Fatal(err)
	}
	var out, errs strings.Builder
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			c.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ch, err := wire.DecodeLogChunk(c.n, m.Subject(), m.Headers().Get, m.Data())
			if err != nil {
				c.t.Fatal(err)
			}
			if ch.Job != job || ch.Attempt != attempt {
				continue
			}
			switch {
			case ch.End != "":
				return out.String(), errs.String(), ch
			case ch.Stream == wire.Stdout:
				out.Write(ch.Data)
			default:
				errs.Write(ch.Data)
			}
		}
		if n == 0 {
			c.t.Fatalf("no end marker in the logs of %s attempt %d (none is stored for an attempt that wrote nothing and exited on its own); stdout so far %q", job, attempt, out.String())
		}
	}
}

// lossyBus wraps a worker's bus to drop things as a crash at that point
// would: the first ack, or reports of a type.
type lossyBus struct {
	worker.Bus
	mu         sync.Mutex
	dropAcks   int
	holdReport ledger.ReportType // block reports of this type until the bus is closed
	held       chan struct{}     // closed when a report is first held
	heldOnce   sync.Once
	closed     chan struct{}
}

func (b *lossyBus) Orders(ctx context.Context, lost func(error)) <-chan worker.Order {
	in := b.Bus.Orders(ctx, lost)
	out := make(chan worker.Order)
	go func() {
		defer close(out)
		for o := range in {
			ack := o.Ack
			o.Ack = func(ctx context.Context) error {
				b.mu.Lock()
				drop := b.dropAcks > 0
				if drop {
					b.dropAcks--
				}
				b.mu.Unlock()
				if drop {
					return errors.New("ack lost")
				}
				return ack(ctx)
			}
			select {
			case out <- o:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (b *lossyBus) Report(ctx context.Context, r ledger.Report) error {
	if r.Type == b.holdReport {
		b.heldOnce.Do(func() { close(b.held) })
		select {
		case <-b.closed:
		case <-ctx.Done():
		}
		return fmt.Errorf("report %s held back", r.Type)
	}
	return b.Bus.Report(ctx, r)
}
