// End-to-end tests of --after, hold, release, update and --dry-run through
// gpuq dev: the real binary against its embedded server, scheduler and
// simulated worker.
package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitWhy polls gpuq why job until its output has want.
func waitWhy(t *testing.T, d *devServer, job, want string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := d.ok("why", job)
		if strings.Contains(out, want) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpuq why %s printed, after 30s:\n%s\nwant %q", job, out, want)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestAfterHoldReleaseCLI(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	// dep-a runs until the test is done changing dep-b: a fixed sleep
	// ended first on a busy machine, and dep-b with it.
	// (In a directory a job's pool uid may search.)
	dir, err := os.MkdirTemp("", "gpuq-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(dir, "go")
	d.ok("submit", "--id", "dep-a", "--account", "demo", "--cost", "10", "--", "sh", "-c", `while [ ! -e "$1" ]; do sleep 0.05; done`, "sh", gate)
	out := d.ok("submit", "--id", "dep-b", "--account", "demo", "--cost", "5", "--after", "dep-a", "--", "sh", "-c", "echo after")
	if !strings.Contains(out, "waits for dep-a") {
		t.Errorf("submit --after printed %q, want it to name dep-a", out)
	}
	waitWhy(t, d, "dep-b", "waiting_on_dependency")

	if out := d.ok("hold", "dep-b"); !strings.HasPrefix(out, "paused dep-b") {
		t.Errorf("gpuq hold printed %q", out)
	}
	waitWhy(t, d, "dep-b", "user_hold")
	if out := d.ok("release", "dep-b"); !strings.HasPrefix(out, "resumed dep-b") {
		t.Errorf("gpuq release printed %q", out)
	}
	if out := d.ok("update", "dep-b", "--priority", "9"); !strings.HasPrefix(out, "updated dep-b") {
		t.Errorf("gpuq update printed %q", out)
	}
	if r := d.gpuq("update", "dep-b"); r.code != exitUsage {
		t.Errorf("update without --priority: exit %d, want %d", r.code, exitUsage)
	}
	if r := d.gpuq("submit", "--id", "dep-x", "--account", "demo", "--cost", "1", "--after", "nope", "--", "true"); r.code != exitRejected || !strings.Contains(r.stderr, "unknown_dependency") {
		t.Errorf("submit --after an unknown job: exit %d, stderr %q; want %d and unknown_dependency", r.code, r.stderr, exitRejected)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitState(t, d, "dep-a", "succeeded")
	waitState(t, d, "dep-b", "succeeded")
	if r := d.gpuq("hold", "dep-b"); r.code != exitRejected || !strings.Contains(r.stderr, "not_waiting") {
		t.Errorf("hold of an ended job: exit %d, stderr %q; want %d and not_waiting", r.code, r.stderr, exitRejected)
	}

	// An afterok dependency that is cancelled fails its dependant and
	// releases what it reserved.
	d.ok("submit", "--id", "dep-long", "--account", "demo", "--cost", "10", "--", "sleep", "60")
	d.ok("submit", "--id", "dep-then", "--account", "demo", "--cost", "7", "--after", "dep-long", "--", "true")
	d.ok("cancel", "dep-long")
	waitState(t, d, "dep-then", "failed")
	var j struct {
		Reason   string
		Reserved int64
		Charged  int64
	}
	d.json(&j, "job", "dep-then")
	if j.Reason != "dependency_failed" || j.Reserved != 0 || j.Charged != 0 {
		t.Errorf("dep-then = %+v, want reason dependency_failed, nothing reserved or charged", j)
	}
}

func TestDryRunQuotesWhatSubmitReserves(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("prices", "set", "--default", "100", "--model", "NVIDIA H200=360", "--id", "p1")
	var q struct {
		Reserve   int64
		Outcome   string
		CanPay    bool `json:"can_pay"`
		Available int64
		Estimate  string
	}
	args := []string{"--account", "demo", "--gpus", "2", "--walltime", "90s"}
	d.json(&q, append(append([]string{"submit", "--id", "quoted", "--dry-run"}, args...), "--", "true")...)
	// 2 GPUs × 90 s at the highest price, 360 per GPU-hour: 18.
	if q.Reserve != 18 || q.Outcome != "accepted" || !q.CanPay || q.Available != 1000 || !strings.HasPrefix(q.Estimate, "estimate:") {
		t.Fatalf("dry run = %+v, want reserve 18, accepted, can pay, 1000 available, an estimate", q)
	}
	if r := d.gpuq("job", "quoted"); r.code == 0 {
		t.Fatalf("a dry run submitted the job:\n%s", r.stdout)
	}
	d.ok(append(append([]string{"submit", "--id", "quoted"}, args...), "--", "sleep", "30")...)
	var j struct{ Reserved int64 }
	d.json(&j, "job", "quoted")
	if j.Reserved != q.Reserve {
		t.Errorf("the submit reserved %d, the dry run quoted %d", j.Reserved, q.Reserve)
	}
	// Too dear: rejected, with the available credits and exit code.
	r := d.gpuq("submit", "--account", "demo", "--cost", "5000", "--dry-run", "--", "true")
	if r.code != exitRejected || !strings.Contains(r.stdout, "insufficient_credits") || !strings.Contains(r.stdout, "available      982") {
		t.Errorf("dry run of an unaffordable job: exit %d\n%s", r.code, r.stdout)
	}
}

// dependencyTour is the README's tour of dependencies, hold and dry runs,
// command for command, after "gpuq account create vision --balance 1000".
var dependencyTour = []string{
	"gpuq submit --id prep --account vision --cost 10 -- sleep 20",
	"gpuq submit --id eval --account vision --cost 20 --after prep -- sh -c 'echo eval'",
	"gpuq why eval",
	"gpuq hold eval",
	"gpuq release eval",
	"gpuq prices set --default 100 --model 'NVIDIA H200 141GB HBM3e=360' --id tour-prices",
	"gpuq submit --account vision --gpus 2 --walltime 30m --dry-run -- python train.py",
}

func TestReadmeDependencyTour(t *testing.T) {
	t.Parallel()
	readmeShows(t, dependencyTour...)
	d := startDev(t, "")
	d.ok("account", "create", "vision", "--balance", "1000")
	outs := map[string]string{}
	for _, line := range dependencyTour {
		args := splitShell(line)[1:]
		if args[0] == "why" {
			outs[line] = waitWhy(t, d, "eval", "waiting_on_dependency")
			continue
		}
		outs[line] = d.ok(args...)
	}
	for line, want := range map[string]string{
		dependencyTour[1]: "waits for prep",
		dependencyTour[2]: "job prep (running) to succeed (afterok)",
		dependencyTour[3]: "paused eval",
		dependencyTour[4]: "resumed eval",
		dependencyTour[6]: "would reserve  360 (metered",
	} {
		if !strings.Contains(outs[line], want) {
			t.Errorf("%s printed:\n%s\nwant %q", line, outs[line], want)
		}
	}
	t.Logf("dry run:\n%s\nwhy:\n%s", outs[dependencyTour[6]], outs[dependencyTour[2]])
	waitState(t, d, "eval", "succeeded")
}
