//go:build nvml && cgo

package worker

import (
	"io"
	"time"
)

// RunAttemptProcess runs s's command as the worker runs an attempt's, with
// the environment childEnv gives it, in its own process group, and waits
// for it to end.
func RunAttemptProcess(s Spec, stdout, stderr io.Writer) (Outcome, error) {
	p, err := startProcess(s, stdout, stderr, time.Second)
	if err != nil {
		return Outcome{}, err
	}
	return p.wait(s.Walltime), nil
}
