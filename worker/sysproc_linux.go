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
