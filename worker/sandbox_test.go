// Tests of the sandbox, where the job is the attacker, with real child
// processes on a fake bus: a job's environment holds none of the worker's
// secrets and it cannot read the worker's; each attempt has a fresh
// directory (and, as root, a user) of its own, gone when it ends; a
// cancel, a walltime and a worker killed with SIGKILL leave no process of
// the job behind, and no GPU is reported free while one lives.
//
// Each test runs in every mode this process can: jobs as the worker's own
// user, and, as root, with a uid per attempt. As root, TestSandboxAsNobody
// also runs every TestSandbox* test again in a child process of the
// unprivileged user nobody, so the fallback of an unprivileged worker (a
// non-dumpable worker, a sweep by group, session, tree and marker) is
// tested where it is the only defence. The worker's own environment holds
// a fake NATS password (see TestMain) that must never reach a job.
package worker

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// secret is in the worker's environment, as a deployment's NATS URL with
// its password would be.
const secret = "s3cret-worker-password"

func TestMain(m *testing.M) {
	if ids := os.Getenv("GPUQ_TEST_SWITCH_UIDS"); ids != "" {
		switchUIDs(ids) // a helper process of TestSweepRereadsAProcessThatChangedItsPoolUID
		return
	}
	for k, v := range map[string]string{
		"NATS_URL":   "nats://worker:" + secret + "@127.0.0.1:4222",
		"NATS_CREDS": "/etc/gpuq/" + secret + ".creds",
		"LC_ALL":     "C",
	} {
		if err := os.Setenv(k, v); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	os.Exit(m.Run())
}

// TestJobEnvIsAllowlisted: a job's environment is the allowed variables
// of the worker's, the job's own, and gpuq's, which win; nothing else of
// the worker's passes.
func TestJobEnvIsAllowlisted(t *testing.T) {
	t.Parallel()
	base := []string{"PATH=/opt/bin:/usr/bin", "LANG=C.UTF-8", "LC_TIME=en_GB.UTF-8", "TZ=UTC",
		"NATS_URL=nats://w:pw@host:4222", "NATS_CREDS=/etc/w.creds", "AWS_SECRET_ACCESS_KEY=x", "HOME=/root",
		"SSH_AUTH_SOCK=/tmp/agent", "GPUQ_JOB_ID=forged"}
	s := Spec{Attempt: Attempt{Job: "j", N: 2}, Account: "a", Devices: []string{"GPU-1", "GPU-2"}, Dir: "/jobs/j.2",
		Env: map[string]string{"LANG": "de_DE.UTF-8", "WANDB_PROJECT": "p", "CUDA_VISIBLE_DEVICES": "GPU-9", "HOME": "/elsewhere"}}
	got := jobEnv(base, s)
	want := []string{
		"CUDA_VISIBLE_DEVICES=GPU-1,GPU-2", "GPUQ_ACCOUNT=a", "GPUQ_ATTEMPT=2", "GPUQ_JOB_ID=j", "GPUQ_SANDBOX=/jobs/j.2",
		"HOME=/jobs/j.2", "LANG=de_DE.UTF-8", "LC_TIME=en_GB.UTF-8", "NVIDIA_VISIBLE_DEVICES=GPU-1,GPU-2",
		"PATH=/opt/bin:/usr/bin", "TMPDIR=/jobs/j.2", "TZ=UTC", "WANDB_PROJECT=p",
	}
	if !slices.Equal(got, want) {
		t.Errorf("jobEnv =\n%q\nwant\n%q", got, want)
	}
	if got := jobEnv(nil, Spec{Dir: "/d"}); !slices.Contains(got, "PATH="+defaultPath) {
		t.Errorf("jobEnv without a PATH = %q, want the default PATH", got)
	}
}

// mode is one way of running jobs this process can test.
type mode struct {
	name   string
	uids   IDRange // zero: jobs run as the worker's user
	cgroup string  // Config.Cgroup: "" finds an attempt's processes through /proc
}

// poolBase spreads the pools of concurrent test processes apart: each
// process's workers kill every process of their pool's uids at start.
var (
	poolBase = uint32(300000 + rand.IntN(100000)*64)
	poolNext atomic.Uint32
)

// modes lists the modes: as the worker's user always, and as root with a
// pool of 8 ids of its own; then, where this process can make cgroups
// (see cgroupTestBase), each again with a cgroup directory of its own.
func modes(t *testing.T) []mode {
	t.Helper()
	pool := func() IDRange {
		first := poolBase + poolNext.Add(1)*8
		return IDRange{first, first + 7}
	}
	ms := []mode{{name: "worker-user"}}
	if os.Geteuid() == 0 {
		ms = append(ms, mode{name: "uid-pool", uids: pool()})
	}
	base := cgroupTestBase()
	if base == "" {
		return ms
	}
	for _, m := range slices.Clone(ms) {
		m.name += "+cgroup"
		if !m.uids.IsZero() {
			m.uids = pool()
		}
		m.cgroup = filepath.Join(base, fmt.Sprintf("gpuq-test-%d-%d", os.Getpid(), cgroupNext.Add(1)))
		t.Cleanup(func() {
			// The worker has removed the attempts' cgroups when it stopped.
			if err := syscall.Rmdir(m.cgroup); err != nil && err != syscall.ENOENT {
				t.Errorf("remove the test's cgroup directory %s: %v", m.cgroup, err)
			}
		})
		ms = append(ms, m)
	}
	return ms
}

// cgroupNext names the cgroup directories of the modes.
var cgroupNext atomic.Uint32

// sandboxDirs returns a state directory and a job root for a worker in
// mode m. With a pool the job root must be reachable by the jobs' users,
// which the test's own temporary directory (0700) is not.
func sandboxDirs(t *testing.T, m mode) (state, jobs string) {
	t.Helper()
	state = t.TempDir()
	if m.uids.IsZero() {
		return state, filepath.Join(t.TempDir(), "jobs")
	}
	jobs, err := os.MkdirTemp("", "gpuq-jobs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(jobs); err != nil {
			t.Error(err)
		}
	})
	return state, jobs
}

// startSandboxed runs a worker in mode m with gpus fake GPUs.
func startSandboxed(t *testing.T, m mode, bus *fakeBus, gpus int, adjust func(*Config)) (*runningFake, Config) {
	t.Helper()
	state, jobs := sandboxDirs(t, m)
	var cfg Config
	f := startFake(t, bus, gpus, func(c *Config) {
		c.StateDir, c.JobRoot, c.JobUIDs, c.Cgroup = state, jobs, m.uids, m.cgroup
		if adjust != nil {
			adjust(c)
		}
		cfg = *c
	})
	return f, cfg
}

// output is every byte attempt a of job has written so far.
func (b *fakeBus) output(job string, n int) string {
	_, chunks := b.recorded()
	var s strings.Builder
	for _, c := range chunks {
		if c.Job == job && c.Attempt == n {
			s.Write(c.Data)
		}
	}
	return s.String()
}

// runJob runs one attempt of command to its done report and returns the
// report and the attempt's output.
func runJob(t *testing.T, bus *fakeBus, job string, command ...string) (ledger.Report, string) {
	t.Helper()
	bus.sendOrder(t, dispatchOrder(job, 1, 1, command...))
	if r := bus.nextReport(t); r.Type != ledger.ReportStarted || r.Job != job {
		t.Fatalf("report %+v, want %s started", r, job)
	}
	r := bus.nextReport(t)
	if r.Type != ledger.ReportDone || r.Job != job {
		t.Fatalf("report %+v, want %s done", r, job)
	}
	return r, bus.output(job, 1)
}

// TestSandboxJobSeesNoCredentials: a job's environment holds nothing of
// the worker's NATS settings, and the job cannot read the worker's
// environment through /proc (a pool uid may not, and a process of the
// worker's own user may not either, the worker being non-dumpable).
func TestSandboxJobSeesNoCredentials(t *testing.T) {
	t.Parallel()
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			if m.uids.IsZero() && os.Geteuid() == 0 {
				t.Skip("a job running as root reads any process's environment; TestSandboxAsNobody runs this mode unprivileged")
			}
			bus := newFakeBus()
			startSandboxed(t, m, bus, 1, nil)
			_, out := runJob(t, bus, "env", "sh", "-c",
				`env; echo; if cat /proc/$PPID/environ; then echo READ-WORKER-ENV; fi; `+
					`if cat /proc/$PPID/cmdline >/dev/null; then echo cmdline-readable; fi`)
			if strings.Contains(out, secret) || strings.Contains(out, "NATS_") || strings.Contains(out, "READ-WORKER-ENV") {
				t.Errorf("the job saw the worker's secrets:\n%s", out)
			}
			if !strings.Contains(out, "GPUQ_JOB_ID=env") || !strings.Contains(out, "LC_ALL=C") {
				t.Errorf("the job's environment lacks gpuq's variables or the allowed LC_ALL:\n%s", out)
			}
		})
	}
}

// TestSandboxAttemptsAreApart: every attempt starts in a fresh directory
// of its own (its HOME and TMPDIR), so a file one attempt plants there is
// not run by the next; the directory is gone once the attempt ends. With a
// pool, each attempt has its own uid and gid and no supplementary groups,
// and cannot read or write the worker's state directory.
func TestSandboxAttemptsAreApart(t *testing.T) {
	t.Parallel()
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bus := newFakeBus()
			_, cfg := startSandboxed(t, m, bus, 1, nil)
			state := cfg.StateDir
			_, out := runJob(t, bus, "plant", "sh", "-c",
				`printf '#!/bin/sh\necho PLANTED-RAN\n' > train.sh; chmod +x train.sh; echo "dir=$PWD home=$HOME tmp=$TMPDIR"; echo "uid=$(id -u) groups=$(id -G)"; `+
					`if ls `+state+` >/dev/null 2>&1; then echo STATE-READABLE; fi; if touch `+state+`/x 2>/dev/null; then echo STATE-WRITABLE; fi`)
			dir := filepath.Join(cfg.JobRoot, "plant.1")
			if want := fmt.Sprintf("dir=%s home=%s tmp=%s", dir, dir, dir); !strings.Contains(out, want) {
				t.Errorf("the attempt's places are not its own directory, want %q in:\n%s", want, out)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the attempt's directory after its end: %v, want it removed", err)
			}
			r, out2 := runJob(t, bus, "victim", "sh", "-c", `./train.sh; echo "uid=$(id -u)"`)
			if strings.Contains(out2, "PLANTED-RAN") || r.ExitCode != 0 {
				t.Errorf("the next attempt ran what the first planted (exit %d):\n%s", r.ExitCode, out2)
			}
			if m.uids.IsZero() {
				return
			}
			ids := regexp.MustCompile(`uid=(\d+) groups=(.*)`).FindStringSubmatch(out)
			ids2 := regexp.MustCompile(`uid=(\d+)`).FindStringSubmatch(out2)
			if ids == nil || ids2 == nil {
				t.Fatalf("no uid and groups in the outputs:\n%s\n%s", out, out2)
			}
			uid, _ := strconv.Atoi(ids[1])
			if !m.uids.contains(uint32(uid)) || ids[2] != ids[1] {
				t.Errorf("the attempt ran as uid %s with groups %q, want a uid of %s and only its own group", ids[1], ids[2], m.uids)
			}
			if ids2[1] == ids[1] {
				t.Errorf("two attempts in a row ran as the same uid %s", ids[1])
			}
			if strings.Contains(out, "STATE-READABLE") || strings.Contains(out, "STATE-WRITABLE") {
				t.Errorf("a job reached the worker's state directory:\n%s", out)
			}
		})
	}
}

// lastLine is the last line of s, the end marker's.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// escapee is a job whose grandchild leaves its process group and session
// and prints its pid.
var escapee = []string{"sh", "-c", `setsid sleep 300 & echo "child=$!"; sleep 300`}

// childPid waits for the output of attempt 1 of job to name its child.
func childPid(t *testing.T, bus *fakeBus, job string) int {
	t.Helper()
	re := regexp.MustCompile(`child=(\d+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := re.FindStringSubmatch(bus.output(job, 1)); m != nil {
			pid, _ := strconv.Atoi(m[1])
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no child pid within 20s", job)
		}
		select {
		case <-bus.logged:
		case <-time.After(time.Second):
		}
	}
}

// doneWatch tells whether a process still ran when the done report of a
// job was sent (see watchDone).
type doneWatch struct {
	pid  atomic.Int64
	left atomic.Bool
}

// watchDone has bus look, as the done report of job ("" for any job) is
// sent, whether the process later named with w.pid.Store is alive.
func watchDone(bus *fakeBus, job string) *doneWatch {
	w := &doneWatch{}
	bus.onReport = func(r ledger.Report) {
		if r.Type == ledger.ReportDone && (job == "" || r.Job == job) {
			w.left.Store(alive(int(w.pid.Load())))
		}
	}
	return w
}

// alive reports whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return syscall.Kill(pid, 0) == nil // without /proc
	}
	return !regexp.MustCompile(`(?m)^State:\s+[ZX]`).Match(data)
}

// TestSandboxStopKillsTheWholeJob: a cancelled attempt and one past its
// walltime leave no process behind, a grandchild that called setsid
// included, by the time the done report is sent (and so before the GPUs
// are free).
func TestSandboxStopKillsTheWholeJob(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"cancel", "walltime"} {
		for _, m := range modes(t) { // a pool per worker
			t.Run(m.name+"/"+how, func(t *testing.T) {
				t.Parallel()
				bus := newFakeBus()
				done := watchDone(bus, "")
				startSandboxed(t, m, bus, 1, nil)
				o := dispatchOrder("esc", 1, 1, escapee...)
				if how == "walltime" {
					o.Walltime = 2 * time.Second
				}
				bus.sendOrder(t, o)
				if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
					t.Fatalf("report %+v, want started", r)
				}
				pid := childPid(t, bus, "esc")
				done.pid.Store(int64(pid))
				if how == "cancel" {
					bus.sendOrder(t, ledger.CancelOrder{Host: "h", Job: "esc", Account: "a", Attempt: 1})
				}
				if r := bus.nextReport(t); r.Type != ledger.ReportDone {
					t.Fatalf("report %+v, want done", r)
				}
				if done.left.Load() {
					t.Errorf("the setsid grandchild %d still ran when the done report was sent", pid)
				}
			})
		}
	}
}

// TestSandboxSweepFindsAnEscapeeSeenBefore: the sweep at an attempt's end
// reads again only the processes that are new or matched before (see
// sandbox_linux.go). A grandchild that left its attempt's process group
// and session, seen by the sweeps of other attempts that ended while it
// ran, is still found and killed by its own attempt's sweep, before the
// done report.
func TestSandboxSweepFindsAnEscapeeSeenBefore(t *testing.T) {
	t.Parallel()
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bus := newFakeBus()
			done := watchDone(bus, "esc")
			startSandboxed(t, m, bus, 2, nil)
			bus.sendOrder(t, dispatchOrder("esc", 1, 1, "sh", "-c", `setsid sleep 300 & echo "child=$!"; sleep 2`))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("report %+v, want started", r)
			}
			pid := childPid(t, bus, "esc")
			done.pid.Store(int64(pid))
			for i := range 3 {
				_, out := runJob(t, bus, fmt.Sprintf("other-%d", i), "true")
				if !alive(pid) {
					t.Fatalf("the escapee died before its attempt ended (%q); the test shows nothing", out)
				}
			}
			deadline := time.After(20 * time.Second)
			for {
				select {
				case r := <-bus.reported:
					if r.Job != "esc" || r.Type != ledger.ReportDone {
						continue
					}
					if done.left.Load() {
						t.Errorf("the setsid grandchild %d still ran when the done report was sent", pid)
						_ = syscall.Kill(pid, syscall.SIGKILL) // test teardown
					}
					return
				case <-deadline:
					t.Fatal("no done report of the escaping job within 20s")
				}
			}
		})
	}
}

// TestSandboxLeftoversOfAKilledWorker: a worker killed with SIGKILL (a
// child process here: this test binary run again as a worker) takes its
// job's first process with it, but a grandchild that called setsid
// survives; the next worker on the same directories (and pool) kills it
// before its first heartbeat offers the GPUs as free.
func TestSandboxLeftoversOfAKilledWorker(t *testing.T) {
	t.Parallel()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			state, jobs := sandboxDirs(t, m)
			cmd := exec.Command(exe, "-test.run=^TestSandboxHelperWorker$", "-test.count=1")
			cmd.Env = append(os.Environ(), "GPUQ_TEST_HELPER=worker", "GPUQ_TEST_STATE="+state, "GPUQ_TEST_JOBS="+jobs,
				"GPUQ_TEST_UIDS="+m.uids.String(), "GPUQ_TEST_CGROUP="+m.cgroup,
				// Killed, the helper cannot remove its own t.TempDir:
				// it makes it in one this test removes.
				"TMPDIR="+t.TempDir())
			cmd.Stderr = t.Output()
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pid := 0
			sc := bufio.NewScanner(stdout)
			for pid == 0 && sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "CHILD "); ok {
					pid, _ = strconv.Atoi(v)
				}
			}
			if pid == 0 {
				_ = cmd.Process.Kill()
				t.Fatalf("the helper worker named no child: %v", errors.Join(sc.Err(), cmd.Wait()))
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			_ = cmd.Wait() // killed: the error says so
			if !alive(pid) {
				t.Fatalf("the setsid grandchild %d died with the worker; the test shows nothing", pid)
			}
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) }) // if the test fails
			bus := newFakeBus()
			var beats atomic.Int32
			var leftAtBeat atomic.Bool
			bus.beatErr = func() error {
				if beats.Add(1) == 1 {
					leftAtBeat.Store(alive(pid))
				}
				return nil
			}
			startFake(t, bus, 1, func(c *Config) { c.StateDir, c.JobRoot, c.JobUIDs, c.Cgroup = state, jobs, m.uids, m.cgroup })
			select {
			case <-bus.beat:
			case <-time.After(20 * time.Second):
				t.Fatal("no heartbeat within 20s")
			}
			if leftAtBeat.Load() {
				t.Errorf("the leftover %d of the killed worker's job still ran at the first heartbeat", pid)
			}
			if ents, err := os.ReadDir(jobs); err != nil || len(ents) != 0 {
				t.Errorf("the job root after the restart holds %v (%v), want nothing", ents, err)
			}
		})
	}
}

// TestSandboxHelperWorker is the worker TestSandboxLeftoversOfAKilledWorker
// runs and kills: it runs escapee and prints its child's pid.
func TestSandboxHelperWorker(t *testing.T) {
	if os.Getenv("GPUQ_TEST_HELPER") != "worker" {
		t.Skip("run by TestSandboxLeftoversOfAKilledWorker")
	}
	uids, err := ParseIDRange(os.Getenv("GPUQ_TEST_UIDS"))
	if err != nil {
		t.Fatal(err)
	}
	bus := newFakeBus()
	startFake(t, bus, 1, func(c *Config) {
		c.StateDir, c.JobRoot, c.JobUIDs = os.Getenv("GPUQ_TEST_STATE"), os.Getenv("GPUQ_TEST_JOBS"), uids
		c.Cgroup = os.Getenv("GPUQ_TEST_CGROUP")
	})
	bus.sendOrder(t, dispatchOrder("esc", 1, 1, escapee...))
	fmt.Printf("CHILD %d\n", childPid(t, bus, "esc"))
	<-make(chan struct{}) // until killed
}

// TestSandboxAsNobody runs the TestSandbox* tests again as the user
// nobody, in a copy of this test binary that user can run: there the
// worker is unprivileged, and its fallbacks are all that protect it.
func TestSandboxAsNobody(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("runs the sandbox tests as another user, which needs root; here they run unprivileged already")
	}
	if os.Getenv("GPUQ_TEST_NOBODY") != "" {
		t.Skip("already running as nobody")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gpuq-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Error(err)
		}
	})
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "worker.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	var out []byte
	for try := 1; ; try++ {
		cmd := exec.Command(bin, "-test.run=^TestSandbox", "-test.count=1", "-test.v")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GPUQ_TEST_NOBODY=1", "TMPDIR=/tmp")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out, err = cmd.CombinedOutput()
		// A child forked by a parallel test may hold the copy's write
		// descriptor until it execs (golang.org/issue/22315): try again.
		if !errors.Is(err, syscall.ETXTBSY) || try == 5 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("the sandbox tests as nobody: %v\n%s", err, out)
	} else if !strings.Contains(string(out), "--- PASS: TestSandboxStopKillsTheWholeJob") {
		t.Errorf("the sandbox tests did not run as nobody:\n%s", out)
	} else {
		t.Logf("as nobody:\n%s", out)
	}
}

func TestParseIDRange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want IDRange
		ok   bool
	}{
		{"", IDRange{}, true}, {"none", IDRange{}, true}, {"61000-61099", IDRange{61000, 61099}, true},
		{"7-7", IDRange{7, 7}, true}, {"0-10", IDRange{}, false}, {"10-9", IDRange{}, false},
		{"61000", IDRange{}, false}, {"a-b", IDRange{}, false}, {"1-4294967295", IDRange{}, false}, {"-5-6", IDRange{}, false},
	} {
		got, err := ParseIDRange(tc.in)
		if (err == nil) != tc.ok || (tc.ok && got != tc.want) {
			t.Errorf("ParseIDRange(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

// TestSandboxRefusesUnsafeConfig: a worker does not start with a job uid
// pool it cannot use safely (without root; ids a user of the host has;
// a job root its jobs' users cannot reach), with a state directory or job
// root someone else owns, or with the job root in the state directory's
// place.
func TestSandboxRefusesUnsafeConfig(t *testing.T) {
	t.Parallel()
	root := os.Geteuid() == 0
	newWorker := func(adjust func(*Config)) error {
		cfg := Config{Host: "h", GPU: fakeGPU{n: 1}, Bus: newFakeBus(), StateDir: t.TempDir()}
		cfg.JobRoot = filepath.Join(t.TempDir(), "jobs")
		adjust(&cfg)
		_, err := New(cfg)
		return err
	}
	expect := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: New = %v, want an error saying %q", what, err, want)
		}
	}
	pool := IDRange{poolBase + 50000, poolBase + 50007}
	if !root {
		expect("a pool without root", newWorker(func(c *Config) { c.JobUIDs = pool }), "needs the worker to run as root")
	} else {
		expect("a pool with a user's id", newWorker(func(c *Config) { c.JobUIDs = IDRange{1, 65534} }), "choose ids no user or group has")
		expect("a pool with an unreachable job root", newWorker(func(c *Config) { c.JobUIDs = pool }), "cannot be reached by the jobs' users")
		for _, which := range []string{"state", "jobs"} {
			planted := filepath.Join(t.TempDir(), which)
			if err := os.Mkdir(planted, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(planted, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			expect("a planted "+which+" directory", newWorker(func(c *Config) {
				if which == "state" {
					c.StateDir = planted
				} else {
					c.JobRoot = planted
				}
			}), "belongs to uid 65534")
		}
	}
	expect("the job root in the state directory", newWorker(func(c *Config) { c.JobRoot = c.StateDir }), "must not be the StateDir")
	// What a worker makes is its own and closed to others.
	state := t.TempDir()
	if err := newWorker(func(c *Config) { c.StateDir = state }); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(state); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the state directory: %v, %v; want mode 0700", fi.Mode().Perm(), err)
	}
}

// TestSandboxZombieLeaderIsKilled: a process whose main thread has exited
// while another thread runs shows state Z in /proc, yet runs. The sweep
// must not take it for dead: under a uid pool it would keep running as the
// uid the next tenant's attempt is given.
func TestSandboxZombieLeaderIsKilled(t *testing.T) {
	t.Parallel()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to build a program whose main thread exits first")
	}
	dir, err := os.MkdirTemp("", "gpuq-zombie-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // test teardown
	src := filepath.Join(dir, "zt.c")
	if err := os.WriteFile(src, []byte(`#include <pthread.h>
#include <unistd.h>
static void *spin(void *a) { for (;;) sleep(1); return a; }
int main(void) { pthread_t t; pthread_create(&t, 0, spin, 0); pthread_exit(0); }
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "zt")
	if out, err := exec.Command(gcc, "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	if err := os.Chmod(dir, 0o755); err != nil { // a pool uid runs it
		t.Fatal(err)
	}
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			bus := newFakeBus()
			startSandboxed(t, m, bus, 1, nil)
			bus.sendOrder(t, dispatchOrder("zt", 1, 1, "sh", "-c", `setsid `+bin+` & echo "child=$!"; sleep 1; exit 0`))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("first report %+v, want started", r)
			}
			pid := childPid(t, bus, "zt")
			if r := bus.nextReport(t); r.Type != ledger.ReportDone {
				t.Fatalf("second report %+v, want done", r)
			}
			tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
			if err == nil && len(tasks) > 1 {
				t.Errorf("process %d still runs %d threads after the done report", pid, len(tasks))
				_ = syscall.Kill(pid, syscall.SIGKILL) // test teardown
			}
		})
	}
}

// TestSandboxPoolUIDLeavesNothingBehind: a pool uid goes to another
// attempt later, so what its attempt left where every user may write (a
// file to read, a setuid copy of a shell to become it again) is removed
// before the uid is reused.
func TestSandboxPoolUIDLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	for _, m := range modes(t) {
		if m.uids.IsZero() {
			continue // jobs as the worker's user: nothing to hand over
		}
		t.Run(m.name, func(t *testing.T) {
			bus := newFakeBus()
			f, _ := startSandboxed(t, m, bus, 1, nil)
			tag := fmt.Sprintf("gpuq-left-%d", rand.Uint64())
			// A world-writable directory inside one the uid may only
			// pass through, and one it may not even pass through: the walk
			// looks into the first and skips the second.
			pub, closed := "/tmp/"+tag+"-pub", "/tmp/"+tag+"-closed"
			for _, d := range []struct {
				path string
				mode os.FileMode
			}{{pub, 0o755}, {pub + "/open", 0o777 | os.ModeSticky}, {closed, 0o700}} {
				if err := os.Mkdir(d.path, d.mode); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(d.path, d.mode); err != nil { // past the umask
					t.Fatal(err)
				}
			}
			// A file of the attempt's uid in a directory another pool uid
			// made and then closed to others: it could, so the walk looks
			// in too.
			// An attempt first: by its end the worker's start (and its
			// walk for the whole pool) is behind, and the next attempt
			// gets the pool's least recently used uid.
			if r, out := runJob(t, bus, "warm-up", "true"); r.Type != ledger.ReportDone || r.ExitCode != 0 {
				t.Fatalf("warm-up: %+v\n%s", r, out)
			}
			f.w.jobs.settle()
			f.w.jobs.mu.Lock()
			next, closer := f.w.jobs.free[0], f.w.jobs.free[len(f.w.jobs.free)-1]
			f.w.jobs.mu.Unlock()
			other := "/tmp/" + tag + "-other"
			if err := os.Mkdir(other, 0o700); err != nil {
				t.Fatal(err)
			}
			planted := other + "/planted"
			if err := os.WriteFile(planted, []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(os.Chown(planted, int(next), int(next)), os.Chown(other, int(closer), int(closer))); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = os.RemoveAll(pub); _ = os.RemoveAll(closed); _ = os.RemoveAll(other) }) // test teardown
			left := []string{"/tmp/" + tag, "/var/tmp/" + tag + "-dir", "/tmp/" + tag + "-suid", pub + "/open/nested", planted}
			bus.sendOrder(t, dispatchOrder("leaver", 1, 1, "sh", "-c",
				fmt.Sprintf(`echo secret > %s; mkdir %s && echo x > %s/f; cp /bin/sh %s && chmod 4755 %s; echo y > %s || exit 3; echo "child=$$"`,
					left[0], left[1], left[1], left[2], left[2], left[3])))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("first report %+v, want started", r)
			}
			childPid(t, bus, "leaver") // the job ran to its last line
			if r := bus.nextReport(t); r.Type != ledger.ReportDone || r.ExitCode != 0 {
				t.Fatalf("second report %+v, want done with exit 0\n%s", r, bus.output("leaver", 1))
			}
			f.w.jobs.settle() // the uid is back in the pool: its walk is done
			for _, p := range left {
				if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s outlived its attempt: %v", p, err)
					_ = os.RemoveAll(p) // test teardown
				}
			}
		})
	}
}
