package scheduler_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

// TestExplain crafts each situation that holds a job back and checks that
// Explain names it, and that it names all of them at once.
func TestExplain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.submit("a", "j", 2, 0)
	kinds := func(hosts []wire.Host) map[string]string {
		t.Helper()
		bs, err := scheduler.Explain(h.l.State, hosts, "j", h.l.Now, scheduler.CoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, b := range bs {
			out[b.Kind] = b.Message
		}
		return out
	}
	if got := kinds(nil); len(got) != 1 || got["no_hosts"] == "" {
		t.Errorf("no hosts: %v", got)
	}
	one := wire.Host{Host: "h", Devices: []wire.Device{{UUID: "g0", Healthy: true}}}
	if got := kinds([]wire.Host{one}); !strings.Contains(got["too_wide"], "needs 2 GPUs; the largest live host has 1") {
		t.Errorf("too wide: %v", got)
	}
	// A worker refused the first attempt: the job waits out its retry
	// delay, behind an older job, on a host with no room, capped too.
	two := wire.Host{Host: "h", Devices: []wire.Device{{UUID: "g0", Healthy: true}, {UUID: "g1", Healthy: true}}}
	h.host("h", 2)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 1, Reason: "GPU busy"})
	h.submit("a", "older", 2, 5)
	h.decide() // older takes both GPUs
	h.apply(ledger.Admin{Account: "a", ID: "cap", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 1, MaxRunningGPUs: 3}})
	h.submit("a", "vip", 1, 9)
	got := kinds([]wire.Host{two})
	for kind, says := range map[string]string{
		"backoff":          "attempt 2 waits out its retry delay",
		"max_running_jobs": "already runs 1 jobs",
		"max_running_gpus": "2 more would pass its cap of 3",
		"no_free_gpus":     "no host has a free GPU now",
		"queue":            "1 jobs are ahead of it in the queue: 1 of higher priority",
	} {
		if !strings.Contains(got[kind], says) {
			t.Errorf("%s = %q, want %q (all: %v)", kind, got[kind], says, got)
		}
	}
	h.l.Advance(time.Hour)
	if _, ok := kinds([]wire.Host{two})["backoff"]; ok {
		t.Error("the retry delay is still reported after it ended")
	}
	if _, err := scheduler.Explain(h.l.State, nil, "older", h.l.Now, scheduler.CoreConfig{}); err == nil || !strings.Contains(err.Error(), "is dispatched") {
		t.Errorf("Explain of a dispatched job = %v", err)
	}
}
