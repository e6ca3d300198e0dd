package worker

// Tests that the worker never signals a process that is not the attempt's
// by a pid that changed hands: a process listed from /proc is signalled
// only if it is still the one listed, and an attempt's leader stays
// unreaped, so that its pid and its process group's number stay the
// attempt's, until the attempt is swept. Pids are made to change hands
// with ns_last_pid, which root may set: the next process made gets the pid
// after it.

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// endedBy sends SIGTERM to cmd's process and waits for it: its end tells
// which signal reached it first. A SIGKILL sent before makes it die of
// SIGKILL (the system ends it at once, and drops the SIGTERM); otherwise it
// dies of the SIGTERM.
func endedBy(t *testing.T, cmd *exec.Cmd) syscall.Signal {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM) // dying already if killed
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("process %d ended with %v, want a signal", cmd.Process.Pid, err)
	}
	return ee.Sys().(syscall.WaitStatus).Signal()
}

// sleeper starts a process that waits to be signalled.
func sleeper(t *testing.T, pgid bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: pgid}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestKillSignalsOnlyTheProcessListed: kill leaves alone a live process
// whose /proc directory is not the one the listing showed (another
// process that took the listed one's pid), and kills the one listed.
func TestKillSignalsOnlyTheProcessListed(t *testing.T) {
	t.Parallel()
	for _, stale := range []bool{true, false} {
		cmd := sleeper(t, false)
		pid := cmd.Process.Pid
		var st syscall.Stat_t
		if err := syscall.Stat(procPath(pid, ""), &st); err != nil {
			t.Fatal(err)
		}
		e := procEntry{pid: pid, ino: st.Ino}
		if stale {
			e.ino++ // as a listing of the process that had the pid before shows it
		}
		kill(e, syscall.SIGKILL)
		switch sig := endedBy(t, cmd); {
		case stale && sig != syscall.SIGTERM:
			t.Errorf("kill of a listing whose /proc directory is another's: the process at its pid ended by %v, want untouched (SIGTERM)", sig)
		case !stale && sig != syscall.SIGKILL:
			t.Errorf("kill of the process listed: it ended by %v, want SIGKILL", sig)
		}
	}
}

// TestLeaderPidStaysTheAttemptsUntilSwept: once an attempt's first
// process has exited, no other process can take its pid (or its process
// group's number) until the attempt is swept and the leader reaped; once
// it is, a stop signals nothing, not a process group that took the number.
func TestLeaderPidStaysTheAttemptsUntilSwept(t *testing.T) {
	const lastPID = "/proc/sys/kernel/ns_last_pid"
	if os.Geteuid() != 0 {
		t.Skip("setting the next pid takes root")
	}
	if f, err := os.OpenFile(lastPID, os.O_WRONLY, 0); err != nil {
		t.Skipf("cannot set the next pid: %v", err)
	} else {
		_ = f.Close() // only a probe
	}
	// takePID starts a process in a group of its own, trying to have it
	// get pid (other processes of the host may fork first), and returns
	// it with whether it did.
	takePID := func(pid int) (*exec.Cmd, bool) {
		t.Helper()
		for range 50 {
			if err := os.WriteFile(lastPID, []byte(strconv.Itoa(pid-1)), 0); err != nil {
				t.Fatal(err)
			}
			cmd := sleeper(t, true)
			if cmd.Process.Pid == pid {
				return cmd, true
			}
			_ = cmd.Process.Kill() // not the pid wanted
			_ = cmd.Wait()         // killed
		}
		return nil, false
	}
	dir := t.TempDir()
	sb, err := newSandbox(&Config{Host: "h", StateDir: filepath.Join(dir, "state"), JobRoot: filepath.Join(dir, "jobs")})
	if err != nil {
		t.Fatal(err)
	}
	a := Attempt{Job: "leader", N: 1}
	j, err := sb.prepare(a)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	gos := newGoPool()
	defer gos.close() // after wait: the output copiers have ended
	p, err := startProcess(sb, gos, j, Spec{Attempt: a, Command: []string{"true"}, Dir: j.dir}, io.Discard, io.Discard, time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	pid := p.pid
	if o := p.wait(time.Minute); o.ExitCode != 0 {
		t.Fatalf("true exited %d", o.ExitCode)
	}
	// Property: the exited leader's pid is nobody else's before the sweep.
	if other, took := takePID(pid); took {
		_ = other.Process.Kill() // the test has failed already
		_ = other.Wait()
		t.Fatalf("a process took the exited leader's pid %d before its attempt was swept", pid)
	}
	if err := p.sweep(); err != nil {
		t.Fatal(err)
	}
	p.reap()
	other, took := takePID(pid)
	if !took {
		t.Skipf("no process got pid %d in 50 tries: the host forks too much", pid)
	}
	// Property: a stop after the sweep signals nothing, not the group
	// that has the leader's number now.
	p.kill("cancelled", false)
	if sig := endedBy(t, other); sig != syscall.SIGTERM {
		t.Errorf("stopping the swept attempt reached process group %d, which took its leader's pid: it ended by %v, want untouched (SIGTERM)", pid, sig)
	}
}
