// Unit tests of the collectors and the health endpoints: each seam method
// moves the metric it names, the gauges follow the service's last report,
// readiness flips with the standing and the heartbeat's age, every metric
// passes Prometheus's own lint (naming, units, _total), and README.md lists
// every metric the package exports.
package metrics

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// exercised returns a registry with a Scheduler and a Worker on which every
// seam method has been called, so every series exists.
func exercised(t *testing.T) (*prometheus.Registry, *Scheduler, *Worker) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := NewScheduler(reg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(reg, WorkerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s.Standing(scheduler.StandingLeading)
	s.Folded("submit", scheduler.FoldApplied, 3*time.Microsecond)
	s.Credits("vision", scheduler.CreditsReserved, 120)
	s.Credits("vision", scheduler.CreditsCharged, 100)
	s.Credits("vision", scheduler.CreditsReleased, 20)
	s.JobStarted("vision", 2*time.Second)
	s.JobEnded("vision", ledger.StateSucceeded, time.Minute)
	s.Flushed(time.Millisecond, 3, 5, nil)
	s.Conflict()
	s.Decided("dispatch", 2)
	s.Progress(scheduler.Progress{Applied: 10, Stored: 12})
	s.Stats(scheduler.Stats{Jobs: []scheduler.JobCount{{Account: "vision", State: ledger.StatePending, N: 3}},
		Hosts: []wire.Heartbeat{{Host: "h1", Simulated: true, Devices: []wire.Device{{UUID: "a", Healthy: true}}}}})
	w.Opened(true, 1)
	w.Beat(wire.Heartbeat{Host: "h1", Devices: []wire.Device{{UUID: "a", Healthy: true}}}, nil)
	w.AttemptStarted()
	w.AttemptEnded(worker.EndSucceeded, time.Second)
	w.OutputSent(10)
	w.OutputDropped(worker.DropTruncated, 5)
	w.ReportRetried(errors.New("timeout"))
	return reg, s, w
}

func TestSchedulerMetricsFollowReports(t *testing.T) {
	t.Parallel()
	reg, s, _ := exercised(t)
	want := `
# HELP gpuq_credits_charged_total Credits charged at settlement, from the journal's settle entries, by account.
# TYPE gpuq_credits_charged_total counter
gpuq_credits_charged_total{account="vision"} 100
# HELP gpuq_credits_released_total Credits held and given back at settlement, from the journal's settle entries, by account.
# TYPE gpuq_credits_released_total counter
gpuq_credits_released_total{account="vision"} 20
# HELP gpuq_gpus GPUs of live hosts by state: free, claimed (held by a gpuq attempt), busy (used by a process gpuq did not start) or unhealthy (leader only).
# TYPE gpuq_gpus gauge
gpuq_gpus{simulated="true",state="busy"} 0
gpuq_gpus{simulated="true",state="claimed"} 0
gpuq_gpus{simulated="true",state="free"} 1
gpuq_gpus{simulated="true",state="unhealthy"} 0
# HELP gpuq_jobs Jobs in the ledger in each state that is not final (pending, held, dispatched, running), by account (leader only).
# TYPE gpuq_jobs gauge
gpuq_jobs{account="vision",state="pending"} 3
# HELP gpuq_scheduler_leader 1 while this scheduler holds the leader lease, else 0.
# TYPE gpuq_scheduler_leader gauge
gpuq_scheduler_leader 1
# HELP gpuq_scheduler_log_lag_entries Command-log entries stored but not yet folded: stored minus applied (leader only).
# TYPE gpuq_scheduler_log_lag_entries gauge
gpuq_scheduler_log_lag_entries 2
# HELP gpuq_scheduler_terms_total Times this scheduler took the leader lease and began a term.
# TYPE gpuq_scheduler_terms_total counter
gpuq_scheduler_terms_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpuq_credits_charged_total", "gpuq_credits_released_total",
		"gpuq_gpus", "gpuq_jobs", "gpuq_scheduler_leader", "gpuq_scheduler_log_lag_entries", "gpuq_scheduler_terms_total"); err != nil {
		t.Error(err)
	}
	if _, err := s.Ready(); err == nil || !strings.Contains(err.Error(), "catching up: 2 entries behind") {
		t.Errorf("Ready while 2 behind = %v, want catching up", err)
	}
	s.Progress(scheduler.Progress{Applied: 12, Stored: 12, Caught: true})
	if what, err := s.Ready(); err != nil || what != "leading, caught up at 12" {
		t.Errorf("Ready caught up = %q, %v; want leading, caught up at 12", what, err)
	}

	// Stepping down drops what only a leader knows; leading again counts
	// a new term.
	s.Standing(scheduler.StandingContending)
	if n, err := testutil.GatherAndCount(reg, "gpuq_jobs", "gpuq_gpus", "gpuq_scheduler_log_lag_entries"); err != nil || n != 0 {
		t.Errorf("leader-only series after stepping down = %d (%v), want 0", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP gpuq_scheduler_leader 1 while this scheduler holds the leader lease, else 0.
# TYPE gpuq_scheduler_leader gauge
gpuq_scheduler_leader 0
`), "gpuq_scheduler_leader"); err != nil {
		t.Errorf("leader gauge after stepping down: %v", err)
	}
	s.Standing(scheduler.StandingStandby)
	s.Standing(scheduler.StandingStandby)
	if what, err := s.Ready(); err != nil || !strings.HasPrefix(what, "standby") {
		t.Errorf("Ready as standby = %q, %v; want ready as standby", what, err)
	}
	s.Standing(scheduler.StandingUnreachable)
	if _, err := s.Ready(); err == nil {
		t.Error("Ready with the lease unreachable = nil error, want not ready")
	}
	s.Standing(scheduler.StandingLeading)
	if got := testutil.ToFloat64(s.terms); got != 2 {
		t.Errorf("terms after leading twice = %v, want 2", got)
	}
}

func TestSchedulerNotReadyBeforeItReports(t *testing.T) {
	t.Parallel()
	s, err := NewScheduler(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ready(); err == nil {
		t.Error("Ready before any report = nil error, want not ready")
	}
}

func TestWorkerReadyFollowsTheHeartbeat(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	w, err := NewWorker(prometheus.NewRegistry(), WorkerConfig{MaxBeatAge: 10 * time.Second, NowFunc: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	notReady := func(step, want string) {
		t.Helper()
		what, err := w.Ready()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Ready = %q, %v; want not ready: %s", step, what, err, want)
		}
	}
	notReady("before the GPUs are open", "not open")
	w.Opened(false, 8)
	notReady("open, no heartbeat", "no heartbeat stored yet")
	w.Beat(wire.Heartbeat{Host: "h1"}, errors.New("no responders"))
	notReady("a heartbeat that failed", "no responders")
	w.Beat(wire.Heartbeat{Host: "h1"}, nil)
	if what, err := w.Ready(); err != nil || !strings.Contains(what, "8 GPUs open (NVML)") {
		t.Errorf("after a stored heartbeat: Ready = %q, %v; want ready", what, err)
	}
	now = now.Add(11 * time.Second)
	notReady("11s after the last stored heartbeat", "more than 10s")
	w.Beat(wire.Heartbeat{Host: "h1"}, nil)
	if _, err := w.Ready(); err != nil {
		t.Errorf("after a fresh heartbeat: Ready = %v, want ready", err)
	}
}

func TestWorkerMetricsFollowReports(t *testing.T) {
	t.Parallel()
	reg, _, w := exercised(t)
	w.Beat(wire.Heartbeat{Host: "h1", Devices: []wire.Device{{UUID: "a", Healthy: true, Job: "j", Attempt: 1}, {UUID: "b"},
		{UUID: "c", Healthy: true, Busy: true}, {UUID: "d", Healthy: true}}, Running: []wire.Running{{Job: "j", Attempt: 1}}}, nil)
	want := `
# HELP gpuq_worker_attempts_running Attempts running on this host, as its last heartbeat showed.
# TYPE gpuq_worker_attempts_running gauge
gpuq_worker_attempts_running 1
# HELP gpuq_worker_gpus This host's GPUs by state, as its last heartbeat showed: free, claimed, busy or unhealthy.
# TYPE gpuq_worker_gpus gauge
gpuq_worker_gpus{state="busy"} 1
gpuq_worker_gpus{state="claimed"} 1
gpuq_worker_gpus{state="free"} 1
gpuq_worker_gpus{state="unhealthy"} 1
# HELP gpuq_worker_output_dropped_bytes_total Bytes of job output dropped, by reason: truncated (past the attempt's cap) or unstored (the server did not store it).
# TYPE gpuq_worker_output_dropped_bytes_total counter
gpuq_worker_output_dropped_bytes_total{reason="truncated"} 5
# HELP gpuq_worker_report_retries_total Publishes of started, done or rejected reports that failed and were retried.
# TYPE gpuq_worker_report_retries_total counter
gpuq_worker_report_retries_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "gpuq_worker_attempts_running", "gpuq_worker_gpus",
		"gpuq_worker_output_dropped_bytes_total", "gpuq_worker_report_retries_total"); err != nil {
		t.Error(err)
	}
}

func TestGPUState(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		d    wire.Device
		want string
	}{
		{wire.Device{Healthy: true}, GPUFree},
		{wire.Device{Healthy: true, Job: "j"}, GPUClaimed},
		{wire.Device{Healthy: true, Busy: true}, GPUBusy},
		{wire.Device{Healthy: false, Job: "j"}, GPUUnhealthy},
		{wire.Device{Healthy: false, Busy: true}, GPUUnhealthy},
	} {
		if got := GPUState(tc.d); got != tc.want {
			t.Errorf("GPUState(%+v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// TestMetricsLint: every metric passes client_golang's promlint (names,
// units, _total on counters, help text).
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	reg, _, _ := exercised(t)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
}

// TestREADMEListsEveryMetric: README.md's "Metrics and health" names every
// metric the package exports, so an operator can look each one up.
func TestREADMEListsEveryMetric(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "## Metrics and health")
	if !ok {
		t.Fatal(`README.md has no "## Metrics and health" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	reg, _, _ := exercised(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) < 30 {
		t.Fatalf("gathered %d metric families, want every one exercised (at least 30)", len(mfs))
	}
	for _, mf := range mfs {
		if !strings.Contains(section, "`"+mf.GetName()+"`") {
			t.Errorf("README.md's Metrics and health section does not list `%s`", mf.GetName())
		}
	}
}

func TestHandlerHealthAndReadiness(t *testing.T) {
	t.Parallel()
	reg, s, _ := exercised(t)
	var down atomic.Bool
	h := Handler(reg, Check{Name: "nats", Func: func() (string, error) {
		if down.Load() {
			return "", errors.New("not connected to NATS (RECONNECTING)")
		}
		return "connected", nil
	}}, Check{Name: "scheduler", Func: s.Ready})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	s.Progress(scheduler.Progress{Applied: 5, Stored: 5, Caught: true})
	if code, body := get("/readyz"); code != 200 || body != "nats: connected\nscheduler: leading, caught up at 5\n" {
		t.Errorf("/readyz = %d %q, want 200 with each check", code, body)
	}
	down.Store(true)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "nats: not ready: not connected to NATS (RECONNECTING)") {
		t.Errorf("/readyz disconnected = %d %q, want 503 with the reason", code, body)
	}
	down.Store(false)
	s.Standing(scheduler.StandingUnreachable)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "scheduler: not ready: the leader lease cannot be reached") {
		t.Errorf("/readyz unreachable = %d %q, want 503 with the reason", code, body)
	}
	code, body := get("/metrics")
	if code != 200 || !strings.Contains(body, "gpuq_scheduler_commands_folded_total{kind=\"submit\",outcome=\"applied\"} 1") {
		t.Errorf("/metrics = %d, want 200 with the folded counter:\n%s", code, body)
	}
}
