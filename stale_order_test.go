//go:build cgo

// End-to-end tests of orders that must not run, or cannot: the real
// scheduler and real workers on simulated GPUs, on an embedded nats-server.
// An order left with a worker that died is never run once its attempt was
// declared lost and retried elsewhere; a worker whose order consumer is
// deleted under it keeps taking orders; a refusal for GPUs taken by
// something else says busy.
package gpuq_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// deafBus passes no order on to its worker. The first it receives is sent
// on took, and none is acked: what a worker killed the moment an order
// reached it leaves behind, an order delivered and never started.
type deafBus struct {
	worker.Bus
	took chan worker.Order
}

func (b *deafBus) Orders(ctx context.Context, lost func(error)) <-chan worker.Order {
	in := b.Bus.Orders(ctx, lost)
	go func() {
		for o := range in {
			select {
			case b.took <- o:
			default:
			}
		}
	}()
	return make(chan worker.Order) // nothing reaches the worker
}

// TestStaleOrderIsNeverRun: a worker dies holding an order it never
// started; its attempt is declared lost and retried on another host, where
// the job succeeds; the worker restarts on the same state directory and is
// delivered the old order again. It must drop it: the job's command ran
// exactly once, the job succeeded once, and only the lost attempt counts
// as a failure.
func TestStaleOrderIsNeverRun(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{core: scheduler.CoreConfig{LostAfter: time.Second}})
	c.createAccount("a", 1000)
	state := t.TempDir()
	ran := filepath.Join(t.TempDir(), "ran")
	deaf := &deafBus{took: make(chan worker.Order, 1)}
	h1 := c.startWorker("h1", workerOpts{gpus: 1, stateDir: state, ackWait: time.Second,
		wrap: func(b worker.Bus) worker.Bus { deaf.Bus = b; return deaf }})
	acc := c.submitCmd("a", "once", 1, 100, time.Minute, "sh", "-c", fmt.Sprintf(`echo "$GPUQ_ATTEMPT" >> '%s'`, ran))
	select {
	case o := <-deaf.took:
		if d, ok := o.Effect.(ledger.DispatchOrder); !ok || d.Job != "once" || d.Attempt != 1 {
			t.Fatalf("h1 took %+v, want the dispatch of once attempt 1", o.Effect)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the order never reached h1")
	}
	h1.crash(t)

	c.startWorker("h2", workerOpts{gpus: 1})
	final := c.waitFinal("a", "once", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Attempt != 2 || final.Host != "h2" || final.Charged != 100 {
		t.Fatalf("final = %+v, want succeeded at attempt 2 on h2, charged 100", final)
	}

	// h1 comes back on its disk; its consumer delivers attempt 1 again.
	h1 = c.startWorker("h1", workerOpts{gpus: 1, stateDir: state, ackWait: time.Second})
	c.waitOrdersHandled("h1", h1)
	if h1.stillUp(t); t.Failed() {
		t.FailNow()
	}

	data, err := os.ReadFile(ran)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(data); got != "2\n" {
		t.Errorf("the command ran for attempts %q, want only attempt 2", strings.Fields(got))
	}
	types := c.jobEventTypes("a", "once")
	if n := countOf(types, "started"); n != 1 {
		t.Errorf("events %v: started %d times, want once", types, n)
	}
	if n := countOf(types, "ignored"); n != 0 {
		t.Errorf("events %v: %d reports ignored, want none (a stale order is dropped without one)", types, n)
	}
	if n := countOf(types, "succeeded"); n != 1 {
		t.Errorf("events %v: succeeded %d times, want once", types, n)
	}
	st := c.waitSettled("once")
	if j := st.Jobs["once"]; j.Failures != 1 {
		t.Errorf("job failures = %d, want 1 (the lost attempt; no refusal)", j.Failures)
	}
	c.audit()
}

// waitOrdersHandled waits until the work queue holds no order for host
// (an order leaves it only when acked or dropped) and its worker runs
// nothing: every order it had was handled to its end.
func (c *cluster) waitOrdersHandled(host string, rw *runningWorker) {
	c.t.Helper()
	stream, err := c.js.Stream(c.ctx(), c.n.DispatchStream())
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := stream.Info(c.ctx(), jetstream.WithSubjectFilter(c.n.Dispatch(host)))
		if err != nil {
			c.t.Fatal(err)
		}
		queued := info.State.Subjects[c.n.Dispatch(host)]
		running := rw.w.Host().Running
		if queued == 0 && len(running) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s still has orders or attempts after 20s: %d queued, running %v", host, queued, running)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestWorkerSurvivesItsConsumerDeleted deletes a worker's durable order
// consumer under it: the worker creates it again and runs the next job.
func TestWorkerSurvivesItsConsumerDeleted(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 1000)
	w := c.startWorker("h1", workerOpts{gpus: 1})
	acc := c.submitCmd("a", "before", 1, 10, time.Minute, "true")
	if ev := c.waitFinal("a", "before", acc.Seq); ev.Type != ledger.EventSucceeded {
		t.Fatalf("before = %+v", ev)
	}
	if err := c.js.DeleteConsumer(c.ctx(), c.n.DispatchStream(), natsbus.ConsumerName("h1")); err != nil {
		t.Fatal(err)
	}
	acc = c.submitCmd("a", "after", 1, 10, time.Minute, "true")
	if ev := c.waitFinal("a", "after", acc.Seq); ev.Type != ledger.EventSucceeded || ev.Host != "h1" {
		t.Errorf("after the consumer was deleted: %+v, want succeeded on h1", ev)
	}
	if w.stillUp(t); t.Failed() {
		t.FailNow()
	}
	c.audit()
}

// squeezeBus runs before, when set, ahead of passing each order on.
type squeezeBus struct {
	worker.Bus
	mu     sync.Mutex
	before func(worker.Order)
}

func (b *squeezeBus) setBefore(f func(worker.Order)) {
	b.mu.Lock()
	b.before = f
	b.mu.Unlock()
}

func (b *squeezeBus) Orders(ctx context.Context, lost func(error)) <-chan worker.Order {
	in := b.Bus.Orders(ctx, lost)
	out := make(chan worker.Order)
	go func() {
		defer close(out)
		for o := range in {
			b.mu.Lock()
			f := b.before
			b.mu.Unlock()
			if f != nil {
				f(o)
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

// TestWorkerReportsBusyGPUs: a process gpuq did not start takes the GPU
// between the scheduler's placement and the order's arrival. The worker
// refuses the order and says the GPUs were busy; once the GPU is free the
// job runs there.
func TestWorkerReportsBusyGPUs(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 1000)
	sq := &squeezeBus{}
	w := c.startWorker("h1", workerOpts{gpus: 1, wrap: func(b worker.Bus) worker.Bus { sq.Bus = b; return sq }})
	var once sync.Once
	sq.setBefore(func(o worker.Order) {
		if d, ok := o.Effect.(ledger.DispatchOrder); ok && d.Job == "squeezed" {
			once.Do(func() { w.gpu.Sim().SetProcesses(0, 1) })
		}
	})
	acc := c.submitCmd("a", "squeezed", 1, 10, time.Minute, "true")
	r := c.waitReport("h1", "squeezed", ledger.ReportRejected)
	if !r.Busy || r.Attempt != 1 || !strings.Contains(r.Reason, "compute process") {
		t.Errorf("rejected report %+v, want attempt 1 refused as busy, naming the foreign process", r)
	}
	w.gpu.Sim().SetProcesses(0, 0)
	if ev := c.waitFinal("a", "squeezed", acc.Seq); ev.Type != ledger.EventSucceeded || ev.Host != "h1" {
		t.Errorf("final = %+v, want succeeded on h1 once the GPU is free", ev)
	}
	if j := c.waitSettled("squeezed").Jobs["squeezed"]; j.Failures != 0 || j.BusyRefusals != 1 {
		t.Errorf("after one busy refusal: %d failures and %d busy refusals, want 0 and 1 (a busy refusal spends no attempt)",
			j.Failures, j.BusyRefusals)
	}
	c.audit()
}

// waitReport waits for the first report of type typ that host sent for
// job, as stored in the command log.
func (c *cluster) waitReport(host, job string, typ ledger.ReportType) ledger.Report {
	c.t.Helper()
	ctx := c.ctx()
	cons, err := c.js.OrderedConsumer(ctx, c.n.CmdStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.n.Report(host)}})
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			c.t.Fatal(err)
		}
		for m := range batch.Messages() {
			r, err := wire.DecodeReport(host, m.Data())
			if err != nil {
				c.t.Fatalf("report on %s: %v", m.Subject(), err)
			}
			if r.Job == job && r.Type == typ {
				return r
			}
		}
	}
	c.t.Fatalf("no %s report of %s from %s within 20s", typ, job, host)
	return ledger.Report{}
}
