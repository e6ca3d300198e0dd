//go:build linux

package worker

import (
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysProcAttr starts a child in its own process group, so a stop reaches
// everything it started, has the kernel kill it if the worker dies, and,
// with a pool, runs it as its attempt's user and group with no
// supplementary groups. (Go sets the death signal after the ids change,
// which would otherwise clear it.) With a cgroup the child is made in it
// (clone3's CLONE_INTO_CGROUP).
func sysProcAttr(j *jail) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if j != nil && j.pooled {
		a.Credential = &syscall.Credential{Uid: j.uid, Gid: j.uid, Groups: []uint32{}}
	}
	if j != nil && j.cg != nil {
		a.UseCgroupFD, a.CgroupFD = true, j.cg.dir
	}
	return a
}

// datasync flushes f's data, and what of its metadata reading it back
// needs (its size), to disk.
func datasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// outputPipe makes one of an attempt's output pipes: its read end for the
// worker's poller, its write end blocking, as a program expects its
// stdout to be. It takes five system calls where os.Pipe, with the
// blocking mode os/exec then sets on the child's end and the poller's
// removal when it closes it, takes ten.
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(p[1]), syscall.F_SETFL, 0); e != 0 {
		_, _ = syscall.Close(p[0]), syscall.Close(p[1]) // unused
		return nil, nil, os.NewSyscallError("fcntl", e)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// waitsUnreaped says that wait leaves an exited leader unreaped (see
// waitExit).
const waitsUnreaped = true

// waitExit waits for the process pid, a child, to exit, and returns its
// exit code (128+signal when a signal killed it), leaving it a zombie
// (waitid with WNOWAIT): until it is reaped, no other process can take its
// pid or its process group's number. It reports false, having waited for
// nothing, if the system refuses.
func waitExit(pid int) (int, bool) {
	var info unix.Siginfo // si_code where this architecture puts it (mips swaps it with si_errno)
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, false
		}
		break
	}
	// The union after si_signo, si_errno and si_code is aligned to a
	// pointer on every architecture; a child's exit there is si_pid,
	// si_uid, then si_status.
	union := 3 * 4
	if unsafe.Sizeof(uintptr(0)) == 8 {
		union = 16
	}
	status := int(*(*int32)(unsafe.Add(unsafe.Pointer(&info), union+8)))
	switch info.Code {
	case cldExited:
		return status, true
	case cldKilled, cldDumped:
		return 128 + status, true
	}
	return 0, false
}

// From <signal.h>.
const (
	cldExited = 1 // CLD_EXITED
	cldKilled = 2 // CLD_KILLED
	cldDumped = 3 // CLD_DUMPED
)
