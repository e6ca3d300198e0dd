// A long-run simulation: an installation runs for many simulated days
// (-sim.days, 30 by default, 400 for the full run of issue 11) with a
// steady stream of jobs, the archive decision on, and the journal kept and
// audited. It checks that the ledger's state stays flat (only jobs in
// flight or within the retention), that the journal audits clean every day,
// and that a new leader taking over at the end loads only what is in flight
// and decides as the old one would.
package scheduler_test

import (
	"container/heap"
	"flag"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

var simDays = flag.Int("sim.days", 30, "simulated days of TestSimLongRun (issue 11 asks for 400)")

// The long run's workload.
const (
	lrRetention   = 24 * time.Hour // CoreConfig.JobRetention in the run
	lrArrivals    = 6.0            // jobs submitted per hour, a Poisson stream
	lrMaxLife     = 24 * time.Hour // no job may stay unfinished longer: the cluster is far from saturated
	lrFullAuditAt = 10             // days between audits of the whole journal
)

// longRun drives a sim with its own apply, so that a second core (the new
// leader after a takeover) observes every command, and so that every journal
// entry is kept as the journal stream would store it.
type longRun struct {
	*sim
	cfg  scheduler.CoreConfig
	twin *scheduler.Core // the new leader, after the takeover

	// The journal as stored: each account's entries in the order
	// published, with the stream sequence in Msg.
	journal map[string][]ledger.StoredEntry
	msgs    uint64
	// seals are the indexes in journal of each account's seals.
	seals map[string][]int

	runs      map[string]*lrRun    // attempts running, by job
	submitted map[string]time.Time // when each job in the ledger was submitted
	arrivals  []time.Time          // submission times, oldest first (pruned)
	// archived are the ids archived, free to submit again, by the account
	// that ran them. (Reusing one on another account makes the audit
	// fail: ledger.Books keys jobs by id alone, and AuditJournal posts
	// account by account. See the sim400 report.)
	archived map[string][]string
	n        int // jobs submitted
	reused   int // of them under an archived id
	archives int // archive effects
	cancels  int // cancel commands
	statuses map[ledger.JobState]int
}

type lrRun struct {
	host    string
	attempt int
	devices []string
	started time.Time
}

func TestSimLongRun(t *testing.T) {
	t.Parallel()
	days := *simDays
	if days < 3 {
		t.Fatalf("-sim.days=%d: the run needs at least 3 days, to pass the retention", days)
	}
	sd := seed(t)
	t.Logf("simulation seed %d, %d days", sd, days)
	began := time.Now() // for the log only: nothing in the run reads the wall clock
	r := longRunFor(t, sd, days)
	t.Logf("%d simulated days (and one after the takeover) in %v", days, time.Since(began).Round(time.Millisecond))
	if r.archives == 0 || r.reused == 0 || r.cancels == 0 {
		t.Errorf("the run archived %d jobs, reused %d ids and cancelled %d jobs: it tested too little", r.archives, r.reused, r.cancels)
	}
}

// longRunFor is the run of TestSimLongRun, on seed, for days (at least 3)
// and a day after a takeover. It checks the state every day; whether the
// run exercised enough (archives, reused ids, cancels) is the caller's to
// judge, as a short run may have reused no id.
func longRunFor(t *testing.T, sd uint64, days int) *longRun {
	cfg := scheduler.CoreConfig{JobRetention: lrRetention}
	r := &longRun{sim: newSim(t, sd, cfg), cfg: cfg, journal: map[string][]ledger.StoredEntry{},
		seals: map[string][]int{}, runs: map[string]*lrRun{}, submitted: map[string]time.Time{},
		statuses: map[ledger.JobState]int{}, archived: map[string][]string{}}
	accts := []string{"a", "b", "c"}
	for i, acct := range accts {
		r.apply(ledger.Admin{Account: acct, ID: "create-" + acct, Op: ledger.OpCreate, Balance: 1000})
		r.apply(ledger.Admin{Account: acct, ID: "refill", Op: ledger.OpRefill, RatePerHour: 60, Cap: 5000})
		r.apply(ledger.Admin{Account: acct, ID: "weight", Op: ledger.OpWeight, Weight: i + 1})
	}
	r.apply(ledger.SetPricing{ID: "prices", PerGPUHour: map[string]ledger.Credits{"H100": 6, "H200": 9}, Default: 6, FailurePercent: 50})
	r.host("h1", "H100", 8)
	r.host("h2", "H100", 8)
	r.host("h3", "H200", 8)

	var arrive func()
	arrive = func() {
		r.submitOne(accts[r.rng.IntN(len(accts))])
		r.at(r.now().Add(r.interarrival()), arrive)
	}
	r.at(r.now().Add(r.interarrival()), arrive)

	start := r.now()
	maxJobs, maxJobsDay, audited, fullAudited := 0, 0, 0, 0
	for d := 1; d <= days; d++ {
		r.runTo(start.Add(time.Duration(d) * 24 * time.Hour))
		n := r.checkDay(d)
		if d > 2 && n > maxJobs {
			maxJobs, maxJobsDay = n, d
		}
		audited += r.audit(d, false)
		if d%lrFullAuditAt == 0 || d == days {
			fullAudited += r.audit(d, true)
		}
	}
	t.Logf("%d days: %d jobs submitted (%d under an archived id), %d archived, %d cancels, %v; "+
		"at most %d jobs in the state after day 2 (day %d), bound %d; %d journal entries, %d posted by the daily audits, %d by the full ones",
		days, r.n, r.reused, r.archives, r.cancels, r.statuses, maxJobs, maxJobsDay, r.bound(), r.msgs, audited, fullAudited)
	r.takeover(days)
	return r
}

// interarrival draws the time to the next submission of a Poisson stream
// of lrArrivals per hour, to the second.
func (r *longRun) interarrival() time.Duration {
	return max(time.Duration(r.rng.ExpFloat64()/lrArrivals*3600)*time.Second, time.Second)
}

// submitOne submits a job of minutes to hours on acct: account c's are
// metered, some fail, some fail by the infrastructure first, some are
// cancelled, and a few reuse the id of an archived job of any account.
func (r *longRun) submitOne(acct string) {
	r.n++
	id := fmt.Sprintf("j%d", r.n)
	// The archived id may be another account's: an archived id is free
	// again for any account, and the audit must not confuse the two jobs.
	from := []string{"a", "b", "c"}[r.rng.IntN(3)]
	if ids := r.archived[from]; len(ids) > 0 && r.rng.IntN(50) == 0 {
		k := r.rng.IntN(len(ids))
		id = ids[k]
		r.archived[from] = slices.Delete(ids, k, k+1)
		r.reused++
	}
	// Runtimes are log-uniform from 2 minutes to 4 hours.
	runtime := time.Duration(math.Exp(math.Log(2)+r.rng.Float64()*math.Log(120))*60) * time.Second
	walltime := (runtime*time.Duration(11+r.rng.IntN(10))/10 + time.Minute).Truncate(time.Minute)
	gpus := []int{1, 1, 1, 2, 2, 4}[r.rng.IntN(6)]
	if r.rng.IntN(20) == 0 {
		gpus = 8 // a whole host
	}
	spec := simJob{runtime: runtime}
	if r.rng.IntN(10) == 0 {
		spec.exit = 1
	}
	if r.rng.IntN(20) == 0 {
		spec.infra = 1
	}
	c := ledger.Submit{Account: acct, ID: id, GPUs: gpus, Walltime: walltime, MaxAttempts: 3,
		Hold: r.rng.IntN(10) != 0, Command: []string{"train"}}
	if acct == "c" {
		c.Metered = true
	} else {
		c.Cost = ledger.Credits(gpus) * ledger.Credits(walltime/time.Minute) / 10
	}
	r.jobs[id] = spec
	r.submitted[id] = r.now()
	r.arrivals = append(r.arrivals, r.now())
	r.apply(c)
	if r.l.State.Jobs[id].State == ledger.StateRejected {
		return
	}
	if r.rng.IntN(30) == 0 {
		after := time.Duration(r.rng.Int64N(int64(runtime + 10*time.Minute)))
		r.at(r.now().Add(after), func() {
			if j := r.l.State.Jobs[id]; j != nil && !j.State.Terminal() && r.submitted[id].Equal(r.now().Add(-after)) {
				r.cancels++
				r.apply(ledger.Cancel{Account: acct, Job: id})
			}
		})
	}
}

// apply folds cmd, lets the core (and the new leader, once there is one)
// observe it, keeps the journal entries it emits, and plays the workers'
// part for its orders.
func (r *longRun) apply(cmd ledger.Command) ledger.Result {
	r.t.Helper()
	r.record(cmd)
	res := r.l.Apply(cmd)
	r.core.Observe(r.l.State, cmd, res)
	if r.twin != nil {
		r.twin.Observe(r.l.State, cmd, res)
	}
	for _, e := range res.Effects {
		switch e := e.(type) {
		case ledger.Entry:
			r.msgs++
			if e.Kind == ledger.EntrySeal {
				r.seals[e.Account] = append(r.seals[e.Account], len(r.journal[e.Account]))
			}
			r.journal[e.Account] = append(r.journal[e.Account], ledger.StoredEntry{Entry: e, Msg: r.msgs})
		case ledger.ArchivedJob:
			r.archives++
			r.statuses[e.Job.State]++
			delete(r.submitted, e.Job.ID)
			r.archived[e.Job.Account] = append(r.archived[e.Job.Account], e.Job.ID)
		case ledger.DispatchOrder:
			r.start(e)
		case ledger.CancelOrder:
			// The worker kills the attempt a second later.
			r.at(r.now().Add(time.Second), func() { r.end(e.Job, e.Attempt, 137) })
		}
	}
	return res
}

// start is the worker taking an order: it claims devices, reports started,
// and ends the attempt after the job's runtime.
func (r *longRun) start(o ledger.DispatchOrder) {
	h := r.hosts[o.Host]
	if len(h.free) < o.GPUs {
		r.t.Fatalf("%s dispatched to %s with %d free GPUs, needs %d", o.Job, o.Host, len(h.free), o.GPUs)
	}
	run := &lrRun{host: o.Host, attempt: o.Attempt, devices: slices.Clone(h.free[:o.GPUs]), started: r.now()}
	h.free = h.free[o.GPUs:]
	r.runs[o.Job] = run
	r.apply(ledger.Report{Type: ledger.ReportStarted, Host: o.Host, Job: o.Job, Attempt: o.Attempt, Devices: run.devices, Model: h.model})
	spec := r.jobs[o.Job]
	r.at(r.now().Add(spec.runtime), func() {
		code := spec.exit
		if o.Attempt <= spec.infra {
			code = -1
		}
		r.end(o.Job, o.Attempt, code)
	})
}

// end reports the attempt done (code -1: ended by the infrastructure), if
// it still runs, and frees its devices.
func (r *longRun) end(job string, attempt, code int) {
	run := r.runs[job]
	if run == nil || run.attempt != attempt {
		return // killed by a cancel already
	}
	delete(r.runs, job)
	h := r.hosts[run.host]
	h.free = append(h.free, run.devices...)
	rep := ledger.Report{Type: ledger.ReportDone, Host: run.host, Job: job, Attempt: attempt, ExitCode: code, Runtime: r.now().Sub(run.started)}
	if code == -1 {
		rep.Infra, rep.ExitCode = "simulated Xid 79", 137
	}
	r.apply(rep)
}

// round applies the core's decisions until it has none. After a takeover
// the new leader decides too, and must decide the same.
func (r *longRun) round() {
	for range 1000 {
		cmds := r.core.Decide(r.l.State, r.now())
		if r.twin != nil {
			if got := r.twin.Decide(r.l.State, r.now()); !reflect.DeepEqual(got, cmds) {
				r.t.Fatalf("at %v after the takeover, the new leader decides %+v, the old one %+v", r.now(), got, cmds)
			}
		}
		if len(cmds) == 0 {
			return
		}
		for _, c := range cmds {
			r.apply(c)
		}
	}
	r.t.Fatal("the core kept deciding for 1000 rounds")
}

// runTo advances the clock event by event, and to the core's wake-ups,
// until until, deciding after each.
func (r *longRun) runTo(until time.Time) {
	r.round()
	for {
		next := time.Time{}
		if len(r.events) > 0 {
			next = r.events[0].at
		}
		w := r.core.NextWake(r.l.State, r.now())
		if r.twin != nil {
			if tw := r.twin.NextWake(r.l.State, r.now()); !tw.Equal(w) {
				r.t.Fatalf("at %v after the takeover, the new leader wakes at %v, the old one at %v", r.now(), tw, w)
			}
		}
		if !w.IsZero() && (next.IsZero() || w.Before(next)) {
			next = w
		}
		if next.IsZero() || next.After(until) {
			r.l.Now = until
			return
		}
		r.l.Now = next
		for len(r.events) > 0 && !r.events[0].at.After(r.now()) {
			heap.Pop(&r.events).(timed).fn()
		}
		r.round()
	}
}

// bound is how many jobs the ledger may hold: every job in it was submitted
// within the retention plus the longest a job may stay unfinished, and a
// Poisson stream of lrArrivals per hour puts μ jobs in such a window, more
// than μ + 6√μ + 10 with a chance far below one in a billion per day.
func (r *longRun) bound() int {
	mu := lrArrivals * (lrRetention + lrMaxLife).Hours()
	return int(mu + 6*math.Sqrt(mu) + 10)
}

// checkDay checks the state at the end of day d and returns how many jobs
// it holds: only jobs in flight, each submitted within lrMaxLife, and jobs
// that ended within the retention; no more than the arrivals in the window
// of both, and than the bound from the arrival rate; three accounts.
func (r *longRun) checkDay(d int) int {
	t, s, now := r.t, r.l.State, r.now()
	inFlight, recent := 0, 0
	for id, j := range s.Jobs {
		switch {
		case !j.State.Terminal():
			inFlight++
			if at := r.submitted[id]; now.Sub(at) >= lrMaxLife {
				t.Fatalf("day %d: job %s, submitted %v ago, is still %s", d, id, now.Sub(at), j.State)
			}
		case now.Before(j.EndedAt().Add(lrRetention)):
			recent++
		default:
			t.Fatalf("day %d: job %s ended %v ago (%s), past the retention of %v, and is still in the state",
				d, id, now.Sub(j.EndedAt()), j.State, lrRetention)
		}
	}
	window := now.Add(-lrRetention - lrMaxLife)
	for len(r.arrivals) > 0 && r.arrivals[0].Before(window) {
		r.arrivals = r.arrivals[1:]
	}
	n := len(s.Jobs)
	if n != inFlight+recent {
		t.Fatalf("day %d: %d jobs, %d in flight and %d ended within the retention", d, n, inFlight, recent)
	}
	if n > len(r.arrivals) {
		t.Fatalf("day %d: %d jobs in the state, but only %d were submitted in the last %v", d, n, len(r.arrivals), lrRetention+lrMaxLife)
	}
	if b := r.bound(); n > b {
		t.Fatalf("day %d: %d jobs in the state, more than %d (%.0f jobs an hour over %v)", d, n, b, lrArrivals, lrRetention+lrMaxLife)
	}
	if len(s.Accounts) != 3 {
		t.Fatalf("day %d: %d accounts", d, len(s.Accounts))
	}
	if q := r.core.ArchiveQueued(); q != recent {
		t.Fatalf("day %d: the core queues %d jobs to archive, the state holds %d ended ones", d, q, recent)
	}
	if len(r.submitted) != n {
		t.Fatalf("day %d: the simulation tracks %d jobs, the state holds %d", d, len(r.submitted), n)
	}
	return n
}

// audit runs what gpuq audit runs (ledger.AuditJournal, then the ledger's
// invariants) on the journal as of now. Unless full, each account's journal
// is first cut as a retention would cut it: only entries from its newest
// seal at least a day old are kept, so the audit opens at a seal and takes
// the time of a day's entries. It returns how many entries were posted.
func (r *longRun) audit(d int, full bool) int {
	t := r.t
	var kept []ledger.StoredEntry
	cut := r.now().Add(-24 * time.Hour)
	for _, acct := range []string{"a", "b", "c"} {
		entries := r.journal[acct]
		from := 0
		if !full {
			for _, i := range slices.Backward(r.seals[acct]) {
				if !entries[i].Time.After(cut) {
					from = i
					break
				}
			}
		}
		kept = append(kept, entries[from:]...)
	}
	n, errs := ledger.AuditJournal(r.l.State, r.l.Seq, kept, nil)
	if err := r.l.State.CheckInvariants(); err != nil {
		errs = append(errs, err)
	}
	for _, err := range errs {
		t.Errorf("day %d: audit (full %v) of %d entries: %v", d, full, len(kept), err)
	}
	if len(errs) > 0 {
		t.FailNow()
	}
	if !full && d > 2 && uint64(len(kept)) == r.msgs {
		t.Fatalf("day %d: the daily audit kept all %d entries: the journal was not cut", d, len(kept))
	}
	return n
}

// takeover, at the end of day days, loads the state as a new leader would, from its stored records,
// checks it holds only jobs in flight or within the retention, and runs
// another day with both leaders deciding: the new one must decide exactly
// as the old.
func (r *longRun) takeover(days int) {
	t, s := r.t, r.l.State
	loaded := ledger.New()
	loaded.Seq = s.Seq
	for id, a := range s.Accounts {
		b, err := ledger.MarshalAccount(a)
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Accounts[id], err = ledger.UnmarshalAccount(b); err != nil {
			t.Fatal(err)
		}
	}
	for id, j := range s.Jobs {
		b, err := ledger.MarshalJob(j)
		if err != nil {
			t.Fatal(err)
		}
		if loaded.Jobs[id], err = ledger.UnmarshalJob(b); err != nil {
			t.Fatal(err)
		}
	}
	b, err := ledger.MarshalPricing(s.Pricing)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Pricing, err = ledger.UnmarshalPricing(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loaded, s) {
		t.Fatal("the state read back from its records differs from the state")
	}
	if err := loaded.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	twin := scheduler.NewCore(r.cfg)
	for _, name := range slices.Sorted(maps.Keys(r.hosts)) {
		h := r.hosts[name]
		hb := wire.Heartbeat{Host: name, Simulated: true}
		for i := range h.gpus {
			hb.Devices = append(hb.Devices, wire.Device{UUID: fmt.Sprintf("%s-gpu%d", name, i), Model: h.model, Healthy: true})
		}
		twin.SetHost(hb, r.now())
	}
	twin.Load(loaded)
	inFlight, recent := 0, 0
	for _, j := range loaded.Jobs {
		if j.State.Terminal() {
			recent++
		} else {
			inFlight++
		}
	}
	t.Logf("takeover at day %d: the new leader loads %d accounts and %d jobs (%d in flight, %d ended within the retention) of %d submitted",
		days, len(loaded.Accounts), len(loaded.Jobs), inFlight, recent, r.n)
	if q := twin.ArchiveQueued(); q != recent {
		t.Fatalf("the new leader queues %d jobs to archive, want the %d ended ones", q, recent)
	}
	// The new leader follows the same state from here on.
	r.twin = twin
	before := r.archives
	r.runTo(r.now().Add(24 * time.Hour))
	r.checkDay(days + 1)
	r.audit(days+1, false)
	if r.archives == before {
		t.Error("no job was archived in the day after the takeover")
	}
}
