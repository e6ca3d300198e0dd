// Integration tests of readiness with the real parts: schedulers and a
// worker in-process, wired as cmd/gpuq wires them, on an embedded
// nats-server. A standby scheduler is ready as a standby and exports no
// leader-only gauges; when the leader stops, it takes over, counts a term
// and reports leading. A worker is not ready before its first heartbeat, is
// ready once one is stored, and is not ready again while the server is away
// and its heartbeats fail. A report the server cannot store yet is retried,
// and each retry counted.
package metrics_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuq/gpuq/internal/metrics"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/worker"
)

// eventually polls ready until it holds, for up to 30s.
func eventually(t *testing.T, what string, ready func() (string, error), ok func(string, error) bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := ready()
		if ok(got, err) {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, not %s: Ready = %q, %v", what, got, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func leaderGauge(t *testing.T, reg *prometheus.Registry, want string) {
	t.Helper()
	exp := "# HELP gpuq_scheduler_leader 1 while this scheduler holds the leader lease, else 0.\n# TYPE gpuq_scheduler_leader gauge\ngpuq_scheduler_leader " + want + "\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "gpuq_scheduler_leader"); err != nil {
		t.Error(err)
	}
}

func TestStandbySchedulerIsReadyAndTakesOver(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	n := subjects.Default
	ctx := t.Context()
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	lkv, err := js.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	hkv, err := js.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	type running struct {
		reg  *prometheus.Registry
		m    *metrics.Scheduler
		stop context.CancelFunc
		done chan error
	}
	start := func(name string) running {
		t.Helper()
		lease, err := natsstore.NewLease(js, lkv, name, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		m, err := metrics.NewScheduler(reg)
		if err != nil {
			t.Fatal(err)
		}
		svc, err := scheduler.New(scheduler.Config{Store: natsstore.New(js, lkv), Lease: lease, CommandLog: natsbus.NewCommandLog(js, n),
			Publisher: natsbus.NewPublisher(js), Hosts: natsbus.NewHosts(hkv, log), Logger: log.With("scheduler", name), Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		r := running{reg: reg, m: m, stop: stop, done: make(chan error, 1)}
		go func() { r.done <- svc.Run(rctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-r.done; err != nil {
				t.Errorf("scheduler %s: %v", name, err)
			}
		})
		return r
	}

	a := start("a")
	eventually(t, "a leading and caught up", a.m.Ready, func(s string, err error) bool {
		return err == nil && strings.HasPrefix(s, "leading, caught up")
	})
	b := start("b")
	eventually(t, "b ready as a standby", b.m.Ready, func(s string, err error) bool {
		return err == nil && strings.HasPrefix(s, "standby")
	})
	leaderGauge(t, a.reg, "1")
	leaderGauge(t, b.reg, "0")
	if n, err := testutil.GatherAndCount(b.reg, "gpuq_scheduler_log_applied_sequence", "gpuq_scheduler_caught_up"); err != nil || n != 0 {
		t.Errorf("a standby exports %d leader-only series (%v), want 0", n, err)
	}
	if got := testutil.ToFloat64(terms(t, b.reg)); got != 0 {
		t.Errorf("standby's terms = %v, want 0", got)
	}

	// The leader stops (and releases the lease): the standby takes over.
	a.stop()
	if err := <-a.done; err != nil {
		t.Fatalf("scheduler a: %v", err)
	}
	a.done <- nil // for the cleanup
	eventually(t, "b leading after a stopped", b.m.Ready, func(s string, err error) bool {
		return err == nil && strings.HasPrefix(s, "leading, caught up")
	})
	leaderGauge(t, b.reg, "1")
	if got := testutil.ToFloat64(terms(t, b.reg)); got != 1 {
		t.Errorf("b's terms after taking over = %v, want 1", got)
	}
}

// retries returns the gathered value of gpuq_worker_report_retries_total.
func retries(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuq_worker_report_retries_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no gpuq_worker_report_retries_total")
	return 0
}

// terms returns the gathered value of gpuq_scheduler_terms_total as a
// collector for ToFloat64.
func terms(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "gpuq_scheduler_terms_total" {
			c := prometheus.NewCounter(prometheus.CounterOpts{Name: "terms"})
			c.Add(mf.GetMetric()[0].GetCounter().GetValue())
			return c
		}
	}
	t.Fatal("no gpuq_scheduler_terms_total")
	return nil
}

func TestWorkerNotReadyWithoutHeartbeat(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := srv.JetStream(t)
	n := subjects.Default
	ctx := t.Context()
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	gpu, err := nvmlgpu.Simulate("m1", "dgxh100", 2)
	if errors.Is(err, worker.ErrNoNVML) {
		t.Fatalf("the simulated GPUs need cgo: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gpu.Close() }) // the mock holds nothing
	bus, err := natsbus.NewWorkerBus(js, n, "m1", nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewWorker(prometheus.NewRegistry(), metrics.WorkerConfig{MaxBeatAge: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	bus.ReportRetried = m.ReportRetried
	if _, err := m.Ready(); err == nil {
		t.Fatal("a worker that has not started is ready")
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelError}))
	w, err := worker.New(worker.Config{Host: "m1", GPU: gpu, Bus: bus, Logger: log, StateDir: t.TempDir(),
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	eventually(t, "ready after a heartbeat", m.Ready, func(s string, err error) bool {
		return err == nil && strings.HasPrefix(s, "2 GPUs open (simulated)")
	})

	// The server goes away: heartbeats fail, and past MaxBeatAge the
	// worker is not ready; it is again once the server is back.
	srv.Stop()
	eventually(t, "not ready with the server away", m.Ready, func(_ string, err error) bool {
		return err != nil && strings.Contains(err.Error(), "last heartbeat stored")
	})
	if nc.IsConnected() {
		t.Error("the connection is up with the server stopped")
	}
	srv.Restart(t)
	eventually(t, "ready with the server back", m.Ready, func(_ string, err error) bool { return err == nil })
}

// TestReportRetriesAreCounted: a report published before the command stream
// exists fails (no stream answers) and is retried until a scheduler's setup
// creates it; each retry is counted.
func TestReportRetriesAreCounted(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	n := subjects.Default
	ctx := t.Context()
	bus, err := natsbus.NewWorkerBus(js, n, "m1", nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m, err := metrics.NewWorker(reg, metrics.WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	bus.ReportRetried = m.ReportRetried
	reported := make(chan error, 1)
	go func() {
		reported <- bus.Report(ctx, ledger.Report{Type: ledger.ReportRejected, Host: "m1", Job: "j1", Attempt: 1, Reason: "test"})
	}()
	deadline := time.Now().Add(30 * time.Second)
	for retries(t, reg) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 2 retries counted in 30s of a report to a stream that does not exist")
		}
		select {
		case err := <-reported:
			t.Fatalf("the report returned %v before its stream existed", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reported:
		if err != nil {
			t.Fatalf("report once the stream exists: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the report was not stored within 30s of its stream's creation")
	}
}
