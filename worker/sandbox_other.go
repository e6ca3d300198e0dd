//go:build unix && !linux

package worker

import (
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Outside Linux there is no /proc to sweep: an attempt's processes are its
// process group, which a process leaves with setsid or setpgid, and a job
// uid pool is not supported. The worker is not made non-dumpable.

func hideWorker() error { return nil }

// Pools are refused outside Linux, so no uid leaves files to remove.
var sharedDirs []string

// sharedWalk has nothing to walk outside Linux.
type sharedWalk struct{}

func (*sharedWalk) remove([]uint32, IDRange, []string, string) ([]uint32, error) { return nil, nil }

// clearXattrs does not know this system's extended attributes: an
// attempt's directory is removed, not kept as a spare.
func clearXattrs(string) bool { return false }

// freshen is never needed: clearXattrs keeps every directory from being
// recycled.
func freshen(int) ([]string, error) { return nil, errors.ErrUnsupported }

// signalAttempt sends sig to the attempt's process group.
func (s *sandbox) signalAttempt(_ *jail, leader int, _ bool, sig syscall.Signal) error {
	if err := syscall.Kill(-leader, sig); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}

// sweepAttempt kills the attempt's process group until it is empty.
func (s *sandbox) sweepAttempt(j *jail, leader int, _ bool) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		if err := syscall.Kill(-leader, syscall.SIGKILL); err == syscall.ESRCH {
			return nil
		} else if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the process group of the attempt in %s survives SIGKILL", j.dir)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// noteExited and noteReaped have no sweep to tell: waitExit never leaves
// a leader unreaped outside Linux.
func noteExited(int) {}
func noteReaped(int) {}

// sweepPoolUIDs has no pool to sweep: pools are refused outside Linux.
func (s *sandbox) sweepPoolUIDs([]uint32) error { return nil }

// reclaim has nothing to find: a process group does not outlive its
// worker's knowledge of it.
func (s *sandbox) reclaim() error { return nil }

const poolSupported = false
