package scheduler_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

// blockerKinds maps each blocker's kind to its message.
func blockerKinds(bs []scheduler.Blocker) map[string]string {
	out := map[string]string{}
	for _, b := range bs {
		out[b.Kind] = b.Message
	}
	return out
}

// TestExplain crafts each situation that holds a job back and checks that
// Explain names it, and that it names all of them at once.
func TestExplain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.submit("a", "j", 2, 0)
	kinds := func(hosts []wire.Heartbeat) map[string]string {
		t.Helper()
		bs, err := scheduler.Explain(h.l.State, hosts, "j", h.l.Now, scheduler.CoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return blockerKinds(bs)
	}
	if got := kinds(nil); len(got) != 1 || got["no_hosts"] == "" {
		t.Errorf("no hosts: %v", got)
	}
	one := wire.Heartbeat{Host: "h", Devices: []wire.Device{{UUID: "g0", Healthy: true}}}
	if got := kinds([]wire.Heartbeat{one}); !strings.Contains(got["too_wide"], "needs 2 GPUs; the largest live host has 1") {
		t.Errorf("too wide: %v", got)
	}
	// A worker refused the first attempt: the job waits out its retry
	// delay, behind an older job, on a host with no room, capped too.
	two := wire.Heartbeat{Host: "h", Devices: []wire.Device{{UUID: "g0", Healthy: true}, {UUID: "g1", Healthy: true}}}
	h.host("h", 2)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 1, Reason: "GPU busy"})
	h.l.Advance(time.Second) // h's backoff after its refusal
	h.submit("a", "older", 2, 5)
	h.decide() // older takes both GPUs
	h.apply(ledger.Admin{Account: "a", ID: "cap", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 1, MaxRunningGPUs: 3}})
	h.submit("a", "vip", 1, 9)
	got := kinds([]wire.Heartbeat{two})
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
	if _, ok := kinds([]wire.Heartbeat{two})["backoff"]; ok {
		t.Error("the retry delay is still reported after it ended")
	}
	if _, err := scheduler.Explain(h.l.State, nil, "older", h.l.Now, scheduler.CoreConfig{}); err == nil || !strings.Contains(err.Error(), "is dispatched") {
		t.Errorf("Explain of a dispatched job = %v", err)
	}
}

// TestExplainBackfill: the wide job that cannot start is told when its
// reservation begins; a later job whose walltime would run into that
// reservation is told so; one that ends in time is not held back.
func TestExplainBackfill(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 4)
	sub := func(id string, gpus int, walltime time.Duration) {
		h.t.Helper()
		h.apply(ledger.Submit{Account: "a", ID: id, GPUs: gpus, Cost: 1, Command: []string{"x"}, Walltime: walltime})
	}
	sub("hog", 3, time.Hour)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "hog", Attempt: 1, Devices: []string{"h-0", "h-1", "h-2"}})
	sub("wide", 4, time.Hour)
	sub("long", 1, 2*time.Hour)
	sub("short", 1, 10*time.Minute)
	hosts := h.core.Hosts()
	explain := func(id string) map[string]string {
		t.Helper()
		bs, err := scheduler.Explain(h.l.State, hosts, id, h.l.Now, scheduler.CoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return blockerKinds(bs)
	}
	if got := explain("wide")["backfill_reserved"]; !strings.Contains(got, "reserved for it on h from") || !strings.Contains(got, "(1h0m0s from now)") {
		t.Errorf("wide: backfill_reserved = %q", got)
	}
	if got := explain("long")["backfill_blocked"]; !strings.Contains(got, "job wide has GPUs reserved on h") || !strings.Contains(got, "walltime of 2h0m0s") {
		t.Errorf("long: backfill_blocked = %q", got)
	}
	if got := explain("short"); got["backfill_blocked"] != "" || got["backfill_reserved"] != "" {
		t.Errorf("short, which fits before the reservation, is told %v", got)
	}
	// A heartbeat sent before an attempt ended still shows its GPU held:
	// room is judged from the ledger, so long is still told why it waits.
	stale := hosts[0]
	stale.Devices = slices.Clone(stale.Devices)
	stale.Devices[3].Job, stale.Devices[3].Attempt = "ended", 1
	hosts = []wire.Heartbeat{stale}
	if got := explain("long")["backfill_blocked"]; !strings.Contains(got, "job wide has GPUs reserved on h") {
		t.Errorf("long, with a stray GPU in the heartbeat: backfill_blocked = %q", got)
	}
	hosts = h.core.Hosts()
	bs, err := scheduler.Explain(h.l.State, hosts, "long", h.l.Now, scheduler.CoreConfig{NoBackfill: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		if strings.HasPrefix(b.Kind, "backfill") {
			t.Errorf("without backfill: %+v", b)
		}
	}
	// Another host has room for long: once its retry delay is over, it
	// starts there, and the reservation on h does not hold it back.
	h = newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 4)
	sub("hog", 3, time.Hour)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "hog", Attempt: 1, Devices: []string{"h-0", "h-1", "h-2"}})
	sub("long", 1, 2*time.Hour)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "long", Attempt: 1, Reason: "GPU busy"})
	h.host("h2", 1)
	sub("wide", 4, time.Hour)
	hosts = h.core.Hosts()
	if got := explain("wide")["backfill_reserved"]; !strings.Contains(got, "reserved for it on h from") {
		t.Errorf("wide, with another host: backfill_reserved = %q", got)
	}
	got := explain("long")
	if got["backoff"] == "" || got["backfill_blocked"] != "" {
		t.Errorf("long, with room on h2 once its retry delay ends, is told %v", got)
	}
}
