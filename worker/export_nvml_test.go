//go:build nvml && cgo

package worker

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// RunAttemptProcess runs s's command as the worker runs an attempt's, with
// the environment childEnv gives it, in its own process group and a
// directory of its own (a sandbox under a temporary job root, no uid
// pool), waits for it to end, then sweeps what it left and reaps it. s.Dir
// is the attempt's directory when empty.
func RunAttemptProcess(s Spec, stdout, stderr io.Writer) (Outcome, error) {
	root, err := os.MkdirTemp("", "gpuq-nvml-attempt-")
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(root)
	sb, err := newSandbox(&Config{Host: "nvml-test", StateDir: filepath.Join(root, "state"), JobRoot: filepath.Join(root, "jobs")})
	if err != nil {
		return Outcome{}, err
	}
	j, err := sb.prepare(s.Attempt)
	if err != nil {
		return Outcome{}, err
	}
	if s.Dir == "" {
		s.Dir = j.dir
	}
	gos := newGoPool()
	defer gos.close() // after wait: the output copiers have ended
	p, err := startProcess(sb, gos, j, s, stdout, stderr, time.Second, slog.New(slog.DiscardHandler))
	if err != nil {
		return Outcome{}, err
	}
	o := p.wait(s.Walltime)
	err = p.sweep()
	p.reap()
	if rerr := sb.release(j); err == nil {
		err = rerr
	}
	return o, err
}
