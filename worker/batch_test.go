package worker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// testOrder makes e an order of bus (the job's record shows it, as
// sendOrder does) without sending it, and a channel closed when it is acked
// or termed.
func testOrder(bus *fakeBus, e ledger.Effect) (Order, <-chan struct{}) {
	acked := make(chan struct{})
	var once sync.Once
	done := func() { once.Do(func() { close(acked) }) }
	if d, ok := e.(ledger.DispatchOrder); ok {
		bus.mu.Lock()
		bus.current[d.Job] = d
		bus.mu.Unlock()
	}
	return Order{Effect: e,
		Ack:  func(context.Context) error { done(); return nil },
		Term: func(context.Context, string) error { done(); return nil }}, acked
}

// TestGatherTakesWaitingDispatchesOfDistinctJobs: a batch is the first
// order and the dispatches waiting behind it, up to an order that is not
// a dispatch, one of a job already in the batch (a redelivery or a later
// attempt), or maxBatch (which leaves the rest waiting); an order taken
// that ends it is handed back, to be handled after the batch. An order that is not a dispatch is a batch of
// its own.
func TestGatherTakesWaitingDispatchesOfDistinctJobs(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	d := func(job string, n int) Order { o, _ := testOrder(bus, dispatchOrder(job, n, 1, "true")); return o }
	cancel := Order{Effect: ledger.CancelOrder{Host: "h", Job: "x", Attempt: 1}}
	bad := Order{Err: errors.New("undecodable")}
	jobs := func(batch []Order) string {
		var s []string
		for _, o := range batch {
			switch e := o.Effect.(type) {
			case ledger.DispatchOrder:
				s = append(s, e.Job)
			case ledger.CancelOrder:
				s = append(s, "cancel:"+e.Job)
			default:
				s = append(s, "bad")
			}
		}
		return strings.Join(s, ",")
	}
	many := make([]Order, maxBatch+2)
	for i := range many {
		many[i] = d("m"+string(rune('a'+i)), 1)
	}
	for _, c := range []struct {
		what         string
		first        Order
		waiting      []Order
		close        bool
		batch, next  string
		closed, left bool
	}{
		{what: "up to a cancel", first: d("j1", 1), waiting: []Order{d("j2", 1), d("j3", 1), cancel, d("j4", 1)},
			batch: "j1,j2,j3", next: "cancel:x", left: true},
		{what: "up to a later attempt of a job in it", first: d("j1", 1), waiting: []Order{d("j2", 1), d("j1", 2)},
			batch: "j1,j2", next: "j1"},
		{what: "up to an undecodable order", first: d("j1", 1), waiting: []Order{bad}, batch: "j1", next: "bad"},
		{what: "a cancel alone", first: cancel, waiting: []Order{d("j1", 1)}, batch: "cancel:x", left: true},
		{what: "up to the end of the orders", first: d("j1", 1), waiting: []Order{d("j2", 1)}, close: true,
			batch: "j1,j2", closed: true},
		{what: "at most maxBatch", first: many[0], waiting: many[1:], batch: jobs(many[:maxBatch]), left: true},
	} {
		orders := make(chan Order, len(c.waiting))
		for _, o := range c.waiting {
			orders <- o
		}
		if c.close {
			close(orders)
		}
		batch, next, closed := gather(c.first, orders)
		nexts := ""
		if next != nil {
			nexts = jobs([]Order{*next})
		}
		if got := jobs(batch); got != c.batch || nexts != c.next || closed != c.closed {
			t.Errorf("%s: batch %s, next %q, closed %v; want %s, %q, %v", c.what, got, nexts, closed, c.batch, c.next, c.closed)
		}
		if left := len(orders) > 0; left != c.left {
			t.Errorf("%s: orders left waiting %v, want %v", c.what, left, c.left)
		}
	}
}

// TestBatchIsRecordedWithOneFlush: the attempts of a batch of dispatches
// are recorded on disk together, with one flush, before the first is
// reported started; their started reports are sent side by side, and each
// then runs (not before its report is stored) and is acked. A
// worker restarted on the same disk refuses every one of them when the
// orders come again (as after a crash before their acks).
func TestBatchIsRecordedWithOneFlush(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	jobs := []string{"b1", "b2", "b3"}
	bus := newFakeBus()
	var onDisk []byte
	var once sync.Once
	var f *runningFake
	// Each started report waits (for up to 5s) until all of the batch's
	// are being sent: they are sent side by side. Meanwhile no attempt
	// has a process.
	var arrived sync.WaitGroup
	arrived.Add(len(jobs))
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	bus.onReport = func(r ledger.Report) {
		if r.Type != ledger.ReportStarted {
			return
		}
		once.Do(func() {
			var err error
			if onDisk, err = os.ReadFile(filepath.Join(state, "started.jsonl")); err != nil {
				t.Error(err)
			}
		})
		arrived.Done()
		select {
		case <-all:
		case <-time.After(5 * time.Second):
			t.Errorf("the started report of %s waited 5s for the batch's others: they are sent one at a time", r.Job)
		}
		f.w.mu.Lock()
		defer f.w.mu.Unlock()
		if a := f.w.running[Attempt{r.Job, r.Attempt}]; a == nil || a.proc != nil {
			t.Errorf("while its started report was sent, attempt %s/%d ran %v (or was not running)", r.Job, r.Attempt, a)
		}
	}
	f = startFake(t, bus, len(jobs), func(c *Config) { c.StateDir = state })
	waitBeat(t, bus)
	var batch []Order
	var acks []<-chan struct{}
	for _, j := range jobs {
		o, acked := testOrder(bus, dispatchOrder(j, 1, 1, "true"))
		batch, acks = append(batch, o), append(acks, acked)
	}
	syncs := func() int {
		f.w.state.mu.Lock()
		defer f.w.state.mu.Unlock()
		return f.w.state.syncs
	}
	before := syncs()
	f.w.handle(context.Background(), context.Background(), batch)
	if n := syncs() - before; n != 1 {
		t.Errorf("a batch of %d dispatches flushed the started log %d times, want once", len(jobs), n)
	}
	for i, j := range jobs {
		waitClosed(t, acks[i], "ack of "+j)
		if !strings.Contains(string(onDisk), `"job":"`+j+`"`) {
			t.Errorf("when the first started report was sent, the started log on disk %q had no line of %s", onDisk, j)
		}
	}
	started := map[string]bool{}
	for range 2 * len(jobs) {
		if r := bus.nextReport(t); r.Type == ledger.ReportStarted {
			started[r.Job] = true
		}
	}
	if len(started) != len(jobs) {
		t.Errorf("reported started: %v, want %v", started, jobs)
	}
	f.stop(t)

	again := newFakeBus()
	g := startFake(t, again, len(jobs), func(c *Config) { c.StateDir = state })
	waitBeat(t, again)
	batch = batch[:0]
	for _, j := range jobs {
		o, _ := testOrder(again, dispatchOrder(j, 1, 1, "true"))
		batch = append(batch, o)
	}
	g.w.handle(context.Background(), context.Background(), batch)
	for _, j := range jobs {
		r := again.nextReport(t)
		if r.Type != ledger.ReportRejected || !strings.Contains(r.Reason, "not run twice") {
			t.Errorf("after a restart, the redelivered order of %s got %+v, want a rejected report (not run twice)", j, r)
		}
	}
}

// waitBeat waits for the worker's first heartbeat, written once it has
// bound its started log and takes orders.
func waitBeat(t *testing.T, bus *fakeBus) {
	t.Helper()
	select {
	case <-bus.beat:
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat within 20s")
	}
}
