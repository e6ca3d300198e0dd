// End-to-end tests of the submit options --name, --gpu-model, --workdir and
// --array, through gpuq dev and, for two GPU models, a second simulated
// worker joined to it.
package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startWorker runs a second simulated worker against d until the test ends.
func startWorker(t *testing.T, d *devServer, host, model string, gpus int) {
	t.Helper()
	state := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(gpuqBin, "worker", "--nats", d.url, "--host", host, "--simulate", model, "--gpus", strconv.Itoa(gpus),
		"--state-dir", state, "--job-uids", "none")
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // how it ended matters only if it hangs, below
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt) // it may have exited already
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill() // a hung worker must not hang the test run
			t.Errorf("worker %s did not stop in 30s:\n%s", host, out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(d.ok("hosts"), host) {
		if time.Now().After(deadline) {
			t.Fatalf("worker %s did not heartbeat in 30s:\n%s", host, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSubmitNameAndGPUModel(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--gpus", "2", "--model", "dgxh200")
	startWorker(t, d, "sim-h100", "dgxh100", 2)

	d.ok("submit", "--id", "on-h100", "--name", "sweep ▸ lr 3e-4", "--account", "demo", "--gpus", "1", "--cost", "1",
		"--gpu-model", "NVIDIA H100 80GB HBM3", "--wait", "--", "true")
	d.ok("submit", "--id", "on-h200", "--account", "demo", "--gpus", "2", "--cost", "1",
		"--gpu-model", "nvidia h200 141gb hbm3e", "--wait", "--", "true")
	for job, host := range map[string]string{"on-h100": "sim-h100", "on-h200": "sim-1"} {
		var j struct {
			Host     string
			GPUModel string `json:"gpu_model"`
		}
		d.json(&j, "job", job)
		if j.Host != host || j.GPUModel == "" {
			t.Errorf("job %s ran on %q asking for %q, want %s", job, j.Host, j.GPUModel, host)
		}
	}
	if out := d.ok("job", "on-h100"); !strings.Contains(out, "name      sweep ▸ lr 3e-4") || !strings.Contains(out, "model     NVIDIA H100 80GB HBM3") {
		t.Errorf("gpuq job on-h100 printed:\n%s", out)
	}
	var rows []struct{ ID, Name string }
	d.json(&rows, "jobs")
	named := map[string]string{}
	for _, r := range rows {
		named[r.ID] = r.Name
	}
	if named["on-h100"] != "sweep ▸ lr 3e-4" || named["on-h200"] != "" {
		t.Errorf("gpuq jobs names = %v", named)
	}
	if out := d.ok("jobs"); !strings.Contains(out, "NAME") || !strings.Contains(out, "sweep ▸ lr 3e-4") {
		t.Errorf("gpuq jobs printed:\n%s", out)
	}

	// No live host has a B200: why says so.
	d.ok("submit", "--id", "on-b200", "--account", "demo", "--gpus", "1", "--cost", "1", "--gpu-model", "NVIDIA B200", "--", "true")
	var ans struct {
		Blockers []struct{ Kind, Message string }
	}
	d.json(&ans, "why", "on-b200")
	if len(ans.Blockers) == 0 || ans.Blockers[0].Kind != "no_matching_host" ||
		!strings.Contains(ans.Blockers[0].Message, `needs GPU model "NVIDIA B200"; no live host has it`) {
		t.Errorf("why on-b200 = %+v", ans.Blockers)
	}
	if r := d.gpuq("submit", "--account", "demo", "--cost", "1", "--name", "two\nlines", "--", "true"); r.code == 0 ||
		!strings.Contains(r.stderr, "printable") {
		t.Errorf("a name with a line break: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

func TestSubmitWorkdir(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	dir, err := os.MkdirTemp("", "gpuq-cli-workdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil { // a pool uid must enter it when the test runs as root
		t.Fatal(err)
	}
	d.ok("submit", "--id", "in-dir", "--account", "demo", "--cost", "5", "--workdir", dir, "--wait", "--", "pwd")
	if out := d.ok("logs", "in-dir"); strings.TrimSpace(out) != dir {
		t.Errorf("gpuq logs in-dir = %q, want the workdir %s", out, dir)
	}
	if out := d.ok("job", "in-dir"); !strings.Contains(out, "workdir   "+dir) {
		t.Errorf("gpuq job in-dir printed:\n%s", out)
	}
	r := d.gpuq("submit", "--id", "no-dir", "--account", "demo", "--cost", "5", "--max-attempts", "1",
		"--workdir", "/nonexistent/gpuq", "--wait", "--", "true")
	if r.code != exitJobFailed || !strings.Contains(r.stdout, "workdir /nonexistent/gpuq does not exist on this host") ||
		!strings.Contains(r.stdout, "nothing charged") {
		t.Errorf("a missing workdir: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := d.gpuq("submit", "--account", "demo", "--cost", "5", "--workdir", "data", "--", "true"); r.code == 0 ||
		!strings.Contains(r.stderr, "not an absolute, clean path") {
		t.Errorf("a relative workdir: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// TestSubmitArray: --array submits one task per index, each reserving its
// own cost, with GPUQ_ARRAY_INDEX set; a task the account cannot pay for is
// reported rejected while the others stay submitted (exit 4); jobs --array
// lists the tasks and cancel --array cancels the unfinished ones, one
// cancel per task.
func TestSubmitArray(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--gpus", "2")
	d.ok("submit", "--id", "idx", "--array", "1,3", "--account", "demo", "--cost", "1", "--", "sh", "-c", "echo index=$GPUQ_ARRAY_INDEX")
	for _, i := range []string{"1", "3"} {
		waitState(t, d, "idx-"+i, "succeeded")
		if out := d.ok("logs", "idx-"+i); strings.TrimSpace(out) != "index="+i {
			t.Errorf("gpuq logs idx-%s = %q", i, out)
		}
	}
	if out := d.ok("job", "idx-3"); !strings.Contains(out, "task 3 of array idx") {
		t.Errorf("gpuq job idx-3 printed:\n%s", out)
	}

	d.ok("account", "create", "arr", "--balance", "12")
	r := d.gpuq("submit", "--id", "sweep", "--array", "0-4", "--account", "arr", "--cost", "3", "--", "sleep", "60")
	if r.code != exitRejected || !strings.Contains(r.stderr, "array sweep: 1 of 5 tasks not submitted: task 4 (sweep-4) rejected") ||
		!strings.Contains(r.stderr, "insufficient_credits") || !strings.Contains(r.stdout, "array sweep: submitted 4 of 5 tasks") {
		t.Fatalf("submit --array 0-4 with credits for 4: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	for _, i := range []string{"0", "1", "2", "3"} {
		if !strings.Contains(r.stdout, "accepted sweep-"+i+":") {
			t.Errorf("submit --array did not print task %s accepted:\n%s", i, r.stdout)
		}
	}
	var tasks []struct {
		ID         string `json:"id"`
		State      string `json:"state"`
		ArrayID    string `json:"array_id"`
		ArrayIndex int    `json:"array_index"`
		Reserved   int    `json:"reserved"`
	}
	d.json(&tasks, "jobs", "--array", "sweep", "--limit", "0")
	if len(tasks) != 5 {
		t.Fatalf("jobs --array sweep = %+v, want 5 tasks", tasks)
	}
	reserved := 0
	for _, tk := range tasks {
		reserved += tk.Reserved
		if tk.ArrayID != "sweep" || tk.ID != "sweep-"+strconv.Itoa(tk.ArrayIndex) {
			t.Errorf("task %+v", tk)
		}
		if (tk.State == "rejected") != (tk.ArrayIndex == 4) {
			t.Errorf("task %s is %s", tk.ID, tk.State)
		}
	}
	if reserved != 12 {
		t.Errorf("the tasks reserve %d in all, want 4 × 3", reserved)
	}

	out := d.ok("cancel", "--array", "sweep")
	if !strings.Contains(out, "array sweep: cancelled 4 of 4 tasks") {
		t.Errorf("cancel --array sweep printed:\n%s", out)
	}
	for _, i := range []string{"0", "1", "2", "3"} {
		waitState(t, d, "sweep-"+i, "cancelled")
	}
	var acct struct{ Available int }
	d.json(&acct, "account", "show", "arr")
	if acct.Available != 12 {
		t.Errorf("after cancelling the array the account has %d available, want 12", acct.Available)
	}
	if r := d.gpuq("cancel", "--array", "nosuch"); r.code == 0 || !strings.Contains(r.stderr, "no job array nosuch") {
		t.Errorf("cancel --array nosuch: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if r := d.gpuq("submit", "--array", "0-1000", "--account", "demo", "--cost", "1", "--", "true"); r.code != exitUsage ||
		!strings.Contains(r.stderr, "more than 1000 tasks") {
		t.Errorf("submit --array 0-1000: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
}

// optionsTour is the README's section on arrays, GPU models, names and
// working directories, run verbatim after the account the tour creates.
var optionsTour = []string{
	"gpuq submit --id sweep --array 0-3 --name 'lr sweep' --account vision --cost 5 -- sh -c 'echo seed $GPUQ_ARRAY_INDEX; sleep 30'",
	"gpuq jobs --array sweep",
	"gpuq submit --id big --account vision --gpus 2 --cost 10 --gpu-model 'NVIDIA H200 141GB HBM3e' --workdir /tmp --wait -- pwd",
	"gpuq submit --id b200 --account vision --cost 10 --gpu-model 'NVIDIA B200' -- true",
	"gpuq why b200",
	"gpuq cancel --array sweep",
}

func TestReadmeOptionsTour(t *testing.T) {
	t.Parallel()
	readmeShows(t, append([]string{tour[0]}, optionsTour...)...)
	d := startDev(t, "")
	d.ok(splitShell(tour[0])[1:]...)
	outs := map[string]string{}
	for _, line := range optionsTour {
		outs[line] = d.ok(splitShell(line)[1:]...)
	}
	if out := outs[optionsTour[0]]; !strings.Contains(out, "array sweep: submitted 4 of 4 tasks") {
		t.Errorf("submit --array printed:\n%s", out)
	}
	if out := outs[optionsTour[1]]; strings.Count(out, "lr sweep") != 4 || !strings.Contains(out, "sweep-3") {
		t.Errorf("jobs --array printed:\n%s", out)
	}
	if out := outs[optionsTour[2]]; !strings.Contains(out, "job big succeeded") {
		t.Errorf("submit --gpu-model --workdir printed:\n%s", out)
	}
	if out := d.ok("logs", "big"); out != "/tmp\n" {
		t.Errorf("logs big = %q, want /tmp", out)
	}
	if out := outs[optionsTour[4]]; !strings.Contains(out, `needs GPU model "NVIDIA B200"; no live host has it`) ||
		!strings.Contains(out, "[no_matching_host]") {
		t.Errorf("why b200 printed:\n%s", out)
	}
	if out := outs[optionsTour[5]]; !strings.Contains(out, "array sweep: cancelled 4 of 4 tasks") {
		t.Errorf("cancel --array printed:\n%s", out)
	}
	for _, i := range []string{"0", "1", "2", "3"} {
		waitState(t, d, "sweep-"+i, "cancelled")
		if out := d.ok("logs", "sweep-"+i); !strings.HasPrefix(out, "seed "+i+"\n") {
			t.Errorf("logs sweep-%s = %q", i, out)
		}
	}
}
