package scheduler

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// TestQueueCountsFollowTheFold is a differential test of the queue counts a
// term keeps from each fold's changed keys: after every command of a seeded
// random run (submits, dispatches, starts, ends, cancels, lost attempts,
// archives), they equal a count of every job afresh.
func TestQueueCountsFollowTheFold(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(13, 1))
	s := ledger.New()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var seq uint64
	apply := func(c ledger.Command) ledger.Result {
		seq++
		at = at.Add(time.Duration(rng.IntN(3600)) * time.Second)
		return s.Apply(c, seq, at)
	}
	for _, a := range []string{"a", "b", "c"} {
		apply(ledger.Admin{Account: a, ID: "create-" + a, Op: ledger.OpCreate, Balance: 1_000_000})
	}
	var m termMetrics
	m.countQueue(s)
	changed := map[string]int{} // commands that changed a job, by kind
	for step := range 3000 {
		id := fmt.Sprintf("j%d", rng.IntN(200))
		j := s.Jobs[id]
		var c ledger.Command
		switch r := rng.IntN(7); {
		case j == nil || r == 0:
			c = ledger.Submit{Account: []string{"a", "b", "c"}[rng.IntN(3)], ID: id, GPUs: 1, Cost: 10,
				Command: []string{"true"}, Walltime: time.Hour, MaxAttempts: 2, Hold: rng.IntN(4) == 0}
		case r == 1:
			c = ledger.Dispatch{Job: id, Attempt: j.Attempt + 1, Host: "h1"}
		case r == 2:
			c = ledger.Report{Type: ledger.ReportStarted, Host: j.Host(), Job: id, Attempt: j.Attempt, Devices: []string{"GPU-1"}}
		case r == 3:
			c = ledger.Report{Type: ledger.ReportDone, Host: j.Host(), Job: id, Attempt: j.Attempt, ExitCode: rng.IntN(2), Runtime: time.Minute}
		case r == 4:
			c = ledger.Cancel{Account: j.Account, Job: id}
		case r == 5:
			c = ledger.Lost{Job: id, Attempt: j.Attempt, Reason: "gone"}
		default:
			c = ledger.Archive{Job: id, Seq: j.Seq, Retention: time.Hour}
		}
		res := apply(c)
		if len(res.Changed) > 0 {
			changed[c.Kind()]++
		}
		for _, k := range res.Changed {
			if k.Kind == ledger.KeyJob {
				m.requeue(k.ID, s.Jobs[k.ID])
			}
		}
		got, want := nonZero(m.jobCounts()), nonZero(countJobs(s))
		if !slices.Equal(got, want) {
			t.Fatalf("step %d (%s %s): kept counts %v, counted afresh %v", step, c.Kind(), id, got, want)
		}
	}
	for _, kind := range []string{"submit", "dispatch", "report", "cancel", "lost", "archive"} {
		if changed[kind] == 0 {
			t.Errorf("no %s command changed a job: the run exercised too little (%v)", kind, changed)
		}
	}
	if len(m.queued) == 0 {
		t.Error("no job was left in the queue at the end: the run exercised too little")
	}
}

// nonZero drops the zero counts, which the kept counts keep for accounts
// whose jobs have all ended.
func nonZero(cs []JobCount) []JobCount {
	return slices.DeleteFunc(cs, func(c JobCount) bool { return c.N == 0 })
}

// BenchmarkCountJobs is a term's first count of its queue, over a ledger of
// 100,000 jobs in 49 accounts; later counts follow the fold instead.
func BenchmarkCountJobs(b *testing.B) {
	s := &ledger.State{Jobs: map[string]*ledger.Job{}}
	states := []ledger.JobState{ledger.StatePending, ledger.StateRunning, ledger.StateSucceeded, ledger.StateDispatched}
	for i := range 100_000 {
		id := fmt.Sprintf("j%d", i)
		s.Jobs[id] = &ledger.Job{ID: id, Account: fmt.Sprintf("a%d", i%49), State: states[i%len(states)]}
	}
	for b.Loop() {
		if n := nonZero(countJobs(s)); len(n) != 49*3 {
			b.Fatalf("countJobs = %d groups, want 147 (49 accounts, 3 states not final)", len(n))
		}
	}
}
