// A simulation of workers as they really behave around the ends of jobs and
// restarts, against the real Core and fold: a worker frees a job's GPUs only
// a moment after its done report is stored, it heartbeats what its GPUs hold
// every two seconds, it refuses an order (busy) when the GPUs are taken, and
// one host crashes and, restarted on its old state, runs the attempts it
// had before, which have been lost and retried elsewhere meanwhile. The
// properties: the core never sends an order onto GPUs a heartbeat shows
// held, so no order is ever refused; every stale run gets a cancel order
// and stops; every job succeeds, and only the crash spent attempts.
package scheduler_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

type simAttempt struct {
	job     string
	attempt int
}

// lateWorker is a host whose worker frees GPUs a moment after the done
// report.
type lateWorker struct {
	name    string
	up      bool
	holder  []simAttempt           // per device; zero when free
	running map[simAttempt]*simRun // attempts running
}

// simRun is one run of an attempt; stop ends it early (a cancel).
type simRun struct{ stop func() }

func TestSimWorkersThatFreeLate(t *testing.T) {
	t.Parallel()
	base := seed(t)
	allStale := 0
	for i := range uint64(5) {
		s, staleStarts := lateWorkersRun(t, base+i, 4*time.Hour)
		if i == 0 {
			t.Logf("seed %d: %d stale runs after the crash, all cancelled (%d commands)", base+i, staleStarts, len(s.trace))
		}
		allStale += staleStarts
	}
	if allStale == 0 {
		t.Errorf("seeds %d to %d: no stale run started at all, so nothing tested that one is cancelled", base, base+4)
	}
}

// lateWorkersRun is one run of TestSimWorkersThatFreeLate, on seed, for d
// (every job must have succeeded by then): it checks the run's properties
// and returns the sim and how many stale runs the crashed host started.
func lateWorkersRun(t *testing.T, seed uint64, d time.Duration) (*sim, int) {
	const freeLag = 200 * time.Millisecond
	s := newSim(t, seed, scheduler.CoreConfig{})
	s.create("a", ledger.MaxCredits/2)
	workers := map[string]*lateWorker{}
	names := []string{"h1", "h2", "h3"}
	for _, name := range names {
		workers[name] = &lateWorker{name: name, up: true, holder: make([]simAttempt, 8), running: map[simAttempt]*simRun{}}
	}
	refusals, staleStarts, staleCancelled := 0, 0, 0
	heartbeat := func(w *lateWorker) {
		hb := wire.Heartbeat{Host: w.name}
		for d, at := range w.holder {
			hb.Devices = append(hb.Devices, wire.Device{UUID: fmt.Sprintf("%s-%d", w.name, d), Healthy: true, Job: at.job, Attempt: at.attempt})
		}
		for _, at := range slices.SortedFunc(maps.Keys(w.running), compareAttempts) {
			hb.Running = append(hb.Running, wire.Running{Job: at.job, Attempt: at.attempt})
		}
		s.core.SetHost(hb, s.now())
	}
	var beat func(w *lateWorker)
	beat = func(w *lateWorker) {
		if w.up {
			heartbeat(w)
		}
		s.at(s.now().Add(2*time.Second), func() { beat(w) })
	}
	for _, name := range names {
		beat(workers[name])
	}
	free := func(w *lateWorker, at simAttempt) {
		for d := range w.holder {
			if w.holder[d] == at {
				w.holder[d] = simAttempt{}
			}
		}
	}
	// run claims GPUs for order o on w and runs it, or refuses it.
	run := func(w *lateWorker, o ledger.DispatchOrder) {
		at := simAttempt{o.Job, o.Attempt}
		var devs []string
		for d := range w.holder {
			if len(devs) < o.GPUs && w.holder[d] == (simAttempt{}) {
				w.holder[d] = at
				devs = append(devs, fmt.Sprintf("%s-%d", w.name, d))
			}
		}
		if len(devs) < o.GPUs {
			free(w, at)
			refusals++
			s.apply(ledger.Report{Type: ledger.ReportRejected, Host: w.name, Job: o.Job, Attempt: o.Attempt, Reason: "GPUs taken", Busy: true})
			return
		}
		me := &simRun{}
		end := func(code int) {
			if w.running[at] != me {
				return // ended already, or killed in a crash
			}
			delete(w.running, at)
			s.apply(ledger.Report{Type: ledger.ReportDone, Host: w.name, Job: o.Job, Attempt: o.Attempt, ExitCode: code, Runtime: time.Minute})
			s.at(s.now().Add(freeLag), func() { free(w, at) })
		}
		me.stop = func() { end(137) }
		w.running[at] = me
		s.apply(ledger.Report{Type: ledger.ReportStarted, Host: w.name, Job: o.Job, Attempt: o.Attempt, Devices: devs})
		s.at(s.now().Add(s.jobs[o.Job].runtime), func() { end(0) })
	}
	var taken map[simAttempt]ledger.DispatchOrder // h1's orders, kept in its state dir
	s.orders = func(e ledger.Effect) {
		switch o := e.(type) {
		case ledger.DispatchOrder:
			if o.Host == "h1" {
				taken[simAttempt{o.Job, o.Attempt}] = o
			}
			run(workers[o.Host], o)
		case ledger.CancelOrder:
			w := workers[o.Host]
			at := simAttempt{o.Job, o.Attempt}
			if r, ok := w.running[at]; ok {
				if j := s.l.Job(o.Job); j.Attempt != o.Attempt || j.Host() != o.Host {
					staleCancelled++
				}
				r.stop()
			}
		}
	}
	taken = map[simAttempt]ledger.DispatchOrder{}
	var ids []string
	for k := range 60 {
		id := fmt.Sprintf("j%d", k)
		ids = append(ids, id)
		gpus := 1 + s.rng.IntN(4)
		runtime := time.Duration(1+s.rng.IntN(20)) * time.Minute
		at := s.now().Add(time.Duration(s.rng.IntN(30)) * time.Minute)
		s.at(at, func() {
			s.submit(ledger.Submit{Account: "a", ID: id, GPUs: gpus, Cost: 1, Walltime: 30 * time.Minute, MaxAttempts: 2}, simJob{runtime: runtime})
		})
	}
	// h1 crashes at 10m, its running attempts with it; it comes back
	// at 12m, after they were declared lost, and runs them again from
	// the orders it had taken.
	crash := s.now().Add(10 * time.Minute)
	var stale []ledger.DispatchOrder
	s.at(crash, func() {
		w := workers["h1"]
		for at := range w.running {
			stale = append(stale, taken[at])
		}
		slices.SortFunc(stale, func(a, b ledger.DispatchOrder) int {
			return compareAttempts(simAttempt{a.Job, a.Attempt}, simAttempt{b.Job, b.Attempt})
		})
		w.up = false
		w.running = map[simAttempt]*simRun{}
		w.holder = make([]simAttempt, 8)
		s.core.RemoveHost("h1", s.now())
	})
	s.at(crash.Add(2*time.Minute), func() {
		w := workers["h1"]
		w.up = true
		for _, o := range stale {
			if j := s.l.Job(o.Job); j.Attempt == o.Attempt && j.Host() == o.Host {
				t.Fatalf("seed %d: %s attempt %d is still current on h1 two minutes after the crash", seed, o.Job, o.Attempt)
			}
			staleStarts++
			run(w, o)
		}
		heartbeat(w)
	})
	s.run(s.now().Add(d))
	for _, id := range ids {
		j := s.l.Job(id)
		if j.State != ledger.StateSucceeded {
			t.Fatalf("seed %d: %s is %s (%s): %+v", seed, id, j.State, j.Message(), j.Attempts())
		}
		if j.BusyRefusals != 0 || j.Failures > 1 {
			t.Errorf("seed %d: %s has %d busy refusals and %d failures: %+v", seed, id, j.BusyRefusals, j.Failures, j.Attempts())
		}
	}
	if refusals != 0 {
		t.Errorf("seed %d: workers refused %d orders for taken GPUs", seed, refusals)
	}
	if staleCancelled != staleStarts {
		t.Errorf("seed %d: %d stale runs started, %d stopped by a cancel order", seed, staleStarts, staleCancelled)
	}
	for _, w := range workers {
		for at := range w.running {
			t.Errorf("seed %d: %s still runs %s attempt %d at the end", seed, w.name, at.job, at.attempt)
		}
	}
	return s, staleStarts
}

func compareAttempts(a, b simAttempt) int {
	if a.job != b.job {
		if a.job < b.job {
			return -1
		}
		return 1
	}
	return a.attempt - b.attempt
}
