package worker

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
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
	// Dir is the attempt's own directory: its HOME and TMPDIR, and its
	// working directory unless Workdir names another.
	Dir string
	// Workdir is the job's working directory, checked by the worker
	// before the attempt starts (see workdir.go); empty is Dir.
	Workdir string
	// ArrayID and ArrayIndex place the job in its job array, if any
	// (GPUQ_ARRAY_ID and GPUQ_ARRAY_INDEX).
	ArrayID    string
	ArrayIndex int
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

// process is one running attempt: a child in its own process group, in
// its attempt's place.
type process struct {
	proc  *os.Process
	pid   int
	sb    *sandbox
	jail  *jail
	log   *slog.Logger
	start time.Time
	done  chan struct{}
	grace time.Duration

	// outputs are the read ends of the attempt's stdout and stderr; each
	// copier sends on copied when it is done with one.
	outputs []*os.File
	copied  chan struct{}

	// mu is held while the attempt is signalled, so the leader is not
	// reaped meanwhile (see reap).
	mu      sync.Mutex
	stopped string
	infra   bool
	reaped  bool // the leader is reaped: its pid, and its group's, may be another process's
}

// startProcess starts s's command in its attempt's place j (see
// sandbox.go) with its output going to stdout and stderr. The child runs in
// a new process group, with an environment of its own (see jobEnv).
func startProcess(sb *sandbox, gos *goPool, j *jail, s Spec, stdout, stderr io.Writer, grace time.Duration, log *slog.Logger) (*process, error) {
	p, err := startCommand(sb, gos, j, s, stdout, stderr, grace, log, true)
	if err != nil && errors.Is(err, fs.ErrNotExist) {
		// A program found in PATH a moment ago may have gone: look
		// for it again.
		p, err = startCommand(sb, gos, j, s, stdout, stderr, grace, log, false)
	}
	return p, err
}

// startCommand starts the attempt's process with os.StartProcess: an
// os/exec Cmd would copy and check its environment (a map per attempt) and
// its files again, for what the worker has made already.
func startCommand(sb *sandbox, gos *goPool, j *jail, s Spec, stdout, stderr io.Writer, grace time.Duration, log *slog.Logger, cached bool) (*process, error) {
	path, err := lookPath(s.Command[0], cached)
	if err != nil {
		return nil, err
	}
	dir := s.Dir
	if s.Workdir != "" {
		dir = s.Workdir
	}
	// Opened once for every attempt, rather than for each.
	null, err := devNull()
	if err != nil {
		return nil, err
	}
	// The output pipes are the worker's own (see outputPipe), read by
	// copiers of its own (see copyOutput).
	outR, outW, err := outputPipe()
	if err != nil {
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	errR, errW, err := outputPipe()
	if err != nil {
		_, _ = outR.Close(), outW.Close() // unused
		return nil, fmt.Errorf("output pipe: %w", err)
	}
	proc, err := os.StartProcess(path, s.Command, &os.ProcAttr{Dir: dir, Env: jobEnv(os.Environ(), s),
		Files: []*os.File{null, outW, errW}, Sys: sysProcAttr(j)})
	// The child has its copies of the write ends (or none): the read ends
	// see EOF once every process holding them is gone.
	_, _ = outW.Close(), errW.Close() // never written here
	if err != nil {
		_, _ = outR.Close(), errR.Close() // nothing to read
		return nil, err
	}
	p := &process{proc: proc, pid: proc.Pid, sb: sb, jail: j, log: log, start: time.Now(), done: make(chan struct{}), grace: grace,
		outputs: []*os.File{outR, errR}, copied: make(chan struct{}, 2)}
	gos.Go(func() { p.copyOutput(outR, stdout) })
	gos.Go(func() { p.copyOutput(errR, stderr) })
	return p, nil
}

// outputDelay is how long wait waits, once the attempt's first process has
// exited, for the output that processes it left still write: a grandchild
// that keeps the output pipes open must not hold the attempt's end, and
// its processes are swept right after.
const outputDelay = 2 * time.Second

// copyBufs are the copiers' buffers, kept from attempt to attempt.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyOutput copies what r, one of the attempt's output pipes, reads to w
// until EOF (or wait closes r), then closes r and says so on p.copied.
func (p *process) copyOutput(r *os.File, w io.Writer) {
	bp := copyBufs.Get().(*[]byte)
	for {
		n, err := r.Read(*bp)
		if n > 0 {
			_, _ = w.Write((*bp)[:n]) // an attempt's output writer keeps or drops; it never fails
		}
		if err != nil {
			break
		}
	}
	copyBufs.Put(bp)
	_ = r.Close() // read to its end, or closed by wait already
	p.copied <- struct{}{}
}

// lookPath is where exec.LookPath finds name, a program named without a
// directory, in the worker's PATH, as it was found at most pathTTL ago
// (unless cached is false): a search of every directory of PATH costs a
// dozen system calls, for every attempt. A program installed in an
// earlier directory of PATH is found within pathTTL; one that is gone
// makes the start fail with ENOENT, and startProcess looks again. Any
// other name is itself. The error is exec.LookPath's.
func lookPath(name string, cached bool) (string, error) {
	if strings.ContainsRune(name, '/') {
		return name, nil
	}
	path := os.Getenv("PATH")
	now := time.Now()
	paths.Lock()
	defer paths.Unlock()
	if e, ok := paths.m[name]; ok && cached && e.path == path && now.Sub(e.at) < pathTTL {
		return e.found, nil
	}
	found, err := exec.LookPath(name)
	if err != nil {
		delete(paths.m, name)
		return "", err
	}
	if len(paths.m) >= 1024 {
		clear(paths.m) // a bound: names are the jobs'
	}
	paths.m[name] = pathEntry{path: path, found: found, at: now}
	return found, nil
}

// pathTTL is how long lookPath keeps what it found.
const pathTTL = time.Second

var paths = struct {
	sync.Mutex
	m map[string]pathEntry
}{m: map[string]pathEntry{}}

type pathEntry struct {
	path, found string // the PATH searched, and what it found
	at          time.Time
}

// devNull is /dev/null, open for reading, the stdin of every attempt
// (the one os/exec would open and close for each).
var devNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// signal sends sig to every process of the attempt the sandbox can find,
// and to its process group. One it cannot list now the sweep at the end
// kills. Until the leader is reaped (after the sweep, see reap) its pid,
// and so its process group's, is the attempt's and no other process's;
// once it is, nothing of the attempt is left, and signal does nothing.
func (p *process) signal(sig syscall.Signal) {
	pid := p.pid
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reaped {
		return
	}
	_ = syscall.Kill(-pid, sig) // ESRCH: the group is gone, which is the aim
	if err := p.sb.signalAttempt(p.jail, pid, true, sig); err != nil {
		p.log.Warn("signal the attempt's processes", slog.String("signal", sig.String()), slog.Any("err", err))
	}
}

// stop asks the attempt's processes to end with SIGTERM, then kills them
// after the grace period. The first reason given is kept.
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
	p.signal(syscall.SIGTERM)
	go func() {
		select {
		case <-p.done:
		case <-time.After(p.grace):
			p.signal(syscall.SIGKILL)
		}
	}()
}

// kill ends the attempt's processes at once.
func (p *process) kill(reason string, infra bool) {
	p.mu.Lock()
	if p.stopped == "" {
		p.stopped, p.infra = reason, infra
	}
	p.mu.Unlock()
	p.signal(syscall.SIGKILL)
}

// wait waits for the process to exit, stopping it at its walltime, and
// returns how it ended. Processes it left may still run: the caller sweeps
// them (see sweep) before the attempt's GPUs are freed, and then reaps the
// leader (see reap), which wait leaves a zombie where the system allows:
// its pid then stays the attempt's, and so does its process group's
// number, which the sweep and a stop signal.
func (p *process) wait(walltime time.Duration) Outcome {
	timer := time.AfterFunc(walltime, func() { p.stop("walltime", false) })
	code, exited := waitExit(p.pid)
	if exited {
		noteExited(p.pid) // a zombie until reap
	} else {
		p.mu.Lock()
		ps, err := p.proc.Wait()
		p.reaped = true
		p.mu.Unlock()
		code = exitCode(ps)
		if err != nil {
			p.log.Warn("wait for the attempt's process", slog.Any("err", err))
		}
	}
	timer.Stop()
	p.awaitOutput()
	close(p.done)
	o := Outcome{ExitCode: code, Runtime: time.Since(p.start)}
	p.mu.Lock()
	o.Stopped, o.Infra = p.stopped, p.infra
	p.mu.Unlock()
	return o
}

// reap collects the exited leader, once its attempt is swept; from then on
// its pid and its process group's may be another process's, and the
// attempt is never signalled again.
func (p *process) reap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.reaped {
		noteReaped(p.pid)
		if _, err := p.proc.Wait(); err != nil { // its exit status was read by wait
			p.log.Warn("reap the attempt's process", slog.Any("err", err))
		}
		p.reaped = true
	}
}

// awaitOutput waits until both output pipes are read to their end, for up
// to outputDelay, then cuts them: every byte written before is then in
// the attempt's output, before its end marker.
func (p *process) awaitOutput() {
	var cut <-chan time.Time
	for range 2 {
		select {
		case <-p.copied:
			continue
		default:
		}
		if cut == nil {
			t := time.NewTimer(outputDelay)
			defer t.Stop()
			cut = t.C
		}
		select {
		case <-p.copied:
		case <-cut:
			for _, f := range p.outputs {
				_ = f.Close() // the copier's Read ends, and it says so
			}
			<-p.copied
		}
	}
}

// sweep kills every process of the attempt that is left and reports nil
// once none is, or an error naming survivors. The leader, unreaped, keeps
// its process group's number the attempt's (see wait).
func (p *process) sweep() error {
	pid := p.pid
	p.mu.Lock()
	leader := pid
	if !p.reaped {
		_ = syscall.Kill(-pid, syscall.SIGKILL) // ESRCH when none are left
	} else if waitsUnreaped {
		// Reaped after a wait that failed: its pid may be another's, and
		// the sweep finds the attempt's processes without it.
		leader = 0
	}
	p.mu.Unlock()
	return p.sb.sweepAttempt(p.jail, leader, false)
}

// pooled reports whether the attempt runs under a uid of its own.
func (p *process) pooled() bool { return p.jail != nil && p.jail.pooled }

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
