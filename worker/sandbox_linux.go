//go:build linux

package worker

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
//
// The sweep at an attempt's end runs once per job, and reading every
// process's status and environment costs some 25µs a process. So it keeps
// what it read of each process (see seen), by pid and the inode number of
// its /proc directory, which one listing of /proc gives for every process
// and a later process of the same pid does not share; a process is read
// again only when it is new, or when what was read of it matches the
// attempt being swept (it is then read afresh, and killed only if it
// still matches). A process that matched no attempt when first seen and
// later joins one without forking from it (joins its process group from
// outside, takes the attempt's uid by a setuid of root, or execs with its
// marker) is therefore found by the full reads only: a stop's signals and
// the reclaim at start. Every process of an attempt that forks from it
// inherits what makes it one, and is seen with it. Every read keeps what
// it found, the full ones too, and a marker once read is kept for the
// same process: one that is exiting has no environment left while it
// still holds its open files (its devices), and is still found by it.

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
	kthread              bool // a kernel thread: no environment, never a job's
	// marker is the process's GPUQ_SANDBOX, once markerRead; see env.
	marker     string
	markerRead bool
	// prev is the marker an earlier read of this same process (pid and
	// /proc inode) found, if hasPrev: an exiting process's environment
	// is gone before its open files are.
	prev    string
	hasPrev bool
	// denied: the marker is "" because the environment may not be read;
	// the denial is kept only while the process has the same uids (see
	// reread).
	denied bool
}

// env returns the process's marker, read on first use. An environment
// that reads empty, or cannot be read but for a lack of permission, is
// read again at the next use: a process in the middle of an exec shows an
// empty one for a moment. One the worker may not read has no marker (or
// the one an earlier read of the process found), kept like one read (it
// would be denied again at every sweep) while the process keeps its uids:
// one that changed them (a setuid program that gave up its privileges)
// may be readable now, and is read again. A later process of the same pid
// is another entry of /proc (see seen), read afresh.
func (p *procInfo) env() string {
	switch {
	case p.kthread:
		return ""
	case !p.markerRead:
		m, whole, denied := readMarker(p.pid)
		switch {
		case whole:
			p.marker, p.markerRead = m, true
		case p.hasPrev:
			p.marker, p.markerRead = p.prev, true
		case denied:
			p.marker, p.markerRead, p.denied = "", true, true
		default:
			p.marker = ""
		}
	}
	return p.marker
}

func (p procInfo) hasUID(uid uint32) bool {
	return p.uids[0] == uid || p.uids[1] == uid || p.uids[2] == uid
}

// readStatus parses /proc/<pid>/status.
func readStatus(pid int) (procInfo, error) {
	path := procPath(pid, "status")
	data, err := readProc(path)
	if err != nil {
		return procInfo{}, &fs.PathError{Op: "read", Path: path, Err: err}
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
		case "Kthread":
			p.kthread = first(v) == 1
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

// readMarker returns the value of pid's GPUQ_SANDBOX variable, and
// whether its environment was read and not empty, or the worker may not
// read it (denied: the process is another user's, or made itself
// non-dumpable, and so is every thread of it), which no later read of the
// same process changes but for an exec, the limit of what is kept (see
// the top of this file).
func readMarker(pid int) (marker string, whole, denied bool) {
	data, err := readProc(procPath(pid, "environ"))
	if err != nil || len(data) == 0 {
		// A process whose main thread has exited shows an empty
		// environment there, or denies it; a thread that still runs
		// shows it.
		denied = isDenied(err)
		tasks, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task") // exited: no tasks, no marker
		denied = denied && len(tasks) > 0
		for _, task := range tasks {
			d, err := readProc("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/environ")
			if err == nil && len(d) > 0 {
				data = d
				break
			}
			denied = denied && isDenied(err)
		}
	}
	if len(data) == 0 {
		return "", false, denied // exited, or not ours to read: not an attempt's process either way
	}
	for kv := range bytes.SplitSeq(data, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte(markerVar+"=")); ok {
			return string(v), true, false
		}
	}
	return "", true, false
}

// isDenied reports whether err is the system's refusal to let the worker
// read a process's memory.
func isDenied(err error) bool { return err == syscall.EACCES || err == syscall.EPERM }

// procPath is /proc/<pid>/<name>.
func procPath(pid int, name string) string {
	b := make([]byte, 0, 32)
	b = append(b, "/proc/"...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, '/')
	b = append(b, name...)
	return string(b)
}

// readProc reads a file of /proc with plain system calls: an os.File
// would add four calls (its non-blocking mode and the poller) to each of
// the sweep's reads, which a worker makes for every process new since
// its last sweep. The data is the caller's; errors are the system's
// (syscall.Errno, no path).
func readProc(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for err == syscall.EINTR {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, err
	}
	defer func() { _ = syscall.Close(fd) }() // read only
	buf := make([]byte, 4096)
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf))...)
		}
		m, err := syscall.Read(fd, buf[n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return nil, err
		case m == 0:
			return buf[:n], nil
		}
		n += m
	}
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
type matcher func(p *procInfo, procs map[int]procInfo) bool

// attemptMatcher matches j's processes (see the top of this file). leader
// is the attempt's first process; alive says it is not reaped yet, so its
// descendants can be told by ancestry.
func (s *sandbox) attemptMatcher(j *jail, leader int, alive bool) matcher {
	if j.pooled {
		return func(p *procInfo, _ map[int]procInfo) bool { return p.hasUID(j.uid) }
	}
	self := uint32(s.self)
	return func(p *procInfo, procs map[int]procInfo) bool {
		if !p.hasUID(self) {
			return false
		}
		if leader > 0 && (p.pgid == leader || p.sid == leader) {
			return true
		}
		if leader > 0 && alive && (p.pid == leader || descends(*p, leader, procs)) {
			return true
		}
		return p.env() == j.dir
	}
}

// leftoverMatcher matches the processes of attempts of an earlier life of
// this worker: every process of a pool uid, or without a pool, those of the
// worker's user marked with a directory of its job root.
func (s *sandbox) leftoverMatcher() matcher {
	if s.pooled() {
		return func(p *procInfo, _ map[int]procInfo) bool {
			return s.uids.contains(p.uids[0]) || s.uids.contains(p.uids[1]) || s.uids.contains(p.uids[2])
		}
	}
	self := uint32(s.self)
	return func(p *procInfo, _ map[int]procInfo) bool {
		return p.hasUID(self) && strings.HasPrefix(p.env(), s.root+string(os.PathSeparator))
	}
}

// seen is what findSeen read of each process, by pid. It is shared by the
// workers of the process: what it holds is the host's.
var seen = struct {
	sync.Mutex
	procs map[int]*seenProc
	buf   []byte // listProcs' buffer
	fd    int    // listProcs' /proc, open from the first listing on
	// What findProcs fills afresh at each call, kept to be cleared
	// rather than made: old is the last call's procs.
	old   map[int]*seenProc
	fresh map[int]bool
	infos map[int]procInfo
	// exited holds the leaders of attempts that have exited and are not
	// reaped yet (see noteExited): zombies whose pids no other process
	// can take, which every listing skips before reading them.
	exited map[int]bool
}{procs: map[int]*seenProc{}, fd: -1, old: map[int]*seenProc{}, fresh: map[int]bool{}, infos: map[int]procInfo{},
	exited: map[int]bool{}}

// noteExited tells the sweeps that pid, a child of the worker (an
// attempt's leader), has exited and stays a zombie until noteReaped: a
// zombie is never an attempt's live process, and until it is reaped its
// pid is no other process's, so every sweep, of any attempt, skips it
// unread (one read of its status each, by every sweep that found it new,
// was most of what the sweeps read while short jobs ran side by side).
func noteExited(pid int) {
	seen.Lock()
	defer seen.Unlock()
	seen.exited[pid] = true
}

// noteReaped ends what noteExited said, before pid is reaped: from then on
// another process may take it.
func noteReaped(pid int) {
	seen.Lock()
	defer seen.Unlock()
	delete(seen.exited, pid)
}

type seenProc struct {
	ino  uint64 // of /proc/<pid>
	info procInfo
}

// find lists the live processes match accepts, never the worker itself,
// reading every process afresh.
func find(match matcher) ([]procEntry, error) { return findProcs(match, true, IDRange{}, 0) }

// findSeen lists the live processes match accepts, never the worker
// itself, as find does, but reads a process only when it is new since the
// last read, what was read of it matches (see the top of this file), or it
// ran as a uid of pool: a job's process can exec a setuid copy of a shell
// another attempt's uid left and become that uid, and its /proc entry
// stays the same. A process exited, when not 0, is a child of the worker
// that has exited and is not reaped yet: it is neither read nor listed.
func findSeen(pool IDRange, exited int) func(matcher) ([]procEntry, error) {
	return func(match matcher) ([]procEntry, error) { return findProcs(match, false, pool, exited) }
}

// reread reads pid's status afresh, keeping the marker an earlier read of
// the same process found. With keepDenial, a denial is kept while the
// process has the uids it had when it was denied (see env); the full
// reads read a denied environment again.
func reread(pid int, old *seenProc, keepDenial bool) (procInfo, error) {
	p, err := readStatus(pid)
	switch {
	case err != nil || old == nil:
	case old.info.denied:
		if keepDenial && p.uids == old.info.uids {
			p.marker, p.markerRead, p.denied = "", true, true
		}
	case old.info.markerRead:
		p.prev, p.hasPrev = old.info.marker, true
	case old.info.hasPrev:
		p.prev, p.hasPrev = old.info.prev, true
	}
	return p, err
}

// findProcs lists the live processes match accepts, never the worker
// itself nor exited (see findSeen) nor another exited leader (see
// noteExited), reading every process (all) or only
// those new or matching, and keeps what it read in seen.
func findProcs(match matcher, all bool, pool IDRange, exited int) ([]procEntry, error) {
	self := selfPID
	seen.Lock()
	defer seen.Unlock()
	if seen.buf == nil {
		seen.buf = make([]byte, 32<<10)
	}
	ents, err := listProcs(&seen.fd, seen.buf)
	if err != nil {
		return nil, err
	}
	next, fresh := seen.old, seen.fresh
	clear(next)
	clear(fresh)
	for _, e := range ents {
		if e.pid == self || e.pid == exited || seen.exited[e.pid] {
			continue
		}
		c := seen.procs[e.pid]
		if c != nil && (c.ino != e.ino || e.ino <= 1) { // 1: /proc could not say
			c = nil // another process of the same pid
		}
		if all || c == nil || c.info.denied || slices.ContainsFunc(c.info.uids[:], pool.contains) {
			p, err := reread(e.pid, c, !all)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				continue // exited meanwhile
			}
			if err != nil {
				return nil, err
			}
			c = &seenProc{ino: e.ino, info: p}
			fresh[e.pid] = true
		}
		next[e.pid] = c
	}
	seen.procs, seen.old = next, seen.procs
	procs := seen.infos
	clear(procs)
	for pid, c := range next {
		procs[pid] = c.info
	}
	var out []procEntry
	for pid, c := range next {
		if c.info.zombie || !match(&c.info, procs) {
			continue
		}
		if !fresh[pid] {
			// What was read before matches: read it as it is now.
			p, err := reread(pid, c, !all)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
				delete(next, pid)
				continue
			}
			if err != nil {
				return nil, err
			}
			c.info = p
			if p.zombie || !match(&c.info, procs) {
				continue
			}
		}
		out = append(out, procEntry{pid: pid, ino: c.ino})
	}
	return out, nil
}

// selfPID is the worker's pid, which os.Getpid would ask the system for
// at each sweep.
var selfPID = os.Getpid()

// procEntry is one process in the listing of /proc.
type procEntry struct {
	pid int
	ino uint64
}

// listProcs lists /proc's process directories with their inode numbers,
// which getdents gives and os.ReadDir drops, reading into buf. It reads
// /proc through *fd, which it opens when it is -1 and keeps open for the
// next listing (each lists /proc afresh from its start): opening and
// closing it costs more system calls than the listing. seen.mu is held.
func listProcs(fd *int, buf []byte) ([]procEntry, error) {
	if *fd < 0 {
		f, err := syscall.Open("/proc", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("list processes: %w", err)
		}
		*fd = f
	} else if _, err := syscall.Seek(*fd, 0, io.SeekStart); err != nil {
		_ = syscall.Close(*fd) // opened afresh below
		*fd = -1
		return listProcs(fd, buf)
	}
	var out []procEntry
	for {
		n, err := syscall.Getdents(*fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			_ = syscall.Close(*fd) // the next listing opens it afresh
			*fd = -1
			return nil, fmt.Errorf("list processes: %w", err)
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen;
		// u8 d_type; char d_name[]; }
		for off := 0; off+19 <= n; {
			rec := buf[off:n]
			reclen := int(binary.NativeEndian.Uint16(rec[16:18]))
			if reclen < 19 || reclen > len(rec) {
				return nil, fmt.Errorf("list processes: a bad directory entry")
			}
			name := rec[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			off += reclen
			if pid := atoiPID(name); pid > 0 {
				out = append(out, procEntry{pid: pid, ino: binary.NativeEndian.Uint64(rec[0:8])})
			}
		}
	}
}

// atoiPID is the pid a /proc entry's name spells, or 0 for any other name.
func atoiPID(name []byte) int {
	if len(name) == 0 || len(name) > 10 {
		return 0
	}
	n := 0
	for _, c := range name {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// signal sends sig to every process match accepts now.
func signal(match matcher, sig syscall.Signal) error {
	procs, err := find(match)
	for _, e := range procs {
		kill(e, sig)
	}
	return err
}

// kill sends sig to the process listed as e, and to no other: not to one
// that took its pid since the listing. It opens e's /proc directory, which
// then stays that process's (a pidfd: the system signals through it the
// process it was opened on, or none once that one is gone), checks that it
// is the directory listed (its inode number; a process of the same pid
// made since has another), and signals through it. One that does not
// match is not signalled: the process listed is gone, or, if the system
// gave its directory a new inode, the sweep's next read finds it again.
// A system without pidfd_send_signal (Linux before 5.1) gets kill(2).
func kill(e procEntry, sig syscall.Signal) {
	fd, err := syscall.Open(procPath(e.pid, ""), syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return // gone already, which is the aim
	}
	defer func() { _ = syscall.Close(fd) }() // read only
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil || (e.ino > 1 && st.Ino != e.ino) {
		return
	}
	_, _, errno := syscall.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(fd), uintptr(sig), 0, 0, 0, 0)
	if errno == syscall.ENOSYS {
		_ = syscall.Kill(e.pid, sig) // ESRCH: gone already
	}
	// Any other error is ESRCH (gone already) or a process the worker
	// may not signal, which kill(2) would refuse too.
}

// sweep kills every process match accepts, listed by find, reading /proc
// again after each round (a process may fork while the round runs), and
// returns nil once a read finds none, or an error naming those that
// outlive two seconds of SIGKILLs (a process stuck in the kernel, which
// still holds its devices).
func sweep(what string, match matcher, find func(matcher) ([]procEntry, error)) error {
	deadline := time.Now().Add(2 * time.Second)
	delay := time.Millisecond
	for {
		procs, err := find(match)
		if err != nil {
			return err
		}
		if len(procs) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			pids := make([]int, len(procs))
			for i, e := range procs {
				pids[i] = e.pid
			}
			return fmt.Errorf("%d processes of %s survive SIGKILL: pids %v", len(pids), what, pids)
		}
		for _, e := range procs {
			kill(e, syscall.SIGKILL)
		}
		time.Sleep(delay) // give the kernel time to tear them down
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// signalAttempt sends sig to j's processes: those in its cgroup if it
// has one (see cgroup_linux.go), else those /proc shows to be its.
func (s *sandbox) signalAttempt(j *jail, leader int, alive bool, sig syscall.Signal) error {
	if j.cg != nil {
		return j.cg.signal(sig)
	}
	return signal(s.attemptMatcher(j, leader, alive), sig)
}

// sweepAttempt kills j's processes and reports whether any is left.
func (s *sandbox) sweepAttempt(j *jail, leader int, alive bool) error {
	if j.cg != nil {
		return j.cg.sweep("the attempt in " + j.dir)
	}
	exited := 0
	if !alive && waitsUnreaped {
		exited = leader // a zombie until the sweep is done (see process.wait)
	}
	return sweep("the attempt in "+j.dir, s.attemptMatcher(j, leader, alive), findSeen(s.uids, exited))
}

// sweepPoolUIDs kills every process of ids, pool uids whose attempts have
// ended, before they go back to the pool: with cgroups the attempts' own
// sweeps found their processes by cgroup, and a process that left the
// cgroup (see cgroup_linux.go) still has its attempt's uid. Without
// cgroups each attempt's sweep was by uid already.
func (s *sandbox) sweepPoolUIDs(ids []uint32) error {
	if s.cg == nil {
		return nil
	}
	return sweep(fmt.Sprintf("ended attempts' uids %v", ids), func(p *procInfo, _ map[int]procInfo) bool {
		return slices.ContainsFunc(p.uids[:], func(u uint32) bool { return slices.Contains(ids, u) })
	}, findSeen(s.uids, 0))
}

// reclaim kills what attempts of an earlier life of the worker left: in
// its cgroups, if it has them, and what /proc shows to be theirs (an
// earlier life may have run without cgroups).
func (s *sandbox) reclaim() error {
	if s.cg != nil {
		if err := s.cg.reclaim(); err != nil {
			return err
		}
	}
	what := "earlier attempts (job uids " + s.uids.String() + ")"
	if !s.pooled() {
		what = "earlier attempts in " + s.root
	}
	return sweep(what, s.leftoverMatcher(), find)
}

// poolSupported reports whether this system can run attempts under pool
// uids: Linux can, its sweep reads every process's uids from /proc.
const poolSupported = true

// clearXattrs removes the extended attributes a job may have set on its
// directory (user.*, and ACLs: system.posix_acl_*), keeping the security
// labels (security.*) the system set when it made the directory, and
// reports whether the directory is left with no others: false for any
// other name (trusted.*, which a job running as root can set) or a
// failure. A file system without extended attributes has none.
func clearXattrs(path string) bool {
	buf := make([]byte, 4096)
	n, err := syscall.Listxattr(path, buf)
	if errors.Is(err, syscall.ENOTSUP) {
		return true
	}
	if err != nil {
		return false
	}
	for name := range strings.SplitSeq(string(buf[:n]), "\x00") {
		switch {
		case name == "" || strings.HasPrefix(name, "security."):
		case strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "system.posix_acl_"):
			if syscall.Removexattr(path, name) != nil {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// freshen sets the directory open at fd to mode 0700 and lists what is
// in it, with plain system calls (os.ReadDir adds four per directory).
func freshen(fd int) ([]string, error) {
	if err := syscall.Fchmod(fd, 0o700); err != nil {
		return nil, err
	}
	buf := make([]byte, 8192)
	var names []string
	for {
		n, err := syscall.Getdents(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
	}
}

// sharedDirs are where every user may create files. A pool uid goes to
// another attempt, maybe another tenant's, once its attempt ends, so what
// the attempt left there is removed first: files for the next holder of the
// uid to read, and a setuid copy of a shell that would let a later attempt
// under another uid become this one.
var sharedDirs = []string{"/tmp", "/var/tmp", "/dev/shm"}

// passable reports whether one of uids (pool uids, whose gids are the same
// numbers and who have no other groups) may pass through dir, owned by someone
// else: by its mode bits, or by an access ACL, which may name the uid
// (another attempt's uid can grant it one on its own directory) and is
// then bounded by the group bits, its mask.
func passable(dir string, st *syscall.Stat_t, uids []uint32) bool {
	switch {
	case st.Mode&0o001 != 0:
		return true
	case st.Mode&0o010 == 0:
		return false
	case slices.Contains(uids, st.Gid):
		return true
	}
	_, err := syscall.Getxattr(dir, "system.posix_acl_access", nil)
	// No ACL reads as ENODATA; anything else (an ACL, or an error that
	// says nothing) is walked, as before.
	return !errors.Is(err, syscall.ENODATA)
}

// sharedWalk removes what pool uids left in the shared directories, and
// remembers what it saw of every directory it read, so that the next walk
// reads again only the directories that changed since: a walk reads a
// directory whose entries changed (its mtime or ctime moved: an entry was
// made, removed or renamed, or its mode changed), or that holds an entry of
// a uid being cleaned, and only lstats the subdirectories of the others.
// Shared directories hold what every program on the host leaves there (a
// Go module cache alone is 100,000 files); reading all of it for every
// batch of uids made the walk most of a worker's CPU. Used by one goroutine
// at a time (the cleaner).
type sharedWalk struct {
	seen map[string]*dirSeen
	// window is racyWindow unless a test sets it.
	window time.Duration
}

// dirSeen is what a walk found in one directory.
type dirSeen struct {
	ino          uint64
	mtime, ctime syscall.Timespec
	// racy: the directory changed so shortly before it was read that a
	// change right after could keep the same times (they are coarse); it
	// is read again next time.
	racy    bool
	subdirs []string // the names of its subdirectories
	owners  []uint32 // pool uids that own entries in it, left by the walk
}

// racyWindow is how recent a directory's change must be for its times not
// to vouch for its entries.
const racyWindow = 2 * time.Second

// remove removes every file and directory owned by one of uids under
// roots, not looking into skip (the job root, whose attempt directories
// are handled on their own) or into directories none of uids could pass
// through, unless pool (the whole pool, uids among it) owns them: a pool
// uid can open its own directory to the others, let them write in it, and
// close it again before their walk. Symbolic links are removed, never
// followed. It reads only the directories that changed since w's last
// walk, or that held an entry of uids then.
//
// It returns the uids it could not clean (in the order given) and why,
// nil and nil when it cleaned them all: a uid whose entry could not be
// removed, and every uid that owns something left under that entry (a pool
// uid can write in another's directory); every uid when what failed says
// nothing of whose files are where (a directory or an entry that could not
// be read). Only those stay out of the pool; the others are clean.
func (w *sharedWalk) remove(uids []uint32, pool IDRange, roots []string, skip string) (failed []uint32, err error) {
	next := map[string]*dirSeen{}
	var errs []error
	// all: a failure no uid can be told from; some: the uids whose
	// entries are left.
	all := false
	some := map[uint32]bool{}
	unknown := func(err error) {
		errs = append(errs, err)
		all = true
	}
	now := time.Now()
	window := cmp.Or(w.window, racyWindow)
	var visit func(dir string, st *syscall.Stat_t)
	// enter visits dir, found with st, if one of uids could have made
	// something in it.
	enter := func(dir string, st *syscall.Stat_t) {
		if dir == skip {
			return
		}
		if !slices.Contains(uids, st.Uid) && !pool.contains(st.Uid) && !passable(dir, st, uids) {
			// Nothing under it can be theirs: they could not reach it to
			// make anything. Much of what other software keeps in /tmp
			// is such (0700 build and cache directories).
			return
		}
		visit(dir, st)
	}
	visit = func(dir string, st *syscall.Stat_t) {
		if old := w.seen[dir]; old != nil && !old.racy && old.ino == st.Ino && old.mtime == st.Mtim && old.ctime == st.Ctim &&
			!slices.ContainsFunc(old.owners, func(u uint32) bool { return slices.Contains(uids, u) }) {
			// No entry made, removed or renamed since, and none of
			// uids's was in it: only its subdirectories can hold
			// anything new.
			next[dir] = old
			for _, name := range old.subdirs {
				sub := filepath.Join(dir, name)
				var sst syscall.Stat_t
				if err := syscall.Lstat(sub, &sst); err != nil {
					if !errors.Is(err, syscall.ENOENT) {
						unknown(&fs.PathError{Op: "lstat", Path: sub, Err: err})
					}
					continue
				}
				if sst.Mode&syscall.S_IFMT == syscall.S_IFDIR {
					enter(sub, &sst)
				}
			}
			return
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				unknown(err)
			}
			return // not remembered: read again next time
		}
		seen := &dirSeen{ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim,
			racy: now.Sub(time.Unix(st.Mtim.Unix())) < window || now.Sub(time.Unix(st.Ctim.Unix())) < window}
		for _, e := range ents {
			path := filepath.Join(dir, e.Name())
			if path == skip {
				continue
			}
			var est syscall.Stat_t
			if err := syscall.Lstat(path, &est); err != nil {
				if !errors.Is(err, syscall.ENOENT) {
					unknown(&fs.PathError{Op: "lstat", Path: path, Err: err})
					seen.racy = true // what it holds is unknown: read it again next time
				}
				continue
			}
			if slices.Contains(uids, est.Uid) {
				if err := os.RemoveAll(path); err != nil {
					errs = append(errs, err)
					some[est.Uid] = true
					if !ownersLeft(path, uids, some) {
						all = true
					}
					seen.owners = append(seen.owners, est.Uid) // looked at again next time
				}
				continue
			}
			if pool.contains(est.Uid) && !slices.Contains(seen.owners, est.Uid) {
				seen.owners = append(seen.owners, est.Uid)
			}
			if est.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				seen.subdirs = append(seen.subdirs, e.Name())
				enter(path, &est)
			}
		}
		next[dir] = seen
	}
	for _, root := range roots {
		var st syscall.Stat_t
		if err := syscall.Lstat(root, &st); err != nil {
			if !errors.Is(err, syscall.ENOENT) {
				unknown(&fs.PathError{Op: "lstat", Path: root, Err: err})
			}
			continue // no such shared directory here
		}
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			visit(root, &st)
		}
	}
	w.seen = next
	if len(errs) == 0 {
		return nil, nil
	}
	for _, u := range uids {
		if all || some[u] {
			failed = append(failed, u)
		}
	}
	return failed, fmt.Errorf("remove what uids %v left in %v: %w", failed, roots, errors.Join(errs...))
}

// ownersLeft adds to some each of uids that owns something left at or under
// path, whose removal failed, and reports whether it could look at all of
// it: false when something there could not be read, whose owner is then
// unknown.
func ownersLeft(path string, uids []uint32, some map[uint32]bool) bool {
	whole := true
	err := filepath.WalkDir(path, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				whole = false
			}
			return nil // what is not there was removed
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			if !errors.Is(err, syscall.ENOENT) {
				whole = false
			}
			return nil
		}
		if slices.Contains(uids, st.Uid) {
			some[st.Uid] = true
		}
		return nil
	})
	return whole && err == nil
}
