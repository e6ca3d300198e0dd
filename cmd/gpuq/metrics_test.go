// Tests of --metrics-listen as an operator meets it: gpuq dev prints where it
// serves metrics, the endpoint answers a Prometheus scrape over HTTP, and the
// values move as a job runs through the real scheduler and worker: commands
// folded, credits reserved and charged, the job runtime histogram, GPUs
// claimed while the job sleeps, the leader gauge.
package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metricsURL is the /metrics address gpuq dev printed in its banner.
func (d *devServer) metricsURL() string {
	d.t.Helper()
	m := regexp.MustCompile(`(?m)^  metrics    (http://\S+/metrics)`).FindStringSubmatch(d.out.String())
	if m == nil {
		d.t.Fatalf("gpuq dev printed no metrics line:\n%s", d.out.String())
	}
	return m[1]
}

// scrape fetches url and returns every sample by its name and labels as
// printed ("gpuq_gpus{simulated=\"true\",state=\"free\"}").
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: status %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape %s: bad sample %q: %v", url, line, err)
		}
		out[line[:i]] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	return out
}

// get returns the status and body of url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// sum adds the samples whose key starts with prefix.
func sum(m map[string]float64, prefix string) float64 {
	var s float64
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += v
		}
	}
	return s
}

// waitMetric scrapes until ok holds, for up to 30s.
func waitMetric(t *testing.T, url, what string, ok func(map[string]float64) bool) map[string]float64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := scrape(t, url)
		if ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, still not %s; last scrape:\n%v", what, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDevMetricsMoveAsJobsRun(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	url := d.metricsURL()
	base := strings.TrimSuffix(url, "/metrics")

	if code, body := get(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	// Ready once the scheduler leads caught up and the worker has stored a
	// heartbeat; each check says what it found.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, base+"/readyz")
		if code == http.StatusOK {
			for _, want := range []string{"nats: connected", "scheduler: leading, caught up", "worker: 8 GPUs open (simulated)"} {
				if !strings.Contains(body, want) {
					t.Errorf("/readyz body lacks %q:\n%s", want, body)
				}
			}
			break
		}
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready") {
			t.Fatalf("/readyz = %d %q, want 200, or 503 with a reason", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after 30s: %d\n%s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}

	before := waitMetric(t, url, "leading with the demo account created", func(m map[string]float64) bool {
		return m["gpuq_scheduler_leader"] == 1 && m[`gpuq_scheduler_commands_folded_total{kind="admin",outcome="applied"}`] >= 1 &&
			m[`gpuq_gpus{simulated="true",state="free"}`] == 8
	})
	if got := before[`gpuq_hosts{simulated="true",state="up"}`]; got != 1 {
		t.Errorf("gpuq_hosts up = %v, want 1", got)
	}
	if got := before[`gpuq_worker_gpus_open{simulated="true"}`]; got != 1 {
		t.Errorf("gpuq_worker_gpus_open = %v, want 1", got)
	}

	// A job that waits for the test holds 2 GPUs while it runs: the
	// scheduler's view and the worker's own both show them claimed, and the
	// queue shows it running. It ends when the test has seen that (a file
	// appears in a directory the job's pool uid may read), however slow the
	// machine.
	gate, err := os.MkdirTemp("", "gpuq-metrics-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(gate) }) // best effort: a temp dir
	if err := os.Chmod(gate, 0o755); err != nil {
		t.Fatal(err)
	}
	submitted := time.Now()
	r := d.gpuq("submit", "--account", "demo", "--id", "metrics-sleep", "--gpus", "2", "--cost", "40", "--", "sh", "-c",
		"while [ ! -e "+gate+"/go ]; do sleep 0.05; done; echo done")
	if r.code != 0 {
		t.Fatalf("submit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	during := waitMetric(t, url, "2 GPUs claimed by the running job", func(m map[string]float64) bool {
		return m[`gpuq_gpus{simulated="true",state="claimed"}`] == 2 && m[`gpuq_worker_gpus{state="claimed"}`] == 2 &&
			m[`gpuq_jobs{account="demo",state="running"}`] == 1
	})
	if err := os.WriteFile(gate+"/go", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := during[`gpuq_gpus{simulated="true",state="free"}`]; got != 6 {
		t.Errorf("free GPUs while the job runs = %v, want 6", got)
	}
	if got := during[`gpuq_credits_reserved_total{account="demo"}`]; got != 40 {
		t.Errorf("credits reserved = %v, want 40", got)
	}
	if got := during["gpuq_worker_attempts_started_total"]; got != 1 {
		t.Errorf("attempts started = %v, want 1", got)
	}

	after := waitMetric(t, url, "the job charged and its runtime observed", func(m map[string]float64) bool {
		return m[`gpuq_job_runtime_seconds_count{account="demo",state="succeeded"}`] == 1 &&
			m[`gpuq_credits_charged_total{account="demo"}`] == 40 && m[`gpuq_gpus{simulated="true",state="free"}`] == 8
	})
	if got, most := after[`gpuq_job_runtime_seconds_sum{account="demo",state="succeeded"}`], time.Since(submitted).Seconds(); got <= 0 || got > most {
		t.Errorf("job runtime sum = %vs, want more than 0 and at most the %vs since the submission", got, most)
	}
	if got := after[`gpuq_job_wait_seconds_count{account="demo"}`]; got != 1 {
		t.Errorf("job wait count = %v, want 1", got)
	}
	if b, a := sum(before, "gpuq_scheduler_commands_folded_total"), sum(after, "gpuq_scheduler_commands_folded_total"); a < b+4 {
		t.Errorf("commands folded went from %v to %v, want at least 4 more (submit, dispatch, started, done)", b, a)
	}
	if got := after[`gpuq_scheduler_decisions_total{kind="dispatch"}`]; got < 1 {
		t.Errorf("dispatch decisions = %v, want at least 1", got)
	}
	if got := after[`gpuq_worker_attempts_ended_total{end="succeeded"}`]; got != 1 {
		t.Errorf("attempts ended succeeded = %v, want 1", got)
	}
	if got := after["gpuq_worker_output_bytes_total"]; got < float64(len("done\n")) {
		t.Errorf("output bytes = %v, want at least the job's output", got)
	}
	if got, want := after["gpuq_scheduler_log_applied_sequence"], after["gpuq_scheduler_log_stored_sequence"]; got == 0 || got > want {
		t.Errorf("log applied %v, stored %v: want 0 < applied <= stored", got, want)
	}
	if after["gpuq_scheduler_leader"] != 1 || after["gpuq_scheduler_terms_total"] != 1 {
		t.Errorf("leader %v, terms %v: want 1 and 1", after["gpuq_scheduler_leader"], after["gpuq_scheduler_terms_total"])
	}
}
