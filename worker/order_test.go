// Tests of how the worker takes orders, on a fake bus and fake GPUs with
// real child processes: an order runs only while its attempt is current in
// the ledger's record; a refusal for GPUs in use says busy; GPUs are free
// before the done report; a cancel order kills its run; and the worker
// rides out a server that does not answer, logging each outage once.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// logBuffer keeps what a worker logs, and shows it in the test's output.
type logBuffer struct {
	out io.Writer
	mu  sync.Mutex
	b   strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.b.Write(p)
	l.mu.Unlock()
	return l.out.Write(p)
}

// count is how many times msg was logged.
func (l *logBuffer) count(msg string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), msg)
}

// runningFake is a worker running on a fake bus.
type runningFake struct {
	w      *Worker
	bus    *fakeBus
	logs   *logBuffer
	cancel context.CancelFunc
	done   chan error
}

// startFake runs a worker for host "h" with gpus fake GPUs on bus until
// the test ends; adjust may change its config.
func startFake(t *testing.T, bus *fakeBus, gpus int, adjust func(*Config)) *runningFake {
	t.Helper()
	logs := &logBuffer{out: t.Output()}
	cfg := Config{Host: "h", GPU: fakeGPU{n: gpus}, Bus: bus, StateDir: t.TempDir(),
		Logger:            slog.New(slog.NewTextHandler(logs, nil)),
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTTL: time.Second, KillGrace: time.Second,
		ReportTimeout: time.Second, DrainTimeout: time.Second}
	if adjust != nil {
		adjust(&cfg)
	}
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &runningFake{w: w, bus: bus, logs: logs, cancel: cancel, done: make(chan error, 1)}
	go func() { f.done <- w.Run(ctx) }()
	t.Cleanup(func() {
		w.Abort()
		f.stop(t)
	})
	return f
}

// stop ends the worker and waits for Run to return.
func (f *runningFake) stop(t *testing.T) {
	t.Helper()
	f.cancel()
	select {
	case err, ok := <-f.done:
		if ok {
			close(f.done)
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the worker did not stop within 20s")
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not within 20s", what)
	}
}

func dispatchOrder(job string, attempt, gpus int, command ...string) ledger.DispatchOrder {
	return ledger.DispatchOrder{Host: "h", Job: job, Account: "a", Attempt: attempt, GPUs: gpus,
		Command: command, Walltime: time.Minute}
}

// TestOrderRunsOnlyWhileCurrent: an order runs when the job's record shows
// its attempt dispatched to this host; it is acked and dropped, without
// running and without a report, when the record shows a later attempt, or
// this attempt in another state or on another host. A record that is
// missing or behind is read again, for RecordWait; a server that does not
// answer is retried for as long as it takes, past RecordWait.
func TestOrderRunsOnlyWhileCurrent(t *testing.T) {
	t.Parallel()
	rec := func(attempt int, st ledger.JobState, host string) *ledger.Job {
		return &ledger.Job{ID: "j", Account: "a", GPUs: 1, Attempt: attempt, State: st, JobOutcome: &ledger.JobOutcome{Host: host}}
	}
	always := func(j *ledger.Job) func(int) (*ledger.Job, error) {
		return func(int) (*ledger.Job, error) { return j, nil }
	}
	// first answers reads before the n-th with early, then with j.
	first := func(n int, early func() (*ledger.Job, error), j *ledger.Job) func(int) (*ledger.Job, error) {
		return func(i int) (*ledger.Job, error) {
			if i < n {
				return early()
			}
			return j, nil
		}
	}
	current := rec(2, ledger.StateDispatched, "h")
	for _, tc := range []struct {
		name string
		read func(i int) (*ledger.Job, error) // the i-th read, from 0
		run  bool
	}{
		{"current", always(current), true},
		{"a later attempt", always(rec(3, ledger.StateDispatched, "h")), false},
		{"lost and requeued", always(rec(2, ledger.StatePending, "")), false},
		{"sent to another host", always(rec(2, ledger.StateDispatched, "h2")), false},
		{"already running here", always(rec(2, ledger.StateRunning, "h")), false},
		{"succeeded elsewhere", always(rec(2, ledger.StateSucceeded, "h2")), false},
		{"cancelled", always(rec(2, ledger.StateCancelled, "h")), false},
		{"missing for good", always(nil), false},
		{"behind for good", always(rec(1, ledger.StateRunning, "h")), false},
		{"missing, then current", first(3, func() (*ledger.Job, error) { return nil, nil }, current), true},
		{"behind, then current", first(3, func() (*ledger.Job, error) { return rec(1, ledger.StatePending, ""), nil }, current), true},
		{"undecodable, then current", first(2, func() (*ledger.Job, error) { return nil, fmt.Errorf("%w: x", ErrBadRecord) }, current), true},
		// Over a second of failed reads, far past RecordWait, then a
		// record not caught up yet, then the attempt.
		{"unreachable, then current", func(i int) (*ledger.Job, error) {
			switch {
			case i < 7:
				return nil, errors.New("nats: timeout")
			case i == 7:
				return nil, nil
			}
			return current, nil
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var reads atomic.Int32
			bus := newFakeBus()
			bus.job = func(string) (*ledger.Job, error) { return tc.read(int(reads.Add(1) - 1)) }
			f := startFake(t, bus, 1, func(c *Config) { c.RecordWait = 300 * time.Millisecond })
			acked := bus.sendOrder(t, dispatchOrder("j", 2, 1, "true"))
			waitClosed(t, acked, "ack of the order")
			if !tc.run {
				if got := bus.allReports(); len(got) != 0 {
					t.Errorf("reports %+v for a stale order, want none", got)
				}
				if n := f.w.count(); n != 0 {
					t.Errorf("%d attempts running after a stale order", n)
				}
				if n := f.logs.count("order no longer current"); n != 1 {
					t.Errorf("the stale order was logged %d times, want once", n)
				}
				return
			}
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted || r.Attempt != 2 {
				t.Fatalf("first report %+v, want started of attempt 2", r)
			}
			if r := bus.nextReport(t); r.Type != ledger.ReportDone || r.ExitCode != 0 {
				t.Fatalf("second report %+v, want done with exit 0", r)
			}
			if strings.HasPrefix(tc.name, "unreachable") {
				if down, up := f.logs.count("cannot read job records"), f.logs.count("reading job records again"); down != 1 || up != 1 {
					t.Errorf("the outage of the reads was logged %d times as begun and %d as ended, want once each", down, up)
				}
			}
		})
	}
}

// TestUnconfirmedOrderWaitsForTheStop: while the ledger cannot be read, an
// order is neither run nor acked; a stopping worker leaves it for the next
// process and returns.
func TestUnconfirmedOrderWaitsForTheStop(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	var reads atomic.Int32
	read := make(chan struct{}, 1)
	bus.job = func(string) (*ledger.Job, error) {
		reads.Add(1)
		select {
		case read <- struct{}{}:
		default:
		}
		return nil, errors.New("nats: no responders available for request")
	}
	f := startFake(t, bus, 1, func(c *Config) { c.RecordWait = 10 * time.Millisecond })
	acked := bus.sendOrder(t, dispatchOrder("j", 1, 1, "true"))
	for reads.Load() < 5 { // well past RecordWait
		<-read
	}
	f.stop(t)
	select {
	case <-acked:
		t.Error("an order that could not be confirmed was acked")
	default:
	}
	if got := bus.allReports(); len(got) != 0 {
		t.Errorf("reports %+v for an unconfirmed order, want none", got)
	}
	if n := f.logs.count("cannot read job records"); n != 1 {
		t.Errorf("the failing reads were logged %d times, want once", n)
	}
}

// TestBusyRefusalAndCancel: an order for GPUs another attempt holds is
// refused as busy; one for more GPUs than the host has is refused, not
// busy; a cancel order for the running attempt kills it.
func TestBusyRefusalAndCancel(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	startFake(t, bus, 1, nil)
	bus.sendOrder(t, dispatchOrder("long", 1, 1, "sleep", "30"))
	if r := bus.nextReport(t); r.Type != ledger.ReportStarted || r.Job != "long" {
		t.Fatalf("report %+v, want long started", r)
	}
	bus.sendOrder(t, dispatchOrder("taken", 1, 1, "true"))
	if r := bus.nextReport(t); r.Type != ledger.ReportRejected || r.Job != "taken" || !r.Busy {
		t.Errorf("report %+v, want taken rejected as busy", r)
	}
	bus.sendOrder(t, dispatchOrder("too-big", 1, 2, "true"))
	if r := bus.nextReport(t); r.Type != ledger.ReportRejected || r.Job != "too-big" || r.Busy {
		t.Errorf("report %+v, want too-big rejected, not busy", r)
	}
	// The scheduler sends this when a started report comes for an attempt
	// that is no longer current, as for a cancelled job.
	bus.sendOrder(t, ledger.CancelOrder{Host: "h", Job: "long", Account: "a", Attempt: 1})
	if r := bus.nextReport(t); r.Type != ledger.ReportDone || r.Job != "long" || r.ExitCode != 128+15 || r.Infra != "" {
		t.Errorf("report %+v, want long done, stopped by SIGTERM", r)
	}
}

// TestGPUsFreeBeforeDoneReport: when the done report of an attempt is
// sent, its GPUs can already be claimed; the scheduler places new work on
// them as soon as it is stored.
func TestGPUsFreeBeforeDoneReport(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	var w *Worker
	var claimErr atomic.Value
	ready := make(chan struct{})
	bus.onReport = func(r ledger.Report) {
		if r.Type != ledger.ReportDone {
			return
		}
		<-ready
		probe := Attempt{Job: "probe", N: 1}
		_, err := w.claims.Claim(probe, 1)
		claimErr.Store(fmt.Sprint(err))
		w.claims.Release(probe)
	}
	f := startFake(t, bus, 1, nil)
	w = f.w
	close(ready)
	bus.sendOrder(t, dispatchOrder("j", 1, 1, "true"))
	bus.nextReport(t) // started
	if r := bus.nextReport(t); r.Type != ledger.ReportDone {
		t.Fatalf("report %+v, want done", r)
	}
	if got := claimErr.Load(); got != "<nil>" {
		t.Errorf("claim of the GPU while the done report was sent: %v, want it free", got)
	}
}

// TestStartWaitsForTheServer: a worker whose server does not answer at
// start waits for it, logging that once, and then runs.
func TestStartWaitsForTheServer(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	var calls atomic.Int32
	bus.install = func() (string, error) {
		if calls.Add(1) <= 4 {
			return "", errors.New("nats: no servers available for connection")
		}
		return "fake", nil
	}
	f := startFake(t, bus, 1, nil)
	select {
	case <-bus.beat:
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat within 20s of the server answering")
	}
	if down, up := f.logs.count("cannot find the orders stream"), f.logs.count("found the orders stream"); down != 1 || up != 1 {
		t.Errorf("the wait was logged %d times as begun and %d as ended, want once each", down, up)
	}
	bus.sendOrder(t, dispatchOrder("j", 1, 1, "true"))
	if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
		t.Errorf("report %+v, want started", r)
	}
}

// TestStopBeforeTheServerAnswers: a worker stopped while it waits for the
// server returns nil.
func TestStopBeforeTheServerAnswers(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	tried := make(chan struct{}, 1)
	bus.install = func() (string, error) {
		select {
		case tried <- struct{}{}:
		default:
		}
		return "", errors.New("nats: no servers available for connection")
	}
	f := startFake(t, bus, 1, nil)
	<-tried
	f.stop(t) // fails the test unless Run returns nil
}

// TestOutagesAreLoggedOnce: heartbeats and the order stream failing many
// times in a row are logged once when they begin failing and once when
// they work again.
func TestOutagesAreLoggedOnce(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	var beats atomic.Int32
	bus.beatErr = func() error {
		if beats.Add(1) <= 10 {
			return errors.New("nats: timeout")
		}
		return nil
	}
	lost := errors.New("nats: no heartbeat received")
	bus.ordersLost = []error{lost, lost, lost, nil, lost, nil}
	f := startFake(t, bus, 1, func(c *Config) { c.HeartbeatInterval = 5 * time.Millisecond })
	select {
	case <-bus.beat:
	case <-time.After(20 * time.Second):
		t.Fatal("no heartbeat stored within 20s")
	}
	// An order handled shows the lost calls before it were made.
	bus.sendOrder(t, dispatchOrder("j", 1, 1, "true"))
	bus.nextReport(t)
	for _, c := range []struct {
		msg  string
		want int
	}{
		{"heartbeat not stored", 1}, {"heartbeat stored again", 1},
		{"cannot read orders", 2}, {"reading orders again", 2},
	} {
		if got := f.logs.count(c.msg); got != c.want {
			t.Errorf("%q logged %d times, want %d", c.msg, got, c.want)
		}
	}
}

// TestRunClosesTheStartedLog: once Run has returned, the worker's record
// of started attempts is closed (its file no longer held open).
func TestRunClosesTheStartedLog(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	f := startFake(t, bus, 1, nil)
	bus.sendOrder(t, dispatchOrder("j", 1, 1, "true"))
	for _, want := range []ledger.ReportType{ledger.ReportStarted, ledger.ReportDone} {
		if r := bus.nextReport(t); r.Type != want {
			t.Fatalf("report %+v, want %s", r, want)
		}
	}
	f.stop(t)
	f.w.state.mu.Lock()
	closed, open := f.w.state.closed, f.w.state.f != nil
	f.w.state.mu.Unlock()
	if !closed || open {
		t.Errorf("after Run: the started log closed %v, its file open %v; want closed", closed, open)
	}
}
