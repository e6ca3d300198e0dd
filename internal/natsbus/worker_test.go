// Tests of the worker's bus against a real embedded nats-server: the order
// stream survives its consumer being deleted and the server restarting,
// calling lost on each failure and again once it reads; job records read
// through a restart; a worker started before its server waits for it.
package natsbus_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// newWorkerBus sets gpuq up on js and returns host h1's bus.
func newWorkerBus(t *testing.T, js jetstream.JetStream) *natsbus.WorkerBus {
	t.Helper()
	ctx := context.Background()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	hkv, err := js.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	wb, err := natsbus.NewWorkerBus(js, n, "h1", hkv)
	if err != nil {
		t.Fatal(err)
	}
	wb.PullExpiry = 2 * time.Second // a missed heartbeat shows within 2s
	return wb
}

// readOrders starts wb's Orders until ctx ends, and waits until it reads.
func readOrders(ctx context.Context, t *testing.T, wb *natsbus.WorkerBus) (<-chan worker.Order, lostLog) {
	t.Helper()
	lost := make(lostLog, 64)
	orders := wb.Orders(ctx, lost.lost)
	lost.waitFor(t, false) // reading
	return orders, lost
}

// lostLog records the calls of Orders' lost callback.
type lostLog chan error

func (l lostLog) lost(err error) {
	select {
	case l <- err:
	default:
	}
}

// waitFor waits for a call of lost that matches failed (an error, or nil).
func (l lostLog) waitFor(t *testing.T, failed bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case err := <-l:
			if (err != nil) == failed {
				return
			}
		case <-deadline:
			t.Fatalf("no call of lost with failed=%v within 20s", failed)
		}
	}
}

// order publishes a dispatch order of job for h1.
func order(ctx context.Context, t *testing.T, js jetstream.JetStream, job string) {
	t.Helper()
	d := ledger.DispatchOrder{Host: "h1", Job: job, Account: "a", Attempt: 1, GPUs: 1, Command: []string{"true"}, Walltime: time.Minute}
	m, err := wire.EncodeEffect(subjects.Default, 1, time.Now(), 0, d)
	if err != nil {
		t.Fatal(err)
	}
	msg := nats.NewMsg(m.Subject)
	msg.Data = m.Data
	if _, err := js.PublishMsg(ctx, msg); err != nil {
		t.Fatalf("publish the order of %s: %v", job, err)
	}
}

// receive waits for the next order, acks it and checks it is job's.
func receive(ctx context.Context, t *testing.T, orders <-chan worker.Order, job string) {
	t.Helper()
	select {
	case o, ok := <-orders:
		if !ok {
			t.Fatalf("the orders channel closed before the order of %s", job)
		}
		if d, isDispatch := o.Effect.(ledger.DispatchOrder); !isDispatch || d.Job != job {
			t.Fatalf("order %+v (%v), want the dispatch of %s", o.Effect, o.Err, job)
		}
		if err := o.Ack(ctx); err != nil {
			t.Fatalf("ack the order of %s: %v", job, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no order of %s within 20s", job)
	}
}

// waitAcked waits until h1's consumer has every order it delivered acked,
// up to its acked-th: an order's Ack does not wait for the server (see
// worker.Order.Ack), so a test that next deletes the consumer or stops
// the server waits for it here.
func waitAcked(ctx context.Context, t *testing.T, js jetstream.JetStream, acked uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := js.Consumer(ctx, subjects.Default.DispatchStream(), natsbus.ConsumerName("h1"))
		if err != nil {
			t.Fatal(err)
		}
		info := c.CachedInfo()
		if info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Consumer == acked {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("10s after the ack the consumer has %d pending ack, %d pending, ack floor %d; want 0, 0, %d",
				info.NumAckPending, info.NumPending, info.AckFloor.Consumer, acked)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAckedOrderLeavesTheConsumer checks that an order's Ack, which does
// not wait for the server's answer, reaches it: the host's consumer holds
// no order pending ack or delivery once it is acked, and the order is not
// delivered again.
func TestAckedOrderLeavesTheConsumer(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	wb := newWorkerBus(t, js)
	wb.AckWait = time.Second // an order whose ack were lost would come back within the test
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orders, _ := readOrders(ctx, t, wb)
	order(ctx, t, js, "acked")
	receive(ctx, t, orders, "acked")
	waitAcked(ctx, t, js, 1)
	select {
	case o := <-orders:
		t.Fatalf("an acked order came back: %+v", o.Effect)
	case <-time.After(2 * wb.AckWait):
	}
}

// TestOrdersSurviveADeletedConsumer deletes the host's durable consumer
// under its reader: the bus reports the failure, creates the consumer
// again, and delivers the next order.
func TestOrdersSurviveADeletedConsumer(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	wb := newWorkerBus(t, js)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orders, lost := readOrders(ctx, t, wb)
	order(ctx, t, js, "before")
	receive(ctx, t, orders, "before")
	waitAcked(ctx, t, js, 1) // or "before" comes back to the next consumer

	if err := js.DeleteConsumer(ctx, subjects.Default.DispatchStream(), natsbus.ConsumerName("h1")); err != nil {
		t.Fatal(err)
	}
	lost.waitFor(t, true)
	lost.waitFor(t, false)
	order(ctx, t, js, "after")
	receive(ctx, t, orders, "after")

	cancel()
	select {
	case _, ok := <-orders:
		if ok {
			t.Error("an order after the stop")
		}
	case <-time.After(10 * time.Second):
		t.Error("the orders channel did not close within 10s of the stop")
	}
}

// TestOrdersWaitTogether: orders published together wait on the channel
// together, decoded, while the first is being handled (not acked), so the
// worker can take them as one batch; each is then delivered in order.
func TestOrdersWaitTogether(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	wb := newWorkerBus(t, js)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	orders, _ := readOrders(ctx, t, wb)
	jobs := []string{"w1", "w2", "w3", "w4"}
	for _, j := range jobs {
		order(ctx, t, js, j)
	}
	var first worker.Order
	select {
	case first = <-orders:
	case <-time.After(20 * time.Second):
		t.Fatal("no order within 20s")
	}
	deadline := time.After(20 * time.Second)
	for len(orders) < len(jobs)-1 {
		select {
		case <-deadline:
			t.Fatalf("%d orders wait on the channel behind the first, want %d", len(orders), len(jobs)-1)
		case <-time.After(time.Millisecond):
		}
	}
	if d, ok := first.Effect.(ledger.DispatchOrder); !ok || d.Job != jobs[0] {
		t.Fatalf("first order %+v, want the dispatch of %s", first.Effect, jobs[0])
	}
	if err := first.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs[1:] {
		receive(ctx, t, orders, j)
	}
}

// TestBusSurvivesAServerRestart stops the server and starts it again on
// the same port and storage: reads of job records fail while it is away
// (an error worth retrying, not a missing or bad record) and succeed after;
// orders flow again on the same channel.
func TestBusSurvivesAServerRestart(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	_, js := ns.JetStream(t)
	wb := newWorkerBus(t, js)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	lkv, err := js.KeyValue(ctx, subjects.Default.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	rec := &ledger.Job{ID: "j", Account: "a", GPUs: 1, Cost: 10, Command: []string{"true"}, Walltime: time.Minute,
		MaxAttempts: 3, State: ledger.StateDispatched, Attempt: 1, Reserved: 10, JobOutcome: &ledger.JobOutcome{Host: "h1"}}
	data, err := ledger.MarshalJob(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lkv.Put(ctx, subjects.JobKey("j"), data); err != nil {
		t.Fatal(err)
	}
	if _, err := lkv.Put(ctx, subjects.JobKey("bad"), []byte("{")); err != nil {
		t.Fatal(err)
	}
	if j, err := wb.Job(ctx, "j"); err != nil || j == nil || j.Attempt != 1 || j.Host() != "h1" || j.State != ledger.StateDispatched {
		t.Fatalf("Job(j) = %+v, %v; want attempt 1 dispatched to h1", j, err)
	}
	if j, err := wb.Job(ctx, "missing"); j != nil || err != nil {
		t.Errorf("Job(missing) = %+v, %v; want nil, nil", j, err)
	}
	if _, err := wb.Job(ctx, "bad"); !errors.Is(err, worker.ErrBadRecord) {
		t.Errorf("Job(bad) = %v, want ErrBadRecord", err)
	}
	orders, _ := readOrders(ctx, t, wb)
	order(ctx, t, js, "before")
	receive(ctx, t, orders, "before")
	waitAcked(ctx, t, js, 1) // or "before" comes back to the next consumer

	ns.Stop()
	short, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	j, err := wb.Job(short, "j")
	stop()
	if err == nil || errors.Is(err, worker.ErrBadRecord) || j != nil {
		t.Errorf("Job while the server is down = %+v, %v; want an error worth retrying", j, err)
	}
	ns.Restart(t)

	deadline := time.Now().Add(20 * time.Second)
	for {
		short, stop := context.WithTimeout(ctx, time.Second)
		j, err := wb.Job(short, "j")
		stop()
		if err == nil && j != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Job after the restart: %+v, %v", j, err)
		}
	}
	order(ctx, t, js, "after")
	receive(ctx, t, orders, "after")
}

// logWatch shows a worker's logs in the test output and closes seen the
// first time one contains want.
type logWatch struct {
	t    *testing.T
	want string
	once sync.Once
	seen chan struct{}
}

func (l *logWatch) Write(p []byte) (int, error) {
	if strings.Contains(string(p), l.want) {
		l.once.Do(func() { close(l.seen) })
	}
	return l.t.Output().Write(p)
}

// TestWorkerStartedBeforeTheServer starts a worker, on a bus given no
// hosts bucket, while its server is down: it waits, through the server
// coming up without gpuq's streams (which it says, once), and once they
// are set up it heartbeats; stopped, it removes its heartbeat.
func TestWorkerStartedBeforeTheServer(t *testing.T) {
	t.Parallel()
	// A server with a port of its own, down when the worker starts.
	ns := natstest.Start(t)
	url := ns.URLs()
	ns.Stop()

	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := subjects.Default
	wb, err := natsbus.NewWorkerBus(js, n, "h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := nvmlgpu.Simulate("h1-"+t.Name(), "dgxh100", 1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gpu.Close() }() // test teardown
	waiting := &logWatch{t: t, want: "cannot find the orders stream", seen: make(chan struct{})}
	w, err := worker.New(worker.Config{Host: "h1", GPU: gpu, Bus: wb, StateDir: t.TempDir(),
		Logger:            slog.New(slog.NewTextHandler(waiting, nil)),
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	ns.Restart(t)
	select {
	case <-waiting.seen:
	case err := <-done:
		t.Fatalf("the worker exited: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not say it waits for the orders stream within 20s")
	}
	_, ajs := ns.JetStream(t)
	if err := natsbus.Setup(ctx, ajs, n, natsbus.SetupConfig{}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	hkv, err := ajs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := hkv.Get(ctx, "h1"); err == nil {
			break
		} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the worker exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no heartbeat within 20s of the server starting")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop within 20s")
	}
	if _, err := hkv.Get(context.Background(), "h1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the heartbeat after the stop: %v, want it removed", err)
	}
}

// TestBeatGivesUpWithinItsTTL: a heartbeat whose server is away (or whose
// answer a failover lost) ends with an error of its own within the TTL it
// renews, not at the caller's far-off deadline, so the next beat is not
// held up behind it.
func TestBeatGivesUpWithinItsTTL(t *testing.T) {
	t.Parallel()
	ns := natstest.Start(t)
	_, js := ns.JetStream(t)
	wb := newWorkerBus(t, js)
	ctx := context.Background()
	if err := wb.Beat(ctx, wire.Heartbeat{Host: "h1"}, time.Second); err != nil {
		t.Fatal(err)
	}
	ns.Stop()
	far, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := wb.Beat(far, wire.Heartbeat{Host: "h1"}, time.Second); err == nil || far.Err() != nil {
		t.Errorf("beat with the server away = %v, caller's context %v; want an error of its own while the caller's deadline is still far", err, far.Err())
	}
}

// TestOrdersPullsAreHeartbeatedEverySecond: the bus's pull requests ask
// the server for a heartbeat every second, so that a pull the server no
// longer holds is noticed within two (the client's default, half the 10s
// expiry, left a host's orders waiting 10s), and keep the 10s expiry.
func TestOrdersPullsAreHeartbeatedEverySecond(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	wb, err := natsbus.NewWorkerBus(js, n, "h1", nil)
	if err != nil {
		t.Fatal(err)
	}
	watch := srv.Connect(t)
	pulls, err := watch.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + n.DispatchStream() + "." + natsbus.ConsumerName("h1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	orders := wb.Orders(octx, func(error) {})
	wantPullHeartbeat(t, pulls, time.Second, 10*time.Second)
	ocancel()
	for range orders {
	}
}
