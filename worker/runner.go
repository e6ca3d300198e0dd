package worker

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec is what to run for one attempt.
type Spec struct {
	Attempt  Attempt
	Account  string
	Command  []string
	Env      map[string]string
	Devices  []string // claimed GPU UUIDs
	Walltime time.Duration
	Dir      string // working directory; "" is the worker's
}

// Outcome is how an attempt's process ended.
type Outcome struct {
	ExitCode int           // 128+signal when killed by a signal
	Runtime  time.Duration // from start to exit
	// Stopped says why the worker stopped it, if it did: "walltime",
	// "cancelled", or an infrastructure reason.
	Stopped string
	Infra   bool // Stopped is an infrastructure reason: retry, do not charge
}

// process is one running attempt: a child in its own process group.
type process struct {
	cmd   *exec.Cmd
	start time.Time
	done  chan struct{}
	grace time.Duration

	mu      sync.Mutex
	stopped string
	infra   bool
}

// childEnv builds the environment of an attempt's process: the worker's own,
// then the job's, then the variables gpuq sets, which win.
func childEnv(s Spec) []string {
	env := os.Environ()
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	devs := strings.Join(s.Devices, ",")
	return append(env,
		"CUDA_VISIBLE_DEVICES="+devs,
		"NVIDIA_VISIBLE_DEVICES="+devs,
		"GPUQ_JOB_ID="+s.Attempt.Job,
		"GPUQ_ACCOUNT="+s.Account,
		"GPUQ_ATTEMPT="+strconv.Itoa(s.Attempt.N),
	)
}

// startProcess starts s's command with its output going to stdout and
// stderr. The child runs in a new process group, so that stopping it stops
// everything it started.
func startProcess(s Spec, stdout, stderr io.Writer, grace time.Duration) (*process, error) {
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Env = childEnv(s)
	cmd.Dir = s.Dir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = sysProcAttr()
	// A grandchild that keeps the output pipes open must not hold Wait
	// after the child exits; the group is killed right after.
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &process{cmd: cmd, start: time.Now(), done: make(chan struct{}), grace: grace}, nil
}

// stop asks the process group to end with SIGTERM, then kills it after the
// grace period. The first reason given is kept.
func (p *process) stop(reason string, infra bool) {
	p.mu.Lock()
	first := p.stopped == ""
	if first {
		p.stopped, p.infra = reason, infra
	}
	p.mu.Unlock()
	if !first {
		return
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM) // ESRCH: it already exited, which is what we want
	go func() {
		select {
		case <-p.done:
		case <-time.After(p.grace):
			_ = syscall.Kill(pgid, syscall.SIGKILL) // as above
		}
	}()
}

// kill ends the process group at once.
func (p *process) kill(reason string, infra bool) {
	p.mu.Lock()
	if p.stopped == "" {
		p.stopped, p.infra = reason, infra
	}
	p.mu.Unlock()
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // ESRCH: already gone
}

// wait waits for the process to exit, stopping it at its walltime, and
// returns how it ended.
func (p *process) wait(walltime time.Duration) Outcome {
	timer := time.AfterFunc(walltime, func() { p.stop("walltime", false) })
	// Wait's error adds nothing the outcome uses: the exit status is in
	// ProcessState, and ErrWaitDelay only says a grandchild held the output
	// open past WaitDelay.
	_ = p.cmd.Wait()
	timer.Stop()
	close(p.done)
	// The group may still hold children that outlived the leader; end them.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // ESRCH when none are left
	o := Outcome{ExitCode: exitCode(p.cmd.ProcessState), Runtime: time.Since(p.start)}
	p.mu.Lock()
	o.Stopped, o.Infra = p.stopped, p.infra
	p.mu.Unlock()
	return o
}

// exitCode is the process's exit status, 128+signal when a signal killed
// it, or -1 when it has no state.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// describe says how an attempt ended, for the log's end marker.
func (o Outcome) describe() string {
	s := fmt.Sprintf("exit %d after %v", o.ExitCode, o.Runtime.Round(time.Millisecond))
	if o.Stopped != "" {
		s += " (stopped: " + o.Stopped + ")"
	}
	return s
}
