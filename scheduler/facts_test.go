package scheduler_test

// Tests of Core.Waiting, the explanations the leader publishes as facts:
// after a pass, each waiting job's blockers are the ones Explain finds for
// it by the same rules, under the core's own configuration (backfill on and
// off), the reservation is the pass's own, and walking the queue for them
// leaves the next pass's decisions as they were.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

func kindsOf(bs []scheduler.Blocker) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.Kind)
	}
	return out
}

func TestWaitingAgreesWithExplain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  scheduler.CoreConfig
		want map[string][]string
	}{
		// refused's retry delay (10s) has passed: it runs beside hog,
		// leaving one GPU, which small may not take.
		{"backfill", scheduler.CoreConfig{}, map[string][]string{
			"wide":   {"no_free_gpus", "backfill_reserved"},
			"capped": {"max_running_jobs", "queue"},
			"small":  {"queue", "backfill_blocked"},
		}},
		// refused waits out an hour; small takes a GPU past wide, and
		// account b's share is now the smaller, so capped comes first.
		{"no backfill", scheduler.CoreConfig{NoBackfill: true, Retry: scheduler.RetryPolicy{Initial: time.Hour}}, map[string][]string{
			"capped":  {"max_running_jobs"},
			"refused": {"backoff", "queue"},
			"wide":    {"no_free_gpus", "queue"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, tc.cfg)
			h.l.Create("a", 100)
			h.l.Create("b", 100)
			h.apply(ledger.Admin{Account: "b", ID: "cap", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 1}})
			hb := wire.Heartbeat{Host: "h"}
			for i := range 4 {
				hb.Devices = append(hb.Devices, wire.Device{UUID: "g" + string(rune('0'+i)), Healthy: true})
			}
			h.core.SetHost(hb, h.l.Now)
			// refused is refused once by h: it waits out its retry delay.
			h.submit("a", "refused", 1, 0)
			h.decide()
			h.apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "refused", Attempt: 1, Reason: "no"})
			h.l.Advance(time.Minute) // past h's backoff, within refused's retry delay
			h.submit("b", "hog", 2, 0)
			h.decide()
			h.submit("a", "wide", 4, 0)
			h.submit("b", "capped", 1, 0)
			// small would run past wide's reservation.
			h.apply(ledger.Submit{Account: "a", ID: "small", GPUs: 1, Cost: 1, Walltime: 100 * time.Hour, Command: []string{"x"}})
			h.core.SetHost(hb, h.l.Now)
			cmds := h.decide() // the pass
			ws, queued := h.core.Waiting(h.l.State, h.l.Now, 100)
			got := map[string][]string{}
			for _, w := range ws {
				got[w.Job] = kindsOf(w.Blockers)
				want, err := scheduler.Explain(h.l.State, []wire.Heartbeat{hb}, w.Job, h.l.Now, tc.cfg)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got[w.Job], kindsOf(want)) {
					t.Errorf("Waiting says %s waits for %v; Explain says %v", w.Job, got[w.Job], kindsOf(want))
				}
				if sh, ok := h.core.Shadows()[w.Job]; ok != (w.Reservation != nil) || ok && *w.Reservation != sh {
					t.Errorf("%s's reservation = %+v, the pass made %+v", w.Job, w.Reservation, sh)
				}
			}
			for job, kinds := range tc.want {
				if !slices.Equal(got[job], kinds) {
					t.Errorf("%s waits for %v, want %v (decisions %+v)", job, got[job], kinds, cmds)
				}
			}
			if len(ws) != queued || queued != len(tc.want) {
				t.Errorf("Waiting explained %d of %d queued jobs, want all %d", len(ws), queued, len(tc.want))
			}
			// The walk left the queue whole: a second walk sees the same.
			again, _ := h.core.Waiting(h.l.State, h.l.Now, 100)
			if len(again) != len(ws) {
				t.Errorf("a second walk explained %d jobs, the first %d", len(again), len(ws))
			}
			for i := range again {
				if again[i].Job != ws[i].Job {
					t.Errorf("walk order changed at %d: %s then %s", i, ws[i].Job, again[i].Job)
				}
			}
		})
	}
}

// TestWaitingIsBounded: a pass explains at most its window, from the head
// of the queue, and says how many are queued.
func TestWaitingIsBounded(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 1000)
	for i := range 50 {
		h.submit("a", fmt.Sprintf("j%02d", i), 1, i%3)
	}
	h.decide() // no hosts: nothing starts
	ws, queued := h.core.Waiting(h.l.State, h.l.Now, 10)
	if len(ws) != 10 || queued != 50 {
		t.Fatalf("Waiting = %d explanations of %d queued, want 10 of 50", len(ws), queued)
	}
	for _, w := range ws {
		if j := h.l.State.Jobs[w.Job]; j.Priority != 2 {
			t.Errorf("%s (priority %d) explained before the priority-2 jobs", w.Job, j.Priority)
		}
	}
}

// BenchmarkWaiting measures the fact pass the leader runs after a decision
// pass: explaining the first 1,000 of -bench.jobs pending jobs on 100 full
// hosts. It costs the window, not the backlog.
func BenchmarkWaiting(b *testing.B) {
	l := ledgertest.NewLog(b)
	l.Create("a", ledger.MaxCredits)
	core := scheduler.NewCore(scheduler.CoreConfig{})
	for i := range *benchJobs {
		l.State.Apply(ledger.Submit{Account: "a", ID: fmt.Sprintf("job-%07d", i), GPUs: 8, Cost: 1, Command: []string{"x"}}, l.Seq+1, l.Now)
		l.Seq++
	}
	core.Load(l.State)
	for h := range 100 {
		hb := wire.Heartbeat{Host: fmt.Sprintf("h%03d", h)}
		for i := range 8 {
			hb.Devices = append(hb.Devices, wire.Device{UUID: fmt.Sprintf("h%03d-%d", h, i), Healthy: true})
		}
		core.SetHost(hb, l.Now)
	}
	for _, c := range core.Decide(l.State, l.Now) { // fills the hosts
		l.Seq++
		core.Observe(l.State, c, l.State.Apply(c, l.Seq, l.Now))
	}
	core.Decide(l.State, l.Now)
	for b.Loop() {
		if ws, queued := core.Waiting(l.State, l.Now, 1000); len(ws) != 1000 || queued != *benchJobs-100 {
			b.Fatalf("Waiting = %d of %d", len(ws), queued)
		}
	}
}

// BenchmarkWaitingGated measures the fact pass over -bench.jobs pending
// jobs that all wait on one dependency (gated, out of the queue): it
// explains the first 1,000 of them, in job order.
func BenchmarkWaitingGated(b *testing.B) {
	l := ledgertest.NewLog(b)
	l.Create("a", ledger.MaxCredits)
	core := scheduler.NewCore(scheduler.CoreConfig{})
	l.State.Apply(ledger.Submit{Account: "a", ID: "dep", GPUs: 8, Cost: 1, Command: []string{"x"}}, l.Seq+1, l.Now)
	l.Seq++
	for i := range *benchJobs {
		// Ids in an order other than their sort order, as real ids are.
		id := fmt.Sprintf("job-%07d", (i*7919)%*benchJobs)
		l.State.Apply(ledger.Submit{Account: "a", ID: id, GPUs: 8, Cost: 1, Command: []string{"x"}, After: []string{"dep"}}, l.Seq+1, l.Now)
		l.Seq++
	}
	core.Load(l.State)
	for b.Loop() {
		ws, _ := core.Waiting(l.State, l.Now, 1000)
		if len(ws) != 1001 || ws[1].Job != "job-0000000" || ws[1000].Job != "job-0000999" {
			b.Fatalf("Waiting = %d, from %s to %s", len(ws), ws[1].Job, ws[len(ws)-1].Job)
		}
	}
}
