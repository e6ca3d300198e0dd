//go:build unix && !linux

package worker

import (
	"os"
	"syscall"
)

// sysProcAttr starts a child in its own process group, so a stop reaches
// everything it started. Outside Linux a child outlives a crashed worker,
// and jobs run as the worker's user (no pool).
func sysProcAttr(*jail) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// datasync flushes f to disk.
func datasync(f *os.File) error { return f.Sync() }

// outputPipe makes one of an attempt's output pipes.
func outputPipe() (r, w *os.File, err error) { return os.Pipe() }

// waitsUnreaped says that wait reaps the leader when it exits: waitExit
// is Linux's.
const waitsUnreaped = false

// waitExit waits for nothing outside Linux: wait reaps the leader.
func waitExit(int) (int, bool) { return 0, false }
