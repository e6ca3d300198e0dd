//go:build linux

package worker

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// On Linux the sweep reads /proc to find an attempt's processes:
//
//   - With a uid pool, every process whose real, effective or saved uid is
//     the attempt's. Without root a process cannot change those to another
//     id, so nothing escapes: the sweep is complete.
//   - Without one, the processes of the worker's own user that are in the
//     attempt's process group or session, that descend from its first
//     process while that one lives, or that carry the attempt's marker
//     (GPUQ_SANDBOX, its directory) in their environment. A process that
//     leaves all of these (a setsid in a child whose parent then exits,
//     with the variable removed before an exec) is not found: that is the
//     limit of running jobs as the worker's own user.
//
// Zombies count as gone: they hold no memory or device, and only wait for
// their parent to reap them. A pid read from /proc may in principle be
// reused before it is signalled; the sweep reads again after each round.

// hideWorker makes the worker process non-dumpable: a process of the same
// user (a job, when jobs run as the worker's user) can then neither read
// its /proc/<pid>/environ, mem, fd or maps nor ptrace it. A job's own
// processes are dumpable again: exec resets it.
func hideWorker() error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0); e != 0 {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", e)
	}
	return nil
}

// procInfo is one process as /proc/<pid>/status shows it.
type procInfo struct {
	pid, ppid, pgid, sid int
	uids                 [3]uint32 // real, effective, saved
	zombie               bool
}

func (p procInfo) hasUID(uid uint32) bool {
	return p.uids[0] == uid || p.uids[1] == uid || p.uids[2] == uid
}

// readProcs lists every process. One that exits while being read is left
// out.
func readProcs() (map[int]procInfo, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	out := make(map[int]procInfo, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		p, err := readStatus(pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
			continue // exited meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[pid] = p
	}
	return out, nil
}

// readStatus parses /proc/<pid>/status.
func readStatus(pid int) (procInfo, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procInfo{}, err
	}
	p := procInfo{pid: pid, pgid: -1, sid: -1}
	first := func(v string) int {
		f := strings.Fields(v)
		if len(f) == 0 {
			return -1
		}
		n, err := strconv.Atoi(f[0]) // the id in /proc's own pid namespace
		if err != nil {
			return -1
		}
		return n
	}
	dead, threads := false, 0
	for line := range strings.SplitSeq(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "State":
			dead = strings.HasPrefix(strings.TrimSpace(v), "Z") || strings.HasPrefix(strings.TrimSpace(v), "X")
		case "Threads":
			threads = first(v)
		case "PPid":
			p.ppid = first(v)
		case "NSpgid":
			p.pgid = first(v)
		case "NSsid":
			p.sid = first(v)
		case "Uid":
			f := strings.Fields(v)
			if len(f) < 3 {
				return procInfo{}, fmt.Errorf("/proc/%d/status: bad Uid line %q", pid, line)
			}
			for i := range 3 {
				n, err := strconv.ParseUint(f[i], 10, 32)
				if err != nil {
					return procInfo{}, fmt.Errorf("/proc/%d/status: bad Uid line %q", pid, line)
				}
				p.uids[i] = uint32(n)
			}
		}
	}
	// A process whose main thread exited while another thread runs shows
	// state Z too: it is dead only when no thread is left to run.
	p.zombie = dead && threads <= 1
	return p, nil
}

// marker returns the value of pid's GPUQ_SANDBOX variable, "" when it has
// none or its environment cannot be read.
func marker(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil || len(data) == 0 {
		// A process whose main thread has exited shows an empty
		// environment there; a thread that still runs shows it.
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task") // exited: no tasks, no marker
		for _, task := range tasks {
			if d, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/environ"); err == nil && len(d) > 0 {
				data = d
				break
			}
		}
	}
	if len(data) == 0 {
		return "" // exited, or not ours to read: not an attempt's process either way
	}
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(markerVar+"=")); ok {
			return string(v)
		}
	}
	return ""
}

// descends reports whether p's ancestors include pid.
func descends(p procInfo, pid int, procs map[int]procInfo) bool {
	for range len(procs) + 1 { // a loop in a racy read must end
		if p.ppid == pid {
			return true
		}
		q, ok := procs[p.ppid]
		if !ok || p.ppid <= 1 {
			return false
		}
		p = q
	}
	return false
}

// matcher tells a process of what is being swept.
type matcher func(p procInfo, procs map[int]procInfo) bool

// attemptMatcher matches j's processes (see the top of this file). leader
// is the attempt's first process; alive says it is not reaped yet, so its
// descendants can be told by ancestry.
func (s *sandbox) attemptMatcher(j *jail, leader int, alive bool) matcher {
	if j.pooled {
		return func(p procInfo, _ map[int]procInfo) bool { return p.hasUID(j.uid) }
	}
	self := uint32(s.self)
	return func(p procInfo, procs map[int]procInfo) bool {
		if !p.hasUID(self) {
			return false
		}
		if leader > 0 && (p.pgid == leader || p.sid == leader) {
			return true
		}
		if leader > 0 && alive && (p.pid == leader || descends(p, leader, procs)) {
			return true
		}
		return marker(p.pid) == j.dir
	}
}

// leftoverMatcher matches the processes of attempts of an earlier life of
// this worker: every process of a pool uid, or without a pool, those of the
// worker's user marked with a directory of its job root.
func (s *sandbox) leftoverMatcher() matcher {
	if s.pooled() {
		return func(p procInfo, _ map[int]procInfo) bool {
			return s.uids.contains(p.uids[0]) || s.uids.contains(p.uids[1]) || s.uids.contains(p.uids[2])
		}
	}
	self := uint32(s.self)
	return func(p procInfo, _ map[int]procInfo) bool {
		return p.hasUID(self) && strings.HasPrefix(marker(p.pid), s.root+string(os.PathSeparator))
	}
}

// find lists the live processes match accepts, never the worker itself.
func find(match matcher) ([]int, error) {
	procs, err := readProcs()
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []int
	for _, p := range procs {
		if p.zombie || p.pid == self {
			continue
		}
		if match(p, procs) {
			out = append(out, p.pid)
		}
	}
	return out, nil
}

// signal sends sig to every process match accepts now.
func signal(match matcher, sig syscall.Signal) error {
	pids, err := find(match)
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig) // ESRCH: gone already, which is the aim
	}
	return err
}

// sweep kills every process match accepts, reading /proc again after each
// round (a process may fork while the round runs), and returns nil once a
// read finds none, or an error naming those that outlive two seconds of
// SIGKILLs (a process stuck in the kernel, which still holds its devices).
func sweep(what string, match matcher) error {
	deadline := time.Now().Add(2 * time.Second)
	delay := time.Millisecond
	for {
		pids, err := find(match)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d processes of %s survive SIGKILL: pids %v", len(pids), what, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: gone already
		}
		time.Sleep(delay) // give the kernel time to tear them down
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// signalAttempt sends sig to j's processes.
func (s *sandbox) signalAttempt(j *jail, leader int, alive bool, sig syscall.Signal) error {
	return signal(s.attemptMatcher(j, leader, alive), sig)
}

// sweepAttempt kills j's processes and reports whether any is left.
func (s *sandbox) sweepAttempt(j *jail, leader int, alive bool) error {
	return sweep("the attempt in "+j.dir, s.attemptMatcher(j, leader, alive))
}

// reclaim kills what attempts of an earlier life of the worker left.
func (s *sandbox) reclaim() error {
	what := "earlier attempts (job uids " + s.uids.String() + ")"
	if !s.pooled() {
		what = "earlier attempts in " + s.root
	}
	return sweep(what, s.leftoverMatcher())
}

// poolSupported reports whether this system can run attempts under pool
// uids: Linux can, its sweep reads every process's uids from /proc.
const poolSupported = true

// sharedDirs are where every user may create files. A pool uid goes to
// another attempt, maybe another tenant's, once its attempt ends, so what
// the attempt left there is removed first: files for the next holder of the
// uid to read, and a setuid copy of a shell that would let a later attempt
// under another uid become this one.
var sharedDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// removeOwned removes every file and directory owned by uid under roots,
// not looking into skip (the job root, whose attempt directories are
// handled on their own). Symbolic links are removed, never followed.
func removeOwned(uid uint32, roots []string, skip string) error {
	var errs []error
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return nil // gone meanwhile, or no such shared directory here
			case err != nil:
				errs = append(errs, err)
				return nil
			case path == skip:
				return fs.SkipDir
			case path == root:
				return nil
			}
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				errs = append(errs, err)
				return nil
			}
			st, ok := info.Sys().(*syscall.Stat_t)
			if !ok || st.Uid != uid {
				return nil
			}
			if err := os.RemoveAll(path); err != nil {
				errs = append(errs, err)
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove what uid %d left in %v: %w", uid, roots, errors.Join(errs...))
	}
	return nil
}
