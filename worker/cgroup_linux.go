//go:build linux

package worker

import (
	"bytes"
	"errors"
	"fmt"
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

// With Config.Cgroup each attempt runs in a cgroup (v2) of its own, below
// a directory given to the worker. The kernel creates the attempt's first
// process in it (clone3 with CLONE_INTO_CGROUP: it is never anywhere
// else), and every process it starts is born there and stays there,
// whatever it does to its session, process group, environment or parent;
// leaving takes write access to the files of another cgroup, which the
// worker owns (an attempt's pool uid has none). So the sweep at an
// attempt's end is complete, and costs the same on a busy host as on an
// idle one: one read of cgroup.events ("populated 0" once the attempt has
// no process left, zombies included) instead of a listing of /proc and a
// read of every process new since the last sweep, and one write of
// cgroup.kill to kill whatever is there.
//
// What the cgroups do not stop: a job that runs as the worker's own user
// (no uid pool) can write the worker's cgroup files, and so move its
// processes into another cgroup of the worker's, or out of the tree, and
// outlive its attempt; a setuid-root program of the host, started by a
// job, could too, as root. The worker says so at start. With a uid pool,
// what left the cgroup still has the attempt's uid: before the uid goes
// back to the pool, the cleaner kills every process of it, found through
// /proc as without cgroups (see sweepPoolUIDs), once for all the ids
// released meanwhile. Such a process may hold its attempt's GPUs until
// then.
//
// The cgroups are named a1, a2, … and kept for later attempts once empty
// (making and removing one costs some 20µs, reading its events 1µs); the
// worker removes every cgroup below its directory at start, killing what
// an earlier life left in them, and its spares when it stops.

// OwnCgroup is the directory of this process's cgroup v2, where its
// cgroup v2 file system is mounted: under systemd, the service's cgroup,
// which Delegate=yes gives the service to make cgroups below. It fails
// where the process has no cgroup v2 or it is not mounted.
func OwnCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("worker: own cgroup: %w", err)
	}
	own := ""
	for line := range strings.SplitSeq(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			own = p
		}
	}
	if own == "" {
		return "", errors.New("worker: own cgroup: this process has no cgroup v2 (no 0:: line in /proc/self/cgroup)")
	}
	data, err = os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("worker: own cgroup: %w", err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		// id parent major:minor root mountpoint options… - type source
		// options. A mount of the whole file system (root /) is one the
		// cgroup's path is below; mount points with spaces are escaped
		// (\040), which cgroup mounts never need.
		f := strings.Fields(line)
		if i := slices.Index(f, "-"); i > 4 && i+1 < len(f) && f[i+1] == "cgroup2" && f[3] == "/" {
			return filepath.Join(f[4], own), nil
		}
	}
	return "", errors.New("worker: own cgroup: no cgroup v2 file system is mounted")
}

// cgroup2Magic is CGROUP2_SUPER_MAGIC, statfs's f_type of a cgroup v2
// file system.
const cgroup2Magic = 0x63677270

// cgroupTree is the worker's cgroup directory and the empty cgroups it
// keeps below it. It is safe for concurrent use.
type cgroupTree struct {
	root string

	mu    sync.Mutex
	spare []*cgroup
	next  int // names the next cgroup made: a<next>
}

// cgroup is one attempt's cgroup, open.
type cgroup struct {
	path   string
	dir    int // the directory, O_RDONLY: what clone3 is given
	events int // its cgroup.events
}

// CheckCgroup checks dir as Config.Cgroup (see openCgroups), so a command
// can refuse a bad one before it connects; New checks it again.
func CheckCgroup(dir string) error {
	t, err := openCgroups(dir)
	if err != nil {
		return err
	}
	return t.close() // it has no spares yet
}

// openCgroups checks that dir (made if missing) is a directory of a cgroup
// v2 file system the worker can make cgroups in, with cgroup.kill (Linux
// 5.14), and start a process in one of them (clone3, which a container's
// system call filter may refuse). Every error says what to change.
func openCgroups(dir string) (*cgroupTree, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%q must be an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	// The file system is that of dir or, if it is missing, of the
	// directory above it that exists: nothing is made outside a cgroup
	// file system.
	at := dir
	for {
		if _, err := os.Stat(at); err == nil || !errors.Is(err, fs.ErrNotExist) || at == "/" {
			break
		}
		at = filepath.Dir(at)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(at, &st); err != nil {
		return nil, &fs.PathError{Op: "statfs", Path: at, Err: err}
	}
	if st.Type != cgroup2Magic {
		return nil, fmt.Errorf("%s is not in a cgroup v2 file system (mounted at /sys/fs/cgroup, "+
			"or /sys/fs/cgroup/unified on a system of both versions); leave it out to find attempts through /proc", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	t := &cgroupTree{root: dir}
	probe := filepath.Join(dir, "probe."+strconv.Itoa(os.Getpid()))
	_ = removeCgroup(probe) // one an earlier life of the same pid left: never had a process
	g, err := openCgroup(probe, true)
	if err != nil {
		return nil, err
	}
	defer func() { _ = g.remove() }() // empty: its one process never ran
	if _, err := os.Stat(filepath.Join(probe, "cgroup.kill")); err != nil {
		return nil, fmt.Errorf("this kernel has no cgroup.kill (Linux 5.14 or later has): %w", err)
	}
	// A program that does not exist: the child is made in the cgroup,
	// its exec fails, and it exits before it runs anything.
	_, err = os.StartProcess("/nonexistent/gpuq-cgroup-probe", []string{"gpuq-cgroup-probe"},
		&os.ProcAttr{Sys: &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.dir}})
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("cannot start a process in a cgroup of %s (clone3 with CLONE_INTO_CGROUP, "+
			"Linux 5.7 or later, which a container's system call filter may refuse): %v", dir, err)
	}
	return t, nil
}

// openCgroup opens the cgroup at path, making it first if mk.
func openCgroup(path string, mk bool) (*cgroup, error) {
	if mk {
		if err := unix.Mkdir(path, 0o755); err != nil {
			return nil, &fs.PathError{Op: "make the cgroup", Path: path, Err: err}
		}
	}
	dir, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open the cgroup", Path: path, Err: err}
	}
	events, err := unix.Openat(dir, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Close(dir) // unused
		return nil, &fs.PathError{Op: "open", Path: path + "/cgroup.events", Err: err}
	}
	return &cgroup{path: path, dir: dir, events: events}, nil
}

// take hands out an empty cgroup: a spare that still reads empty (one
// removed or filled meanwhile is dropped), or a new one.
func (t *cgroupTree) take() (*cgroup, error) {
	t.mu.Lock()
	for n := len(t.spare); n > 0; n = len(t.spare) {
		g := t.spare[n-1]
		t.spare = t.spare[:n-1]
		t.mu.Unlock()
		if live, err := g.populated(); err == nil && !live {
			return g, nil
		}
		_ = g.remove() // gone already, or not ours to start in; the next reclaim kills what is there
		t.mu.Lock()
	}
	t.next++
	name := "a" + strconv.Itoa(t.next)
	t.mu.Unlock()
	g, err := openCgroup(filepath.Join(t.root, name), true)
	if err != nil {
		return nil, fmt.Errorf("attempt cgroup: %w", err)
	}
	return g, nil
}

// give takes back g, which no process is left in (see sweep), to hand out
// again (take reads it once more first: something may remove it, or put a
// process in it, meanwhile; a job of the worker's own user can), or
// removes it when there are spares enough.
func (t *cgroupTree) give(g *cgroup) error {
	t.mu.Lock()
	if len(t.spare) < maxSpare {
		t.spare = append(t.spare, g)
		t.mu.Unlock()
		return nil
	}
	t.mu.Unlock()
	return g.remove()
}

// close removes the spares when the worker stops.
func (t *cgroupTree) close() error {
	t.mu.Lock()
	spare := t.spare
	t.spare = nil
	t.mu.Unlock()
	var errs []error
	for _, g := range spare {
		errs = append(errs, g.remove())
	}
	return errors.Join(errs...)
}

// reclaim kills every process in the cgroups below the root, which an
// earlier life of the worker left, and removes those cgroups; it returns
// an error naming what survives SIGKILL.
func (t *cgroupTree) reclaim() error {
	ents, err := os.ReadDir(t.root)
	if err != nil {
		return fmt.Errorf("read the cgroups of earlier attempts: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(t.root, e.Name())
		g, err := openCgroup(path, false)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		err = g.sweep("an earlier attempt in cgroup " + path)
		if err == nil {
			err = g.remove()
		} else {
			_ = g.closeFiles() // kept: its processes live on, and the next reclaim tries again
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// errCgroupGone reports a cgroup removed while it was open: it had no
// process (only an empty cgroup can be removed), and has none.
var errCgroupGone = errors.New("the cgroup was removed")

// populated reports whether any process is in g or a cgroup below it.
func (g *cgroup) populated() (bool, error) {
	var buf [256]byte
	n, err := unix.Pread(g.events, buf[:], 0)
	for err == unix.EINTR {
		n, err = unix.Pread(g.events, buf[:], 0)
	}
	if err == unix.ENODEV {
		return false, fmt.Errorf("%s: %w", g.path, errCgroupGone)
	}
	if err != nil {
		return false, &fs.PathError{Op: "read", Path: g.path + "/cgroup.events", Err: err}
	}
	for line := range bytes.SplitSeq(buf[:n], []byte{'\n'}) {
		if v, ok := bytes.CutPrefix(line, []byte("populated ")); ok {
			return string(v) != "0", nil
		}
	}
	return false, fmt.Errorf("%s/cgroup.events says nothing of populated: %q", g.path, buf[:n])
}

// kill has the kernel SIGKILL every process in g and the cgroups below it,
// those it forks meanwhile included (but see sweep).
func (g *cgroup) kill() error {
	fd, err := unix.Openat(g.dir, "cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: g.path + "/cgroup.kill", Err: err}
	}
	defer func() { _ = unix.Close(fd) }() // the write is what counts
	if _, err := unix.Write(fd, []byte("1")); err != nil {
		return &fs.PathError{Op: "write", Path: g.path + "/cgroup.kill", Err: err}
	}
	return nil
}

// sweep kills every process in g until none is left, as the /proc sweep
// does (see sweep in sandbox_linux.go): nil once g is empty, or an error
// naming the processes that outlive two seconds of SIGKILLs.
func (g *cgroup) sweep(what string) error {
	deadline := time.Now().Add(2 * time.Second)
	delay := time.Millisecond
	for {
		live, err := g.populated()
		if errors.Is(err, errCgroupGone) {
			return nil // nothing can be in it
		}
		if err != nil || !live {
			return err
		}
		if time.Now().After(deadline) {
			pids, err := g.pids()
			return errors.Join(fmt.Errorf("processes of %s survive SIGKILL: pids %v", what, pids), err)
		}
		if err := g.kill(); err != nil {
			return err
		}
		// cgroup.kill signals each process's first thread (Linux 6.18
		// at least): one whose first thread has exited while others
		// run is left running. A signal to the process reaches them.
		if err := g.signal(syscall.SIGKILL); err != nil {
			return err
		}
		time.Sleep(delay) // give the kernel time to tear them down
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// pids lists the processes in g and the cgroups below it.
func (g *cgroup) pids() ([]int, error) {
	var out []int
	err := filepath.WalkDir(g.path, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed meanwhile: nothing in it
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		for f := range strings.FieldsSeq(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out, err
}

// signal sends sig to every process in g and the cgroups below it, and to
// no other: a pid listed is opened (a pidfd, which stays that process's)
// and signalled only if a listing made after it was opened still has it,
// so one that exited and whose pid another process took meanwhile is
// left alone.
func (g *cgroup) signal(sig syscall.Signal) error {
	before, err := g.pids()
	if err != nil {
		return err
	}
	fds := make(map[int]int, len(before))
	defer func() {
		for _, fd := range fds {
			_ = unix.Close(fd) // a pidfd
		}
	}()
	for _, pid := range before {
		if _, ok := fds[pid]; ok {
			continue // listed twice (the kernel may, for a process that moved)
		}
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
		}
	}
	after, err := g.pids()
	if err != nil {
		return err
	}
	still := make(map[int]bool, len(after))
	for _, pid := range after {
		still[pid] = true
	}
	for pid, fd := range fds {
		if still[pid] {
			_ = unix.PidfdSendSignal(fd, sig, nil, 0) // ESRCH: gone already, which is the aim
		}
	}
	return nil
}

// closeFiles closes what g holds open.
func (g *cgroup) closeFiles() error {
	return errors.Join(unix.Close(g.events), unix.Close(g.dir))
}

// remove closes g and removes it, and any cgroup a job made below it.
func (g *cgroup) remove() error {
	return errors.Join(g.closeFiles(), removeCgroup(g.path))
}

// removeCgroup removes the empty cgroup at path and every cgroup below
// it; a cgroup's files go with it.
func removeCgroup(path string) error {
	err := unix.Rmdir(path)
	if err == unix.EBUSY || err == unix.ENOTEMPTY {
		ents, rerr := os.ReadDir(path)
		if rerr != nil {
			return rerr
		}
		for _, e := range ents {
			if e.IsDir() {
				if err := removeCgroup(filepath.Join(path, e.Name())); err != nil {
					return err
				}
			}
		}
		err = unix.Rmdir(path)
	}
	if err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "remove the cgroup", Path: path, Err: err}
	}
	return nil
}
