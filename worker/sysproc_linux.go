//go:build linux

package worker

import "syscall"

// sysProcAttr starts a child in its own process group, so a stop reaches
// everything it started, and has the kernel kill it if the worker dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
