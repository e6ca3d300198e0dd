//go:build cgo

// End-to-end tests of the worker daemon: the real scheduler and one or two
// real workers on simulated GPUs (go-nvml's mock servers), running real
// child processes through sh, on an embedded nats-server. Each test ends
// with the journal audit.
package gpuq_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/worker"
)

// fastLost declares attempts lost after a second, for the tests of lost
// workers.
var fastLost = schedOpts{core: scheduler.CoreConfig{LostAfter: time.Second}}

func TestJobSeesExactlyItsGPUs(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("vision", 1000)
	c.startWorker("h1", workerOpts{gpus: 4})
	acc := c.submitCmd("vision", "env-check", 2, 100, time.Minute,
		"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$GPUQ_JOB_ID|$GPUQ_ACCOUNT|$GPUQ_ATTEMPT"; echo to-stderr >&2`)
	started := c.waitEvent("vision", "env-check", acc.Seq, ledger.EventStarted)
	final := c.waitFinal("vision", "env-check", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Charged != 100 || final.Balance != 900 {
		t.Fatalf("final = %+v", final)
	}
	devs := strings.Join(started.Devices, ",")
	if len(started.Devices) != 2 || !strings.HasPrefix(devs, "GPU-") {
		t.Fatalf("started on %v", started.Devices)
	}
	stdout, stderr, end := c.logs("env-check", 1)
	if want := devs + "|" + devs + "|env-check|vision|1\n"; stdout != want {
		t.Errorf("the job saw %q, want %q", stdout, want)
	}
	if stderr != "to-stderr\n" || !strings.HasPrefix(end.End, "exit 0") {
		t.Errorf("stderr %q, end %q", stderr, end.End)
	}
	c.audit()
}

func TestFailureWalltimeAndCancel(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 1000)
	c.startWorker("h1", workerOpts{gpus: 4})

	fail := c.submitCmd("a", "fails", 1, 50, time.Minute, "sh", "-c", "echo boom >&2; exit 3")
	slow := c.submitCmd("a", "too-slow", 1, 50, time.Second, "sh", "-c", "sleep 30")
	stuck := c.submitCmd("a", "cancelled", 1, 50, time.Minute, "sh", "-c", "sleep 30")

	if ev := c.waitFinal("a", "fails", fail.Seq); ev.Type != ledger.EventFailed || ev.Reason != ledger.ReasonExitCode || ev.ExitCode == nil || *ev.ExitCode != 3 {
		t.Errorf("non-zero exit: %+v", ev)
	}
	if _, stderr, _ := c.logs("fails", 1); stderr != "boom\n" {
		t.Errorf("stderr of the failed job = %q", stderr)
	}
	ev := c.waitFinal("a", "too-slow", slow.Seq)
	if ev.Type != ledger.EventFailed || ev.ExitCode == nil || *ev.ExitCode != 128+15 {
		t.Errorf("walltime: %+v, want failed with exit 143 (SIGTERM)", ev)
	}
	if _, _, end := c.logs("too-slow", 1); !strings.Contains(end.End, "stopped: walltime") {
		t.Errorf("walltime end marker = %q", end.End)
	}
	c.waitEvent("a", "cancelled", stuck.Seq, ledger.EventStarted)
	if ev, err := c.c.Cancel(c.ctx(), "a", "cancelled"); err != nil || ev.Type != ledger.EventCancelRequested {
		t.Fatalf("cancel = %+v, %v", ev, err)
	}
	if ev := c.waitFinal("a", "cancelled", stuck.Seq); ev.Type != ledger.EventCancelled {
		t.Errorf("cancelled job ended %+v", ev)
	}
	if _, _, end := c.logs("cancelled", 1); !strings.Contains(end.End, "stopped: cancelled") {
		t.Errorf("cancel end marker = %q", end.End)
	}
	st := c.waitSettled("fails", "too-slow", "cancelled")
	if a := st.Accounts["a"]; a.Balance != 1000 || a.Reserved != 0 {
		t.Errorf("failures were charged: %+v", a)
	}
	c.audit()
}

func TestOutputIsStreamedAndCapped(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 100)
	c.startWorker("h1", workerOpts{})
	acc := c.submitCmd("a", "chatty", 1, 1, time.Minute, "sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`)
	c.waitFinal("a", "chatty", acc.Seq)
	stdout, _, end := c.logs("chatty", 1)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2000 || lines[0] != "line 0" || lines[1999] != "line 1999" || end.Truncated {
		t.Errorf("got %d lines (first %q, last %q), truncated %v", len(lines), lines[0], lines[len(lines)-1], end.Truncated)
	}

	// On a worker that keeps 1000 bytes per attempt, the rest is dropped
	// and the end marker says so.
	c2 := newCluster(t)
	c2.startScheduler("s", schedOpts{})
	c2.createAccount("a", 100)
	c2.startWorker("h2", workerOpts{maxLog: 1000})
	acc = c2.submitCmd("a", "capped", 1, 1, time.Minute, "sh", "-c", `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done`)
	c2.waitFinal("a", "capped", acc.Seq)
	stdout, _, end = c2.logs("capped", 1)
	if len(stdout) != 1000 || !strings.HasPrefix(stdout, "line 0\n") || !end.Truncated {
		t.Errorf("capped output: %d bytes, truncated %v", len(stdout), end.Truncated)
	}
}

// TestLostWorkerIsRetriedElsewhere stops a worker mid-job without a report,
// as a crash would: its heartbeat expires, the scheduler declares the
// attempt lost, and the retry runs on the other host and is charged once.
func TestLostWorkerIsRetriedElsewhere(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", fastLost)
	c.createAccount("a", 1000)
	h1 := c.startWorker("h1", workerOpts{gpus: 1})
	acc := c.submitCmd("a", "survivor", 1, 200, time.Minute,
		"sh", "-c", `if [ "$GPUQ_ATTEMPT" = 1 ]; then sleep 60; fi; echo "ran on attempt $GPUQ_ATTEMPT"`)
	first := c.waitEvent("a", "survivor", acc.Seq, ledger.EventStarted)
	if first.Host != "h1" {
		t.Fatalf("first attempt on %s", first.Host)
	}
	c.startWorker("h2", workerOpts{gpus: 1})
	h1.crash(t)
	lost := c.waitEvent("a", "survivor", acc.Seq, ledger.EventLost)
	if !strings.Contains(lost.Message, "h1") {
		t.Errorf("lost message %q does not name the host", lost.Message)
	}
	final := c.waitFinal("a", "survivor", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Host != "h2" || final.Attempt != 2 || final.Charged != 200 || final.Balance != 800 {
		t.Errorf("final = %+v, want succeeded on h2 at attempt 2, charged 200 once", final)
	}
	if stdout, _, _ := c.logs("survivor", 2); stdout != "ran on attempt 2\n" {
		t.Errorf("attempt 2 printed %q", stdout)
	}
	c.audit()
}

// TestWorkerRestartedBeforeAck restarts a worker that crashed after taking
// a dispatch and before its started report was stored: the unacked order is
// delivered again. On another disk (a replaced host) the new process runs
// it; on the same disk it refuses to run an attempt it took before, and the
// scheduler retries it at once.
func TestWorkerRestartedBeforeAck(t *testing.T) {
	t.Parallel()
	for _, sameDisk := range []bool{false, true} {
		name := map[bool]string{false: "new disk", true: "same disk"}[sameDisk]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			c.startScheduler("s", fastLost)
			c.createAccount("a", 1000)
			state := t.TempDir()
			lossy := &lossyBus{holdReport: ledger.ReportStarted, held: make(chan struct{}), closed: make(chan struct{})}
			first := c.startWorker("h1", workerOpts{gpus: 1, stateDir: state, ackWait: time.Second,
				wrap: func(b worker.Bus) worker.Bus { lossy.Bus = b; return lossy }})
			acc := c.submitCmd("a", "redelivered", 1, 10, time.Minute, "sh", "-c", "echo ok")
			select {
			case <-lossy.held: // the worker took the order and is reporting it started
			case <-time.After(20 * time.Second):
				t.Fatal("the worker never took the order")
			}
			close(lossy.closed)
			first.crash(t)

			if !sameDisk {
				state = t.TempDir()
			}
			c.startWorker("h1", workerOpts{gpus: 1, stateDir: state, ackWait: time.Second})
			final := c.waitFinal("a", "redelivered", acc.Seq)
			want := map[bool]int{false: 1, true: 2}[sameDisk]
			if final.Type != ledger.EventSucceeded || final.Attempt != want {
				t.Errorf("final = %+v, want success at attempt %d", final, want)
			}
			if got := countOf(c.jobEventTypes("a", "redelivered"), "started"); got != 1 {
				t.Errorf("started %d times, want once", got)
			}
			c.audit()
		})
	}
}

// TestWorkerRestartedAfterStart restarts a worker that crashed after its
// started report was stored and before its ack: the order comes back, the
// new process sees it already started here and does not run it twice; the
// attempt is missing from its heartbeat, so the scheduler retries it.
func TestWorkerRestartedAfterStart(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", fastLost)
	c.createAccount("a", 1000)
	state := t.TempDir()
	lossy := &lossyBus{dropAcks: 1}
	first := c.startWorker("h1", workerOpts{gpus: 1, stateDir: state, ackWait: time.Second,
		wrap: func(b worker.Bus) worker.Bus { lossy.Bus = b; return lossy }})
	acc := c.submitCmd("a", "once", 1, 10, time.Minute, "sh", "-c", `if [ "$GPUQ_ATTEMPT" = 1 ]; then sleep 60; fi`)
	c.waitEvent("a", "once", acc.Seq, ledger.EventStarted)
	first.crash(t)

	c.startWorker("h1", workerOpts{gpus: 1, stateDir: state, ackWait: time.Second})
	final := c.waitFinal("a", "once", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Attempt != 2 {
		t.Errorf("final = %+v, want attempt 2 after attempt 1 was found lost", final)
	}
	types := c.jobEventTypes("a", "once")
	if n := countOf(types, "started"); n != 2 {
		t.Errorf("events %v: started %d times, want twice (attempts 1 and 2)", types, n)
	}
	c.audit()
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}

// TestXidEndsJobAsInfrastructureFailure injects an Xid on the GPU a job
// runs on: the device is no longer offered, and the job is retried on the
// other device, never charged for the failed attempt.
func TestXidEndsJobAsInfrastructureFailure(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 1000)
	w := c.startWorker("h1", workerOpts{gpus: 2})
	acc := c.submitCmd("a", "xid", 1, 100, time.Minute, "sh", "-c", `if [ "$GPUQ_ATTEMPT" = 1 ]; then sleep 60; fi`)
	started := c.waitEvent("a", "xid", acc.Seq, ledger.EventStarted)
	devs, err := w.gpu.Devices()
	if err != nil {
		t.Fatal(err)
	}
	idx := slices.IndexFunc(devs, func(d worker.Device) bool { return d.UUID == started.Devices[0] })
	w.gpu.Sim().InjectXid(idx, 79)
	req := c.waitEvent("a", "xid", acc.Seq, ledger.EventRequeued)
	if req.Reason != ledger.ReasonInfrastructure || !strings.Contains(req.Message, "Xid 79") {
		t.Errorf("requeued = %+v", req)
	}
	final := c.waitFinal("a", "xid", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Attempt != 2 || final.Charged != 100 {
		t.Errorf("final = %+v", final)
	}
	h := w.w.Host()
	for _, d := range h.Devices {
		if d.UUID == started.Devices[0] && (d.Healthy || !strings.Contains(d.Reason, "Xid 79")) {
			t.Errorf("failed device in the heartbeat: %+v", d)
		}
	}
	if got := h.Capacity(); got != 1 {
		t.Errorf("capacity after the Xid = %d, want 1", got)
	}
	c.audit()
}

// TestDrain stops a worker as SIGTERM does: a short job finishes and is
// charged; a long one is stopped at the drain timeout and retried uncharged.
func TestDrain(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 1000)
	w := c.startWorker("h1", workerOpts{gpus: 2, drain: 1500 * time.Millisecond})
	short := c.submitCmd("a", "short", 1, 10, time.Minute, "sh", "-c", "sleep 0.5")
	long := c.submitCmd("a", "long", 1, 10, time.Minute, "sh", "-c", `if [ "$GPUQ_ATTEMPT" = 1 ]; then sleep 60; fi`)
	c.waitEvent("a", "short", short.Seq, ledger.EventStarted)
	c.waitEvent("a", "long", long.Seq, ledger.EventStarted)
	w.stop(t)
	if ev := c.waitFinal("a", "short", short.Seq); ev.Type != ledger.EventSucceeded {
		t.Errorf("short job during drain: %+v", ev)
	}
	req := c.waitEvent("a", "long", long.Seq, ledger.EventRequeued)
	if req.Reason != ledger.ReasonInfrastructure || !strings.Contains(req.Message, "drained") {
		t.Errorf("long job at the drain timeout: %+v", req)
	}
	if _, err := c.hosts.Get(c.ctx(), "h1"); err == nil {
		t.Error("the drained worker's heartbeat is still there")
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("read the drained worker's heartbeat: %v", err)
	}
	c.startWorker("h2", workerOpts{gpus: 1})
	if ev := c.waitFinal("a", "long", long.Seq); ev.Type != ledger.EventSucceeded || ev.Host != "h2" || ev.Charged != 10 {
		t.Errorf("retried long job: %+v", ev)
	}
	st := c.waitSettled("short", "long")
	if a := st.Accounts["a"]; a.Balance != 980 {
		t.Errorf("balance %d, want 980 (each job charged once)", a.Balance)
	}
	c.audit()
}

// TestWorkerStateOfAnotherInstallation keeps a worker's disk while the
// streams are set up anew (a reset dev cluster, a rebuilt installation):
// the same job id runs at attempt 1 again instead of being refused as an
// attempt this host took before.
func TestWorkerStateOfAnotherInstallation(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	for round := 1; round <= 2; round++ {
		c := newCluster(t)
		c.startScheduler("s", schedOpts{})
		c.createAccount("a", 1000)
		w := c.startWorker("h1", workerOpts{gpus: 1, stateDir: state})
		acc := c.submitCmd("a", "reused-id", 1, 10, time.Minute, "true")
		final := c.waitFinal("a", "reused-id", acc.Seq)
		if final.Type != ledger.EventSucceeded || final.Attempt != 1 {
			t.Errorf("round %d: final = %+v, want success at attempt 1", round, final)
		}
		if types := c.jobEventTypes("a", "reused-id"); countOf(types, "requeued") != 0 {
			t.Errorf("round %d: events %v, want no refusal", round, types)
		}
		w.stop(t)
	}
}
