//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/worker"
)

// TestWorkerCgroupAuto: gpuq worker --cgroup auto runs each attempt in a
// cgroup of its own below the worker's (gpuq-jobs-<host>), as the job
// sees in /proc/self/cgroup; a grandchild that left the job's session and
// marker and outlived its parent is gone when the job is done, and the
// worker removes its cgroups when it stops.
func TestWorkerCgroupAuto(t *testing.T) {
	t.Parallel()
	own, err := worker.OwnCgroup()
	if err != nil {
		t.Skipf("no cgroup v2 here: %v", err)
	}
	probe := filepath.Join(own, "gpuq-cli-probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		t.Skipf("this process cannot make cgroups in %s: %v", own, err)
	}
	if err := os.Remove(probe); err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("cg-%d", os.Getpid()) // test processes may run side by side
	dir := filepath.Join(own, "gpuq-jobs-"+host)
	t.Cleanup(func() {
		if err := syscall.Rmdir(dir); err != nil && err != syscall.ENOENT {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	d := startDev(t, "", "--gpus", "1")
	w := d.daemon("gpuq worker --host " + host + " --simulate dgxh100 --gpus 2 --cgroup auto --job-uids none")
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.ok("hosts"), host); {
		if time.Now().After(deadline) {
			t.Fatalf("worker %s never showed in gpuq hosts:\n%s", host, w.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Two GPUs: only the cgroup worker's host has them.
	d.ok("submit", "--id", "esc", "--account", "demo", "--gpus", "2", "--cost", "1", "--wait", "--", "sh", "-c",
		`setsid sh -c 'exec env -u GPUQ_SANDBOX sleep 300' & echo "child=$!"; grep '^0::' /proc/self/cgroup; sleep 0.3`)
	logs := d.ok("logs", "esc")
	m := regexp.MustCompile(`child=(\d+)`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("the job printed no child pid:\n%s", logs)
	}
	pid, _ := strconv.Atoi(m[1])
	if data, err := os.ReadFile("/proc/" + m[1] + "/status"); err == nil && !regexp.MustCompile(`(?m)^State:\s+[ZX]`).Match(data) {
		_ = syscall.Kill(pid, syscall.SIGKILL) // test teardown
		t.Errorf("the escaped grandchild %d still runs after the job is done", pid)
	}
	if !regexp.MustCompile(`(?m)^0::.*/gpuq-jobs-` + host + `/a\d+$`).MatchString(logs) {
		t.Errorf("the job's cgroup is not one of %s:\n%s", dir, logs)
	}
	if !strings.Contains(w.out.String(), "each attempt runs in a cgroup of its own") {
		t.Errorf("the worker did not say it runs attempts in cgroups:\n%s", w.out.String())
	}
	if code := w.term(t); code != 0 {
		t.Errorf("worker exited %d on SIGTERM:\n%s", code, w.out.String())
	}
	if ents, err := os.ReadDir(dir); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				t.Errorf("the stopped worker left the cgroup %s", filepath.Join(dir, e.Name()))
			}
		}
	}
}

// TestWorkerRefusesABadCgroupAtOnce: a --cgroup that is no cgroup v2
// directory is refused before the worker looks for its server (none
// answers here), with exit 2 and what is wrong.
func TestWorkerRefusesABadCgroupAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var out, errb strings.Builder
	code := run([]string{"worker", "--host", "h", "--simulate", "dgxh100", "--gpus", "1", "--job-uids", "none",
		"--cgroup", dir, "--nats", "nats://127.0.0.1:1"}, &out, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "--cgroup: "+dir+" is not in a cgroup v2 file system") {
		t.Errorf("gpuq worker --cgroup %s: exit %d: %s%s", dir, code, out.String(), errb.String())
	}
}
