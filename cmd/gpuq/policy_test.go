package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// policyTour is the README's worked examples of the scheduling policy,
// command for command, run in order on a fresh gpuq dev (8 simulated H200s).
var policyTour = []string{
	"gpuq account create nlp --balance 2000",
	"gpuq account weight nlp 2",
	"gpuq account create interns --balance 0",
	"gpuq account refill interns --rate 3600 --cap 100",
	"gpuq submit --id eval-1 --account interns --cost 5 --hold -- echo paid",
	"gpuq why eval-1",
	"gpuq prices set --model 'NVIDIA H200 141GB HBM3e=720' --default 900 --failure-percent 50",
	"gpuq prices show",
	"gpuq submit --id tune-1 --account nlp --gpus 2 --walltime 10m --wait -- sleep 2.5",
	"gpuq job tune-1",
	"gpuq submit --id hog --account nlp --gpus 6 --cost 10 --walltime 10m -- sleep 600",
	"gpuq submit --id wide --account nlp --gpus 8 --cost 10 --walltime 10m -- true",
	"gpuq submit --id quick --account nlp --gpus 2 --cost 1 --walltime 1m --wait -- true",
	"gpuq submit --id long --account nlp --gpus 2 --cost 1 --walltime 1h -- true",
	"gpuq why wide",
	"gpuq why long",
	"gpuq cancel hog",
	"gpuq submit --id flaky --account nlp --cost 10 --wait -- sh -c 'exit 3'",
	"gpuq retry flaky",
	"gpuq jobs --state failed",
	"gpuq job flaky",
}

// TestReadmePolicy runs the policy examples against the real scheduler and
// worker and checks what each part of the policy promises: a held job is
// reserved once the refill covers it, a metered job pays its runtime at its
// model's price, a small job backfills beside a waiting wide one while a
// long one does not, and a failed job is resubmitted as a new one.
func TestReadmePolicy(t *testing.T) {
	t.Parallel()
	readmeShows(t, policyTour...)
	d := startDev(t, "")
	outs := map[string]string{}
	for _, line := range policyTour {
		args := splitShell(line)[1:]
		r := d.gpuq(args...)
		want := 0
		if strings.Contains(line, "exit 3") {
			want = exitJobFailed
		}
		if r.code != want {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", line, r.code, want, r.stdout, r.stderr)
		}
		outs[line] = r.stdout
		switch {
		case strings.Contains(line, "--id hog"):
			waitState(t, d, "hog", "running")
		case strings.Contains(line, "--id quick"):
			// It backfilled: it ran and ended while the wide job waits.
			var wide struct{ State string }
			d.json(&wide, "job", "wide")
			if wide.State != "pending" {
				t.Errorf("wide is %s after the small job ran, want pending", wide.State)
			}
		}
	}

	// Refill and hold.
	if out := outs["gpuq submit --id eval-1 --account interns --cost 5 --hold -- echo paid"]; !strings.Contains(out, "held eval-1") {
		t.Errorf("submit --hold printed %q", out)
	}
	if out := outs["gpuq why eval-1"]; !strings.Contains(out, "the refill of 3600 per hour covers it at") || !strings.Contains(out, "[credits]") {
		t.Errorf("why eval-1 printed %q", out)
	}
	waitState(t, d, "eval-1", "succeeded")

	// Metered: 2 GPUs × the runtime in whole seconds at 720 per GPU-hour,
	// rounded up; the rest of the 2 × 600s × 900/3600 = 300 reservation is
	// released.
	if out := outs["gpuq prices show"]; !strings.Contains(out, "NVIDIA H200 141GB HBM3e  720") || !strings.Contains(out, "reserve at 900 per GPU-hour") {
		t.Errorf("prices show printed:\n%s", out)
	}
	var tune struct {
		Cost, Charged, Reserved int64
		RuntimeMS               int64 `json:"runtime_ms"`
		Message                 string
	}
	d.json(&tune, "job", "tune-1")
	m := regexp.MustCompile(`metered: 2 GPUs × (\d+)s at 720 per GPU-hour = (\d+)`).FindStringSubmatch(tune.Message)
	if m == nil {
		t.Fatalf("tune-1 message %q does not show its metering", tune.Message)
	}
	secs, _ := strconv.ParseInt(m[1], 10, 64)
	if low := tune.RuntimeMS / 1000; secs < 2 || secs < low || secs > low+1 {
		t.Errorf("tune-1 billed %ds for a runtime of %dms, want it rounded up to the second", secs, tune.RuntimeMS)
	}
	if want := (2*secs*720 + 3599) / 3600; tune.Cost != 300 || tune.Charged != want || tune.Reserved != 0 || m[2] != strconv.FormatInt(want, 10) {
		t.Errorf("tune-1 = %+v, want cost 300 and charged ⌈2 × %ds × 720 / 3600⌉ = %d", tune, secs, want)
	}
	// The README prints the charge: sleep 2.5 rounds up to 3s whatever
	// the machine's speed, never to 2s or (unless it runs half a second
	// late) 4s.
	readmeShows(t, "metered: 2 GPUs × 3s at 720 per GPU-hour = 2")
	if out := outs["gpuq job tune-1"]; !strings.Contains(out, "metered: 2 GPUs × 3s at 720 per GPU-hour = 2") {
		t.Errorf("job tune-1 printed:\n%s", out)
	}

	// Backfill.
	if out := outs["gpuq why wide"]; !strings.Contains(out, "they are reserved for it on sim-1") || !strings.Contains(out, "[backfill_reserved]") {
		t.Errorf("why wide printed:\n%s", out)
	}
	if out := outs["gpuq why long"]; !strings.Contains(out, "job wide has GPUs reserved on sim-1") || !strings.Contains(out, "[backfill_blocked]") {
		t.Errorf("why long printed:\n%s", out)
	}
	waitState(t, d, "wide", "succeeded")
	waitState(t, d, "long", "succeeded")
	var wide, long struct {
		StartedAt time.Time `json:"started_at"`
	}
	d.json(&wide, "job", "wide")
	d.json(&long, "job", "long")
	if long.StartedAt.Before(wide.StartedAt) {
		t.Errorf("long started at %v, before the wide job it would have delayed (%v)", long.StartedAt, wide.StartedAt)
	}

	// Retry.
	if out := outs["gpuq retry flaky"]; !strings.Contains(out, "accepted flaky-retry1 (a retry of flaky)") {
		t.Errorf("retry printed %q", out)
	}
	if out := outs["gpuq jobs --state failed"]; !strings.Contains(out, "flaky ") || !strings.Contains(out, "exit_code") {
		t.Errorf("jobs --state failed printed:\n%s", out)
	}
	waitState(t, d, "flaky-retry1", "failed")
	if r := d.gpuq("retry", "eval-1"); r.code != exitFailure || !strings.Contains(r.stderr, "only a failed or cancelled job can be retried") {
		t.Errorf("retry of a succeeded job: exit %d, %s", r.code, r.stderr)
	}
	if out := d.ok("audit"); !strings.HasPrefix(out, "audit ok") {
		t.Errorf("audit printed %q", out)
	}
}
