// Decision tests for Core, without NATS: the ledger is driven through
// ledgertest.Log, every decision Core returns is applied by the real fold,
// and the tests assert on the decisions as values.
package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

type harness struct {
	t    *testing.T
	l    *ledgertest.Log
	core *scheduler.Core
}

func newHarness(t *testing.T, cfg scheduler.CoreConfig) *harness {
	h := &harness{t: t, l: ledgertest.NewLog(t), core: scheduler.NewCore(cfg)}
	h.core.Load(h.l.State)
	return h
}

// apply folds cmd and lets Core observe it, as the service does.
func (h *harness) apply(cmd ledger.Command) ledger.Result {
	h.t.Helper()
	res := h.l.Apply(cmd)
	h.core.Observe(h.l.State, cmd, res)
	return res
}

func (h *harness) host(name string, gpus int) {
	hb := wire.Heartbeat{Host: name}
	for i := range gpus {
		hb.Devices = append(hb.Devices, wire.Device{UUID: fmt.Sprintf("%s-%d", name, i), Healthy: true})
	}
	h.core.SetHost(hb, h.l.Now)
}

func (h *harness) submit(account, id string, gpus, priority int) {
	h.t.Helper()
	res := h.apply(ledger.Submit{Account: account, ID: id, GPUs: gpus, Cost: 1, Priority: priority, Command: []string{"x"}})
	if ev, _ := ledgertest.First[ledger.JobEvent](res); ev.Type != ledger.EventAccepted {
		h.t.Fatalf("submit %s: %+v", id, ev)
	}
}

// decide runs Decide and applies every decision, returning them.
func (h *harness) decide() []ledger.Command {
	h.t.Helper()
	cmds := h.core.Decide(h.l.State, h.l.Now)
	for _, c := range cmds {
		h.apply(c)
	}
	return cmds
}

func dispatches(cmds []ledger.Command) map[string]string {
	out := map[string]string{}
	for _, c := range cmds {
		if d, ok := c.(ledger.Dispatch); ok {
			out[d.Job] = d.Host
		}
	}
	return out
}

func TestBestFitPlacement(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("big", 8)
	h.host("small", 2)
	h.submit("a", "two", 2, 0)
	if got := dispatches(h.decide()); got["two"] != "small" {
		t.Errorf("2-GPU job went to %q, want the tightest fit, small", got["two"])
	}
	h.submit("a", "three", 3, 0)
	h.submit("a", "one", 1, 0)
	got := dispatches(h.decide())
	if got["three"] != "big" || got["one"] != "big" {
		t.Errorf("placements = %v, want three and one on big (small is full)", got)
	}
	// big has 4 left; a 5-GPU job waits, no unplaceable verdict since big could fit it.
	h.submit("a", "five", 5, 0)
	if cmds := h.decide(); len(cmds) != 0 {
		t.Errorf("decisions with no room = %+v", cmds)
	}
}

func TestDecisionsAreNotRepeatedWhileInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 4)
	h.submit("a", "j", 1, 0)
	first := h.core.Decide(h.l.State, h.l.Now) // published, not yet folded
	if len(first) != 1 {
		t.Fatalf("first decide = %+v", first)
	}
	if again := h.core.Decide(h.l.State, h.l.Now); len(again) != 0 {
		t.Errorf("decided again while in flight: %+v", again)
	}
	h.core.Abandon(h.l.State, first[0]) // the publish failed
	if again := h.core.Decide(h.l.State, h.l.Now); len(dispatches(again)) != 1 {
		t.Errorf("after abandon: %+v, want the job decided again", again)
	}
}

func TestAccountCapsSetAccountAside(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("capped", 100)
	h.l.Create("free", 100)
	h.apply(ledger.Admin{Account: "capped", ID: "lim", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 1, MaxRunningGPUs: 3}})
	h.host("h", 8)
	h.submit("capped", "c1", 2, 9)
	h.submit("capped", "c2", 2, 9)
	h.submit("capped", "c3", 1, 9)
	h.submit("free", "f1", 1, 0)
	got := dispatches(h.decide())
	if len(got) != 2 || got["c1"] == "" || got["f1"] == "" {
		t.Errorf("dispatched %v, want c1 (capped account's first) and f1 (not blocked by it)", got)
	}
	// Raise the job cap: c2 (2 GPUs) would pass the 3-GPU cap, c3 (1) fits.
	h.apply(ledger.Admin{Account: "capped", ID: "lim2", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 5, MaxRunningGPUs: 3}})
	got = dispatches(h.decide())
	if len(got) != 1 || got["c3"] == "" {
		t.Errorf("dispatched %v, want only c3", got)
	}
}

func TestUnplaceableAfterGrace(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{UnplaceableAfter: time.Minute})
	h.l.Create("a", 100)
	h.submit("a", "wide", 16, 0)
	if cmds := h.decide(); len(cmds) != 0 {
		t.Fatalf("no hosts at all: %+v, want waiting, not a verdict", cmds)
	}
	h.host("h", 8)
	if cmds := h.decide(); len(cmds) != 0 {
		t.Fatalf("first sight: %+v, want the grace period", cmds)
	}
	h.l.Advance(time.Minute)
	cmds := h.decide()
	if len(cmds) != 1 {
		t.Fatalf("after the grace period: %+v", cmds)
	}
	if u, ok := cmds[0].(ledger.Unplaceable); !ok || u.Job != "wide" {
		t.Fatalf("verdict = %+v", cmds[0])
	}
	if j := h.l.Job("wide"); j.State != ledger.StateFailed || j.Reason() != ledger.ReasonUnplaceable {
		t.Errorf("job after verdict: %s %s", j.State, j.Reason())
	}
}

func TestLostAfterHostGone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{LostAfter: 10 * time.Second})
	h.l.Create("a", 100)
	h.host("h1", 1)
	h.submit("a", "j", 1, 0)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: "j", Attempt: 1, Devices: []string{"h1-0"}})
	h.core.RemoveHost("h1", h.l.Now)
	if cmds := h.decide(); len(cmds) != 0 {
		t.Fatalf("inside the grace period: %+v", cmds)
	}
	h.l.Advance(10 * time.Second)
	h.host("h2", 1)
	cmds := h.core.Decide(h.l.State, h.l.Now)
	if len(cmds) != 1 {
		t.Fatalf("after the grace period: %+v", cmds)
	}
	if again := h.core.Decide(h.l.State, h.l.Now); len(again) != 0 {
		t.Errorf("lost verdict repeated before the fold applied it: %+v", again)
	}
	h.apply(cmds[0])
	if j := h.l.Job("j"); j.State != ledger.StatePending || j.Failures != 1 {
		t.Fatalf("after lost: %s with %d failures", j.State, j.Failures)
	}
	h.l.Advance(10 * time.Second) // the default first retry delay
	if got := dispatches(h.decide()); got["j"] != "h2" {
		t.Errorf("retry placed on %v, want h2", got)
	}
}

func TestBackoffDelaysRetry(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 1)
	h.submit("a", "j", 1, 0)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 1, Reason: "GPU busy"})
	if cmds := h.decide(); len(cmds) != 0 {
		t.Errorf("decided during the retry delay: %+v", cmds)
	}
	h.l.Advance(10 * time.Second) // the default first retry delay
	if got := dispatches(h.decide()); got["j"] != "h" {
		t.Errorf("after the delay: %v", got)
	}
}

// BenchmarkDecide measures one decision round that places one job, with n
// jobs queued across 1,000 accounts, as a GPU frees up at a time.
func BenchmarkDecide(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			s := ledger.New()
			at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			seq := uint64(0)
			apply := func(c ledger.Command) ledger.Result { seq++; return s.Apply(c, seq, at) }
			for i := range 1000 {
				apply(ledger.Admin{Account: fmt.Sprintf("a%d", i), ID: "c", Op: ledger.OpCreate, Balance: ledger.MaxCredits})
			}
			for i := range n {
				apply(ledger.Submit{Account: fmt.Sprintf("a%d", i%1000), ID: fmt.Sprintf("j%d", i), GPUs: 1, Cost: 1, Priority: i % 5, Command: []string{"x"}})
			}
			core := scheduler.NewCore(scheduler.CoreConfig{})
			core.Load(s)
			core.SetHost(wire.Heartbeat{Host: "h", Devices: []wire.Device{{UUID: "g", Healthy: true}}}, at)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				cmds := core.Decide(s, at)
				if len(cmds) != 1 {
					b.Fatalf("round %d: %d decisions", i, len(cmds))
				}
				d := cmds[0].(ledger.Dispatch)
				res := apply(d)
				core.Observe(s, d, res)
				// Run it to the end so the GPU frees up for the next round.
				for _, r := range []ledger.Report{
					{Type: ledger.ReportStarted, Host: "h", Job: d.Job, Attempt: d.Attempt, Devices: []string{"g"}},
					{Type: ledger.ReportDone, Host: "h", Job: d.Job, Attempt: d.Attempt},
				} {
					core.Observe(s, r, apply(r))
				}
			}
		})
	}
}

// BenchmarkDecideNoHosts measures a decision round while every host is
// gone: n jobs queued and 1,000 attempts left on the hosts that went away.
// Nothing can start, so the round must not look through the queue.
func BenchmarkDecideNoHosts(b *testing.B) {
	const n, running = 100_000, 1000
	s := ledger.New()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(c ledger.Command) ledger.Result { seq++; return s.Apply(c, seq, at) }
	for i := range 1000 {
		apply(ledger.Admin{Account: fmt.Sprintf("a%d", i), ID: "c", Op: ledger.OpCreate, Balance: ledger.MaxCredits})
	}
	core := scheduler.NewCore(scheduler.CoreConfig{})
	core.Load(s)
	for i := range running {
		host := fmt.Sprintf("h%d", i)
		core.SetHost(wire.Heartbeat{Host: host, Devices: []wire.Device{{UUID: "g", Healthy: true}}}, at)
		sub := ledger.Submit{Account: fmt.Sprintf("a%d", i%1000), ID: fmt.Sprintf("r%d", i), GPUs: 1, Cost: 1, Command: []string{"x"}}
		core.Observe(s, sub, apply(sub))
		d := ledger.Dispatch{Job: sub.ID, Attempt: 1, Host: host}
		core.Observe(s, d, apply(d))
	}
	for i := range running {
		core.RemoveHost(fmt.Sprintf("h%d", i), at)
	}
	for i := range n {
		apply(ledger.Submit{Account: fmt.Sprintf("a%d", i%1000), ID: fmt.Sprintf("j%d", i), GPUs: 1, Cost: 1, Priority: i % 5, Command: []string{"x"}})
	}
	core.Load(s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if cmds := core.Decide(s, at); len(cmds) != 0 {
			b.Fatalf("round %d: %+v", i, cmds)
		}
	}
}

func TestLostWhenMissingFromHeartbeat(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{LostAfter: 10 * time.Second, StartTimeout: time.Minute})
	h.l.Create("a", 100)
	h.host("h1", 2)
	h.submit("a", "run", 1, 0)
	h.submit("a", "wait", 1, 0)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: "run", Attempt: 1, Devices: []string{"h1-0"}})
	beat := func(running ...string) {
		hb := wire.Heartbeat{Host: "h1", Devices: []wire.Device{{UUID: "h1-0", Healthy: true}, {UUID: "h1-1", Healthy: true}}}
		for _, j := range running {
			hb.Running = append(hb.Running, wire.Running{Job: j, Attempt: 1})
		}
		h.core.SetHost(hb, h.l.Now)
	}
	beat("run") // listed; "wait" starts its StartTimeout
	h.l.Advance(30 * time.Second)
	if cmds := h.core.Decide(h.l.State, h.l.Now); len(cmds) != 0 {
		t.Fatalf("listed running attempt, dispatched one within its timeout: %+v", cmds)
	}
	beat() // the worker restarted: neither is listed
	h.l.Advance(10 * time.Second)
	cmds := h.core.Decide(h.l.State, h.l.Now)
	if len(cmds) != 1 || cmds[0].(ledger.Lost).Job != "run" {
		t.Fatalf("after LostAfter: %+v, want only the running attempt lost", cmds)
	}
	h.apply(cmds[0])
	h.l.Advance(20 * time.Second)
	cmds = h.core.Decide(h.l.State, h.l.Now)
	var lost []string
	for _, c := range cmds {
		if l, ok := c.(ledger.Lost); ok {
			lost = append(lost, l.Job)
		}
	}
	if len(lost) != 1 || lost[0] != "wait" {
		t.Fatalf("after StartTimeout: %+v, want the dispatched attempt lost too", cmds)
	}
}

// beat is a heartbeat of host running attempt 1 of job running, whose
// devices h-0, h-1, … are held by attempt 1 of the jobs named in holders
// ("" for a free one).
func beat(host, running string, holders ...string) wire.Heartbeat {
	hb := wire.Heartbeat{Host: host, Running: []wire.Running{{Job: running, Attempt: 1}}}
	for i, job := range holders {
		d := wire.Device{UUID: fmt.Sprintf("%s-%d", host, i), Healthy: true, Job: job}
		if job != "" {
			d.Attempt = 1
		}
		hb.Devices = append(hb.Devices, d)
	}
	return hb
}

// TestShadowDespiteStrayGPUs: a heartbeat sent just before a job ended
// still shows its GPUs held. The wide job at the head of the queue keeps
// its backfill reservation all the same, and a long job is not started
// into it.
func TestShadowDespiteStrayGPUs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 4)
	h.apply(ledger.Submit{Account: "a", ID: "run", GPUs: 2, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "run", Attempt: 1, Devices: []string{"h-0", "h-1"}})
	// The heartbeat lists run and an attempt the ledger has already ended.
	h.core.SetHost(beat("h", "run", "run", "run", "ended", "ended"), h.l.Now)
	h.apply(ledger.Submit{Account: "a", ID: "wide", GPUs: 4, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	h.apply(ledger.Submit{Account: "a", ID: "long", GPUs: 2, Cost: 1, Command: []string{"x"}, Walltime: 3 * time.Hour})
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Errorf("dispatched %v with no GPU free", got)
	}
	sh, ok := h.core.Shadows()["wide"]
	if !ok || sh.Host != "h" || !sh.At.Equal(h.l.Now.Add(time.Hour)) {
		t.Fatalf("shadows = %v, want wide reserved on h when run reaches its walltime", h.core.Shadows())
	}
	// The stale heartbeat is replaced: two GPUs are free, and long, which
	// would run past the reservation, still waits.
	h.core.SetHost(beat("h", "run", "run", "run", "", ""), h.l.Now)
	if got := dispatches(h.decide()); got["long"] != "" {
		t.Errorf("long started into wide's reservation: %v", got)
	}
}

// TestBackfillSpareLeavesStrayGPUs: the reservation's time takes stray GPUs
// to free at once, but its spare does not count them: a long job started on
// what only the strays would leave free could hold the wide job back.
func TestBackfillSpareLeavesStrayGPUs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 8)
	h.apply(ledger.Submit{Account: "a", ID: "run", GPUs: 4, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "run", Attempt: 1, Devices: []string{"h-0", "h-1", "h-2", "h-3"}})
	// The heartbeat lists run and an attempt the ledger has already ended
	// on two more GPUs: two are free.
	h.core.SetHost(beat("h", "run", "run", "run", "run", "run", "ended", "ended", "", ""), h.l.Now)
	h.apply(ledger.Submit{Account: "a", ID: "wide", GPUs: 6, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	h.apply(ledger.Submit{Account: "a", ID: "long", GPUs: 2, Cost: 1, Command: []string{"x"}, Walltime: 3 * time.Hour})
	if got := dispatches(h.decide()); got["long"] != "" {
		t.Errorf("long started on h, into wide's reservation unless the stray GPUs free: %v", got)
	}
	sh, ok := h.core.Shadows()["wide"]
	if !ok || sh.Host != "h" || !sh.At.Equal(h.l.Now.Add(time.Hour)) || sh.Spare != 0 {
		t.Errorf("shadows = %v, want wide reserved on h when run reaches its walltime, nothing to spare", h.core.Shadows())
	}
}

// TestShadowsReportSpareLeft: a job backfilled past the reservation on its
// spare GPUs uses that spare up, and Shadows reports what is left.
func TestShadowsReportSpareLeft(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 8)
	h.apply(ledger.Submit{Account: "a", ID: "run", GPUs: 4, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	h.decide()
	h.apply(ledger.Submit{Account: "a", ID: "wide", GPUs: 6, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	h.apply(ledger.Submit{Account: "a", ID: "long", GPUs: 2, Cost: 1, Command: []string{"x"}, Walltime: 3 * time.Hour})
	if got := dispatches(h.decide()); got["long"] != "h" {
		t.Errorf("long, which fits the reservation's spare, did not start on h: %v", got)
	}
	if sh, ok := h.core.Shadows()["wide"]; !ok || sh.Spare != 0 {
		t.Errorf("shadows = %v, want wide's spare of 2 used up by long", h.core.Shadows())
	}
}
