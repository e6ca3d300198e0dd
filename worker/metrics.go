package worker

import (
	"time"

	"github.com/gpuq/gpuq/wire"
)

// Metrics receives what a [Worker] measures, for an exporter such as
// internal/metrics. The worker calls it from several goroutines (the
// heartbeat, each attempt's, the output flushers), so an implementation must
// be safe for concurrent use, and each call must return at once. A nil
// Config.Metrics measures nothing.
type Metrics interface {
	// Opened reports the GPUs read at start: NVML, or go-nvml's mock
	// devices when simulated.
	Opened(simulated bool, devices int)
	// Beat reports a heartbeat the worker tried to write: h, and the error
	// writing it (nil when it was stored).
	Beat(h wire.Heartbeat, err error)
	// AttemptStarted reports an attempt whose started report was stored:
	// it runs now.
	AttemptStarted()
	// AttemptEnded reports an attempt's end, how it ended and how long it
	// ran (wall time, from start to exit).
	AttemptEnded(end AttemptEnd, runtime time.Duration)
	// OutputSent reports bytes of job output stored.
	OutputSent(bytes int)
	// OutputDropped reports bytes of job output dropped, and why.
	OutputDropped(why OutputDrop, bytes int)
}

// AttemptEnd is how an attempt ended, as the worker saw it.
type AttemptEnd string

// Attempt ends.
const (
	EndSucceeded AttemptEnd = "succeeded" // exit status 0
	EndFailed    AttemptEnd = "failed"    // a non-zero exit status, or stopped for its walltime or a cancel
	EndInfra     AttemptEnd = "infra"     // stopped by the infrastructure: to be retried, not charged
	EndNotRun    AttemptEnd = "not_run"   // the command could not be started
)

// OutputDrop is why job output was dropped.
type OutputDrop string

// Reasons output is dropped.
const (
	DropTruncated OutputDrop = "truncated" // past the attempt's MaxLogBytes
	DropUnstored  OutputDrop = "unstored"  // the server did not store the chunk
)

// attemptEnd classifies an outcome; started is false when the command never
// started.
func attemptEnd(o Outcome, started bool) AttemptEnd {
	switch {
	case !started:
		return EndNotRun
	case o.Infra:
		return EndInfra
	case o.ExitCode == 0:
		return EndSucceeded
	}
	return EndFailed
}

// metrics returns Config.Metrics, or one that measures nothing.
func (w *Worker) metrics() Metrics {
	if w.cfg.Metrics == nil {
		return nopMetrics{}
	}
	return w.cfg.Metrics
}

// nopMetrics measures nothing.
type nopMetrics struct{}

func (nopMetrics) Opened(bool, int)                       {}
func (nopMetrics) Beat(wire.Heartbeat, error)             {}
func (nopMetrics) AttemptStarted()                        {}
func (nopMetrics) AttemptEnded(AttemptEnd, time.Duration) {}
func (nopMetrics) OutputSent(int)                         {}
func (nopMetrics) OutputDropped(OutputDrop, int)          {}
