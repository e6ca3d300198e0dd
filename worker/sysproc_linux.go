//go:build linux

package worker

import (
	"os"
	"syscall"
)

// sysProcAttr starts a child in its own process group, so a stop reaches
// everything it started, has the kernel kill it if the worker dies, and,
// with a pool, runs it as its attempt's user and group with no
// supplementary groups. (Go sets the death signal after the ids change,
// which would otherwise clear it.)
func sysProcAttr(j *jail) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if j != nil && j.pooled {
		a.Credential = &syscall.Credential{Uid: j.uid, Gid: j.uid, Groups: []uint32{}}
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
