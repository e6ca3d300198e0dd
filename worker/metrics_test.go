package worker

import (
	"log/slog"
	"sync"
	"testing"
	"time"
)

// TestAttemptEnd: how an attempt ended, as the worker's metrics label it.
func TestAttemptEnd(t *testing.T) {
	for _, tc := range []struct {
		o       Outcome
		started bool
		want    AttemptEnd
	}{
		{Outcome{ExitCode: 0}, true, EndSucceeded},
		{Outcome{ExitCode: 1}, true, EndFailed},
		{Outcome{ExitCode: 137, Stopped: "walltime"}, true, EndFailed},
		{Outcome{ExitCode: 143, Stopped: "the worker drained past its timeout", Infra: true}, true, EndInfra},
		{Outcome{ExitCode: 127}, false, EndNotRun},
	} {
		if got := attemptEnd(tc.o, tc.started); got != tc.want {
			t.Errorf("attemptEnd(%+v, %v) = %q, want %q", tc.o, tc.started, got, tc.want)
		}
	}
}

// outputCounts is a Metrics that counts output bytes sent and dropped.
type outputCounts struct {
	nopMetrics
	mu      sync.Mutex
	sent    int
	dropped map[OutputDrop]int
}

func (c *outputCounts) OutputSent(n int) { c.mu.Lock(); c.sent += n; c.mu.Unlock() }
func (c *outputCounts) OutputDropped(why OutputDrop, n int) {
	c.mu.Lock()
	c.dropped[why] += n
	c.mu.Unlock()
}

// TestOutputMetrics: output past MaxLogBytes is counted dropped as
// truncated, and every chunk stored (the end marker's line too) is counted
// sent, byte for byte.
func TestOutputMetrics(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	m := &outputCounts{dropped: map[OutputDrop]int{}}
	w := &Worker{cfg: Config{Host: "h1", Bus: bus, LogFlush: time.Hour, LogChunkBytes: 4, MaxLogBytes: 10, Metrics: m},
		log: log, output: newOutage(log, "output down", "output up")}
	o := newOutput(t.Context(), w, Attempt{Job: "j", N: 1}, "acct")
	for _, s := range []string{"0123456", "789abc", "def"} {
		if _, err := o.stdout.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	o.close(Outcome{})
	_, chunks := bus.recorded()
	stored := 0
	for _, c := range chunks {
		stored += len(c.Data)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sent != stored {
		t.Errorf("counted %d bytes sent, the bus stored %d", m.sent, stored)
	}
	if got := m.dropped[DropTruncated]; got != 16-10 {
		t.Errorf("counted %d bytes truncated, want 6 (16 written, 10 kept)", got)
	}
	if got := m.dropped[DropUnstored]; got != 0 {
		t.Errorf("counted %d bytes unstored, want 0", got)
	}
}
