//go:build unix && !linux

package worker

import "syscall"

// sysProcAttr starts a child in its own process group, so a stop reaches
// everything it started. Outside Linux a child outlives a crashed worker.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
