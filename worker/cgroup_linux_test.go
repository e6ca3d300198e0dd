//go:build linux

package worker

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// cgroupTestBase is a cgroup v2 directory this process may make the
// modes' cgroup directories in: its own cgroup, in the cgroup v2 file
// system it is mounted at, where a worker there passes openCgroups'
// checks (root, or a delegated cgroup). "" where there is none; the
// cgroup modes are then left out, and the tests say so once.
var cgroupTestBase = sync.OnceValue(func() string {
	base, why := findCgroupBase()
	if why != "" {
		println("worker tests: no cgroup modes:", why)
		return ""
	}
	return base
})

func findCgroupBase() (string, string) {
	base, err := OwnCgroup()
	if err != nil {
		return "", err.Error()
	}
	probe := filepath.Join(base, "gpuq-test-probe-"+strconv.Itoa(os.Getpid()))
	defer func() { _ = syscall.Rmdir(probe) }() // made by openCgroups, if it got that far
	tree, err := openCgroups(probe)
	if err != nil {
		return "", err.Error()
	}
	_ = tree.close() // it has no spares
	return base, ""
}

// cgroupModes is modes with a cgroup; it skips t where there are none.
func cgroupModes(t *testing.T) []mode {
	t.Helper()
	var ms []mode
	for _, m := range modes(t) {
		if m.cgroup != "" {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		t.Skip("this process cannot make cgroups")
	}
	return ms
}

// TestSandboxCgroupHoldsWhatLeavesEverythingElse: a grandchild that leaves
// its attempt's process group and session, outlives its parent (so it
// descends from no process of the attempt) and execs with the attempt's
// marker removed from its environment is found by nothing the /proc sweep
// reads when jobs run as the worker's user. In the attempt's cgroup it is
// killed before the done report, in every mode.
func TestSandboxCgroupHoldsWhatLeavesEverythingElse(t *testing.T) {
	t.Parallel()
	for _, m := range cgroupModes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bus := newFakeBus()
			done := watchDone(bus, "")
			startSandboxed(t, m, bus, 1, nil)
			bus.sendOrder(t, dispatchOrder("esc", 1, 1, "sh", "-c",
				`setsid sh -c 'exec env -u GPUQ_SANDBOX sleep 300' & echo "child=$!"; sleep 0.5`))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("report %+v, want started", r)
			}
			pid := childPid(t, bus, "esc")
			done.pid.Store(int64(pid))
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
			if r := bus.nextReport(t); r.Type != ledger.ReportDone {
				t.Fatalf("report %+v, want done", r)
			}
			if done.left.Load() {
				t.Errorf("the escaped grandchild %d still ran when the done report was sent", pid)
			}
		})
	}
}

// TestCgroupRefusesWhatIsNoCgroup: a Config.Cgroup that is not in a cgroup
// v2 file system, or is relative, is refused at New with what to do.
func TestCgroupRefusesWhatIsNoCgroup(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "not", "made")
	for _, tc := range []struct{ dir, want string }{
		{t.TempDir(), "is not in a cgroup v2 file system"},
		{missing, "is not in a cgroup v2 file system"},
		{"relative/cgroup", "must be an absolute path"},
	} {
		_, err := New(Config{Host: "h", GPU: fakeGPU{n: 1}, Bus: newFakeBus(), StateDir: t.TempDir(), Cgroup: tc.dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New with Cgroup %q = %v, want an error saying %q", tc.dir, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Dir(missing)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused Cgroup outside a cgroup file system was made: %v", err)
	}
}

// TestOwnCgroupHoldsThisProcess: the directory OwnCgroup names lists this
// process in its cgroup.procs.
func TestOwnCgroupHoldsThisProcess(t *testing.T) {
	t.Parallel()
	dir, err := OwnCgroup()
	if err != nil {
		t.Skipf("no cgroup v2 here: %v", err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(strings.Fields(string(data)), strconv.Itoa(os.Getpid())) {
		t.Errorf("%s/cgroup.procs does not list this process %d:\n%s", dir, os.Getpid(), data)
	}
}

// TestSandboxCgroupPoolUIDLeftOutsideIsKilled: with a pool, a process of
// an attempt's uid that is not in the attempt's cgroup (here one the test
// starts as that uid, as a setuid helper that moved itself out would be)
// is killed before the uid goes back to the pool, as the /proc sweep by
// uid would have killed it.
func TestSandboxCgroupPoolUIDLeftOutsideIsKilled(t *testing.T) {
	t.Parallel()
	for _, m := range cgroupModes(t) {
		if m.uids.IsZero() {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bus := newFakeBus()
			startSandboxed(t, m, bus, 1, nil)
			bus.sendOrder(t, dispatchOrder("u", 1, 1, "sh", "-c", `echo "uid=$(id -u)"; sleep 1`))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("report %+v, want started", r)
			}
			uid := 0
			for deadline := time.Now().Add(20 * time.Second); uid == 0; time.Sleep(20 * time.Millisecond) {
				if mm := regexp.MustCompile(`uid=(\d+)`).FindStringSubmatch(bus.output("u", 1)); mm != nil {
					uid, _ = strconv.Atoi(mm[1])
				}
				if time.Now().After(deadline) {
					t.Fatal("the job printed no uid")
				}
			}
			out := exec.Command("sleep", "300")
			out.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
			if err := out.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan struct{})
			go func() { _ = out.Wait(); close(exited) }()
			t.Cleanup(func() { _ = out.Process.Kill(); <-exited })
			if r := bus.nextReport(t); r.Type != ledger.ReportDone {
				t.Fatalf("report %+v, want done", r)
			}
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				t.Errorf("a process of the ended attempt's uid %d outside its cgroup still runs 15s after the done report", uid)
			}
		})
	}
}

// TestSandboxCgroupRemovedSpareIsNotHandedOut: a spare cgroup removed
// under the worker (a job of the worker's own user may) is dropped, not
// given to the next attempt, which starts in a new one.
func TestSandboxCgroupRemovedSpareIsNotHandedOut(t *testing.T) {
	t.Parallel()
	for _, m := range cgroupModes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bus := newFakeBus()
			startSandboxed(t, m, bus, 1, nil)
			if r, out := runJob(t, bus, "first", "true"); r.ExitCode != 0 {
				t.Fatalf("first: %+v\n%s", r, out)
			}
			ents, err := os.ReadDir(m.cgroup)
			if err != nil {
				t.Fatal(err)
			}
			removed := 0
			for _, e := range ents {
				if e.IsDir() && syscall.Rmdir(filepath.Join(m.cgroup, e.Name())) == nil {
					removed++
				}
			}
			if removed == 0 {
				t.Fatalf("no spare cgroup to remove in %s: the test shows nothing", m.cgroup)
			}
			if r, out := runJob(t, bus, "second", "sh", "-c", "grep '^0::' /proc/self/cgroup"); r.ExitCode != 0 {
				t.Errorf("the attempt after its spare cgroup was removed: %+v\n%s", r, out)
			}
		})
	}
}
