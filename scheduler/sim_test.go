// A deterministic simulation of the scheduler core and the ledger: a fake
// clock, simulated hosts that run each dispatched job for its scripted
// runtime (or fail it as scripted), and one seeded random source for the
// workload. Every command goes through the real fold (ledgertest.Log checks
// the invariants and recomputes the journal after each one), and every
// decision comes from the real Core. A failing run prints its seed; replay
// it with -sim.seed=N: a run is a function of its seed alone (no map order
// reaches an event, no wall clock or global random source is read), and
// TestDeterminismSimReplay shows it by comparing the traces of two runs.
package scheduler_test

import (
	"container/heap"
	"flag"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

var simSeed = flag.Uint64("sim.seed", 0, "seed of the scheduling simulations; 0 picks one per run")

// seed returns the seed a simulation test uses, and makes a failure say it.
func seed(t *testing.T) uint64 {
	s := *simSeed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("simulation seed %d: replay with go test ./scheduler -run '%s' -sim.seed=%d", s, t.Name(), s)
		}
	})
	return s
}

// simJob scripts how a job behaves on a host.
type simJob struct {
	runtime time.Duration // how long each attempt runs
	exit    int           // the last attempt's exit code
	infra   int           // the first infra attempts end as infrastructure failures
}

type simHost struct {
	name, model string
	gpus        int
	free        []string // device ids not in use
}

type running struct {
	host    string
	attempt int
	devices []string
	end     time.Time
}

type timed struct {
	at  time.Time
	seq int
	fn  func()
}

type timeline []timed

func (t timeline) Len() int { return len(t) }
func (t timeline) Less(i, j int) bool {
	if !t[i].at.Equal(t[j].at) {
		return t[i].at.Before(t[j].at)
	}
	return t[i].seq < t[j].seq
}
func (t timeline) Swap(i, j int) { t[i], t[j] = t[j], t[i] }
func (t *timeline) Push(x any)   { *t = append(*t, x.(timed)) }
func (t *timeline) Pop() any {
	old := *t
	x := old[len(old)-1]
	*t = old[:len(old)-1]
	return x
}

type sim struct {
	t       *testing.T
	rng     *rand.Rand
	l       *ledgertest.Log
	core    *scheduler.Core
	hosts   map[string]*simHost
	jobs    map[string]simJob
	running map[string]running
	events  timeline
	nextSeq int

	// What happened, for the assertions.
	gpuSeconds map[string]float64   // per account, of attempts that ran
	accepted   map[string]time.Time // when each job was reserved
	starts     map[string][]time.Time
	shadowAt   map[string]time.Time // the first backfill reservation of each job
	picks      int                  // dispatches so far
	// trace is every command applied, in order, with its time: two runs
	// of one seed must have the same.
	trace []string
	// onStep runs after every applied command.
	onStep func()
	// orders, if set, plays the workers' part for every order instead of
	// start.
	orders func(ledger.Effect)
}

func newSim(t *testing.T, seed uint64, cfg scheduler.CoreConfig) *sim {
	s := &sim{t: t, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), l: ledgertest.NewLog(t),
		core: scheduler.NewCore(cfg), hosts: map[string]*simHost{}, jobs: map[string]simJob{},
		running: map[string]running{}, gpuSeconds: map[string]float64{}, accepted: map[string]time.Time{},
		starts: map[string][]time.Time{}, shadowAt: map[string]time.Time{}}
	s.core.Load(s.l.State)
	return s
}

func (s *sim) now() time.Time { return s.l.Now }

func (s *sim) host(name, model string, gpus int) {
	h := &simHost{name: name, model: model, gpus: gpus}
	hb := wire.Heartbeat{Host: name, Simulated: true}
	for i := range gpus {
		id := fmt.Sprintf("%s-gpu%d", name, i)
		h.free = append(h.free, id)
		hb.Devices = append(hb.Devices, wire.Device{UUID: id, Model: model, Healthy: true})
	}
	s.hosts[name] = h
	s.core.SetHost(hb, s.now())
}

// at schedules fn at time at.
func (s *sim) at(at time.Time, fn func()) {
	s.nextSeq++
	heap.Push(&s.events, timed{at: at, seq: s.nextSeq, fn: fn})
}

// apply folds cmd now, lets Core observe it, and plays the simulated
// workers' part for its orders.
func (s *sim) apply(cmd ledger.Command) ledger.Result {
	s.t.Helper()
	s.record(cmd)
	res := s.l.Apply(cmd)
	s.core.Observe(s.l.State, cmd, res)
	for _, e := range res.Effects {
		switch e := e.(type) {
		case ledger.JobEvent:
			if e.Type == ledger.EventAccepted {
				if _, ok := s.accepted[e.Job]; !ok {
					s.accepted[e.Job] = s.now()
				}
			}
		case ledger.DispatchOrder:
			if s.orders != nil {
				s.orders(e)
			} else {
				s.start(e)
			}
		case ledger.CancelOrder:
			if s.orders != nil {
				s.orders(e)
			}
		}
	}
	if s.onStep != nil {
		s.onStep()
	}
	return res
}

// record adds cmd, about to be applied at the next sequence now, to the
// trace.
func (s *sim) record(cmd ledger.Command) {
	s.trace = append(s.trace, fmt.Sprintf("%d %s %T %+v", s.l.Seq+1, s.now().Format(time.RFC3339Nano), cmd, cmd))
}

// create creates account id with balance, through apply (so the core
// observes it and the trace has it).
func (s *sim) create(id string, balance ledger.Credits) {
	s.t.Helper()
	res := s.apply(ledger.Admin{Account: id, ID: "create-" + id, Op: ledger.OpCreate, Balance: balance})
	if ev, ok := ledgertest.First[ledger.AccountEvent](res); !ok || ev.Type != ledger.EventCreated {
		s.t.Fatalf("create %s: %+v", id, res.Effects)
	}
}

// start is the simulated worker taking an order: it claims devices, reports
// started, and schedules the attempt's end.
func (s *sim) start(o ledger.DispatchOrder) {
	h := s.hosts[o.Host]
	if len(h.free) < o.GPUs {
		s.t.Fatalf("%s dispatched to %s with %d free GPUs, needs %d", o.Job, o.Host, len(h.free), o.GPUs)
	}
	devs := append([]string(nil), h.free[:o.GPUs]...)
	h.free = h.free[o.GPUs:]
	spec := s.jobs[o.Job]
	end := s.now().Add(spec.runtime)
	s.running[o.Job] = running{host: o.Host, attempt: o.Attempt, devices: devs, end: end}
	s.starts[o.Job] = append(s.starts[o.Job], s.now())
	s.picks++
	s.apply(ledger.Report{Type: ledger.ReportStarted, Host: o.Host, Job: o.Job, Attempt: o.Attempt, Devices: devs, Model: h.model})
	started := s.now()
	s.at(end, func() {
		r := s.running[o.Job]
		delete(s.running, o.Job)
		h.free = append(h.free, r.devices...)
		j := s.l.Job(o.Job)
		s.gpuSeconds[j.Account] += float64(o.GPUs) * s.now().Sub(started).Seconds()
		rep := ledger.Report{Type: ledger.ReportDone, Host: o.Host, Job: o.Job, Attempt: o.Attempt,
			ExitCode: spec.exit, Runtime: s.now().Sub(started)}
		if o.Attempt <= spec.infra {
			rep.Infra, rep.ExitCode = "simulated Xid 79", 137
		}
		s.apply(rep)
	})
}

// submit submits a job that runs for runtime.
func (s *sim) submit(c ledger.Submit, spec simJob) ledger.Result {
	s.t.Helper()
	if c.Command == nil {
		c.Command = []string{"train"}
	}
	s.jobs[c.ID] = spec
	return s.apply(c)
}

// round applies the core's decisions until it has none.
func (s *sim) round() {
	for range 1000 {
		cmds := s.core.Decide(s.l.State, s.now())
		for id, sh := range s.core.Shadows() {
			if _, ok := s.shadowAt[id]; !ok {
				s.shadowAt[id] = sh.At
			}
		}
		if len(cmds) == 0 {
			return
		}
		for _, c := range cmds {
			s.apply(c)
		}
	}
	s.t.Fatal("the core kept deciding for 1000 rounds")
}

// run advances the clock event by event (and to the core's wake-ups) until
// until, deciding after each.
func (s *sim) run(until time.Time) {
	s.round()
	for {
		next := time.Time{}
		if len(s.events) > 0 {
			next = s.events[0].at
		}
		if w := s.core.NextWake(s.l.State, s.now()); !w.IsZero() && (next.IsZero() || w.Before(next)) {
			next = w
		}
		if next.IsZero() || next.After(until) {
			s.l.Now = until
			return
		}
		s.l.Now = next
		for len(s.events) > 0 && !s.events[0].at.After(s.now()) {
			heap.Pop(&s.events).(timed).fn()
		}
		s.round()
	}
}

// fairShareWeights are the accounts of TestSimFairShare and their weights.
var fairShareWeights = map[string]int{"a": 1, "b": 2, "c": 3}

// fairShareRun runs the workload of TestSimFairShare for d: three
// always-backlogged accounts with weights 1:2:3 on two 8-GPU hosts, each
// end submitting a new job so that five stay pending per account. It
// returns the sim, still backlogging, for more.
func fairShareRun(t *testing.T, seed uint64, d time.Duration) *sim {
	s := newSim(t, seed, scheduler.CoreConfig{HalfLife: time.Hour})
	for _, acct := range slices.Sorted(maps.Keys(fairShareWeights)) {
		s.create(acct, ledger.MaxCredits/8)
		s.apply(ledger.Admin{Account: acct, ID: "w", Op: ledger.OpWeight, Weight: fairShareWeights[acct]})
	}
	s.host("h1", "H100", 8)
	s.host("h2", "H100", 8)
	n := 0
	backlog := func(acct string) {
		n++
		id := fmt.Sprintf("%s-%d", acct, n)
		runtime := time.Duration(10+s.rng.IntN(21)) * time.Minute
		s.submit(ledger.Submit{Account: acct, ID: id, GPUs: 1 + s.rng.IntN(2), Cost: 1, Walltime: 40 * time.Minute}, simJob{runtime: runtime})
	}
	// Keep five jobs pending per account: each end submits a new one. In
	// account order: which account draws first changes every draw after.
	s.onStep = func() {
		for _, acct := range slices.Sorted(maps.Keys(s.l.State.Accounts)) {
			pending := 0
			for _, j := range s.l.State.Jobs {
				if j.Account == acct && j.State == ledger.StatePending {
					pending++
				}
			}
			for ; pending < 5; pending++ {
				backlog(acct)
			}
		}
	}
	s.onStep()
	s.run(s.now().Add(d))
	return s
}

// TestSimFairShare runs three always-backlogged accounts with weights 1:2:3
// on a saturated cluster for two days: each gets its weight's share of the
// GPU-seconds, within 3 percentage points. Then a fourth account joins and
// reaches its share of the cluster within a bounded number of picks.
func TestSimFairShare(t *testing.T) {
	t.Parallel()
	s := fairShareRun(t, seed(t), 48*time.Hour)
	total := 0.0
	for _, acct := range slices.Sorted(maps.Keys(s.gpuSeconds)) { // a float sum: in account order
		total += s.gpuSeconds[acct]
	}
	if total < 0.95*16*48*3600 {
		t.Errorf("the cluster was not saturated: %.0f of %d GPU-seconds used", total, 16*48*3600)
	}
	for _, acct := range slices.Sorted(maps.Keys(fairShareWeights)) {
		w := fairShareWeights[acct]
		got, want := s.gpuSeconds[acct]/total, float64(w)/6
		t.Logf("account %s (weight %d): %.1f%% of GPU-seconds, fair share %.1f%%", acct, w, 100*got, 100*want)
		if got < want-0.03 || got > want+0.03 {
			t.Errorf("account %s got %.1f%% of the GPU-seconds, want %.1f%% ± 3", acct, 100*got, 100*want)
		}
	}

	// A newcomer with weight 2 of 8 should soon hold a quarter of the 16
	// GPUs: count the picks until it does.
	s.create("d", ledger.MaxCredits/8)
	s.apply(ledger.Admin{Account: "d", ID: "w", Op: ledger.OpWeight, Weight: 2})
	reached, base := -1, s.picks
	prev := s.onStep
	s.onStep = func() {
		prev()
		if a := s.l.State.Accounts["d"]; reached < 0 && a.RunningGPUs >= 4 {
			reached = s.picks - base
		}
	}
	s.run(s.now().Add(2 * time.Hour))
	if reached < 0 {
		t.Fatalf("the newcomer never held 4 GPUs in 2 hours (%d picks)", s.picks-base)
	}
	t.Logf("the newcomer held its share after %d picks", reached)
	if reached > 16 {
		t.Errorf("the newcomer took %d picks to reach its share, want at most 16", reached)
	}
}

// TestSimCapsAndLiveness runs random workloads over random account caps:
// no account ever runs more jobs or GPUs than its caps allow, an account at
// its cap never stops another from starting, and every job ends.
func TestSimCapsAndLiveness(t *testing.T) {
	t.Parallel()
	base := seed(t)
	for i := range uint64(20) {
		capsRun(t, base+i)
	}
}

// capsRun is one run of TestSimCapsAndLiveness, on seed.
func capsRun(t *testing.T, seed uint64) *sim {
	s := newSim(t, seed, scheduler.CoreConfig{})
	accts := []string{"a", "b", "c"}
	for _, acct := range accts {
		s.create(acct, 1_000_000)
		s.apply(ledger.Admin{Account: acct, ID: "lim", Op: ledger.OpLimits,
			Limits: ledger.Limits{MaxRunningJobs: s.rng.IntN(4), MaxRunningGPUs: s.rng.IntN(9)}})
	}
	s.host("h1", "H100", 8)
	s.host("h2", "H200", 4)
	var ids []string
	for k := range 60 {
		id := fmt.Sprintf("j%d", k)
		ids = append(ids, id)
		acct := accts[s.rng.IntN(len(accts))]
		gpus := 1 + s.rng.IntN(4)
		if lim := s.l.Account(acct).Limits.MaxRunningGPUs; lim > 0 && gpus > lim {
			gpus = lim // a job wider than its account's GPU cap could never run
		}
		at := s.now().Add(time.Duration(s.rng.IntN(120)) * time.Minute)
		runtime := time.Duration(1+s.rng.IntN(60)) * time.Minute
		s.at(at, func() {
			s.submit(ledger.Submit{Account: acct, ID: id, GPUs: gpus, Cost: 1, Walltime: 2 * time.Hour}, simJob{runtime: runtime})
		})
	}
	s.onStep = func() {
		for _, a := range s.l.State.Accounts {
			if m := a.Limits.MaxRunningJobs; m > 0 && a.RunningJobs > m {
				t.Fatalf("seed %d: account %s runs %d jobs, cap %d", seed, a.ID, a.RunningJobs, m)
			}
			if m := a.Limits.MaxRunningGPUs; m > 0 && a.RunningGPUs > m {
				t.Fatalf("seed %d: account %s runs %d GPUs, cap %d", seed, a.ID, a.RunningGPUs, m)
			}
		}
	}
	s.run(s.now().Add(48 * time.Hour))
	for _, id := range ids {
		if j := s.l.State.Jobs[id]; j == nil || j.State != ledger.StateSucceeded {
			t.Fatalf("seed %d: job %s did not finish: %+v", seed, id, j)
		}
	}
	return s
}

// TestSimHeldJobStartsWhenBucketCovers holds a job its account cannot pay
// for, and checks it is reserved, and dispatched, at the exact nanosecond
// the refill covers it — including a fraction carried from before.
func TestSimHeldJobStartsWhenBucketCovers(t *testing.T) {
	t.Parallel()
	s := newSim(t, seed(t), scheduler.CoreConfig{})
	s.create("a", 0)
	s.apply(ledger.Admin{Account: "a", ID: "r", Op: ledger.OpRefill, RatePerHour: 7, Cap: 1000})
	s.host("h", "H100", 8)
	t0 := s.now()
	s.l.Now = t0.Add(5 * time.Minute) // 35/60 of a credit is carried
	s.submit(ledger.Submit{Account: "a", ID: "held", GPUs: 1, Cost: 3, Hold: true, Walltime: time.Hour}, simJob{runtime: time.Minute})
	if j := s.l.Job("held"); j.State != ledger.StateHeld {
		t.Fatalf("job is %s, want held", j.State)
	}
	s.run(t0.Add(2 * time.Hour))
	// 3 credits at 7 per hour need 3/7 h = 25m42.857142857s after t0;
	// the refill adds ⌊7·elapsed/hour⌋, so the first covering nanosecond
	// is ⌈3·3600e9/7⌉ ns.
	want := t0.Add(time.Duration((3*int64(time.Hour) + 6) / 7))
	if got := s.accepted["held"]; !got.Equal(want) {
		t.Errorf("reserved at %v after t0, want exactly %v", got.Sub(t0), want.Sub(t0))
	}
	if st := s.starts["held"]; len(st) != 1 || !st[0].Equal(want) {
		t.Errorf("dispatched at %v, want %v", st, want)
	}
	if j := s.l.Job("held"); j.State != ledger.StateSucceeded || j.Charged != 3 {
		t.Errorf("held job ended %s charged %d", j.State, j.Charged)
	}
}

// TestSimMeteredCharges runs metered jobs on two GPU models with random
// runtimes and exits, and checks every charge against runtime × price
// computed here, to the credit.
func TestSimMeteredCharges(t *testing.T) {
	t.Parallel()
	s := newSim(t, seed(t), scheduler.CoreConfig{})
	s.create("a", ledger.MaxCredits/2)
	prices := map[string]ledger.Credits{"H100": 3600, "H200": 7777}
	s.apply(ledger.SetPricing{ID: "p", PerGPUHour: prices, Default: 1, FailurePercent: 40})
	s.host("h100", "H100", 8)
	s.host("h200", "H200", 8)
	var ids []string
	for k := range 80 {
		id := fmt.Sprintf("m%d", k)
		ids = append(ids, id)
		spec := simJob{runtime: time.Duration(s.rng.Int64N(int64(50 * time.Minute)))}
		if s.rng.IntN(4) == 0 {
			spec.exit = 1
		}
		if s.rng.IntN(5) == 0 {
			spec.infra = 1
		}
		s.submit(ledger.Submit{Account: "a", ID: id, GPUs: 1 + s.rng.IntN(8), Metered: true, Walltime: time.Hour}, spec)
	}
	before := s.l.Account("a").Balance
	s.run(s.now().Add(72 * time.Hour))
	var spent ledger.Credits
	for _, id := range ids {
		j := s.l.Job(id)
		if !j.State.Terminal() {
			t.Fatalf("%s is %s", id, j.State)
		}
		spec := s.jobs[id]
		last := j.Attempts()[len(j.Attempts())-1]
		price := prices[s.hosts[last.Host].model]
		secs := new(big.Int).SetInt64(int64((spec.runtime + time.Second - 1) / time.Second))
		full := new(big.Int).Mul(big.NewInt(int64(j.GPUs)), secs)
		full.Mul(full, big.NewInt(int64(price)))
		full.Add(full, big.NewInt(3599))
		full.Quo(full, big.NewInt(3600))
		want := full.Int64()
		if spec.exit != 0 {
			want = want * 40 / 100
		}
		if got := int64(j.Charged); got != want {
			t.Errorf("%s: %d GPUs, %v on %s at %d: charged %d, want %d", id, j.GPUs, spec.runtime, last.Host, price, got, want)
		}
		for _, a := range j.Attempts()[:len(j.Attempts())-1] {
			if a.Charged != 0 {
				t.Errorf("%s: infrastructure-failed attempt %d was charged %d", id, a.N, a.Charged)
			}
		}
		spent += j.Charged
	}
	if got := before - s.l.Account("a").Balance; got != spent {
		t.Errorf("balance fell by %d, the charges sum to %d", got, spent)
	}
}

// TestSimBackfillNeverDelaysAWideJob runs random streams of small jobs and
// wide ones on one host, all of one account and priority, and checks that
// every wide job starts no later than the reservation made when it first
// had to wait: nothing started after it delays it.
func TestSimBackfillNeverDelaysAWideJob(t *testing.T) {
	t.Parallel()
	base := seed(t)
	backfilled := 0
	for i := range uint64(30) {
		s := newSim(t, base+i, scheduler.CoreConfig{})
		s.create("a", ledger.MaxCredits/2)
		s.host("h", "H100", 8)
		var wide []string
		for k := range 40 {
			id := fmt.Sprintf("j%d", k)
			gpus, walltime := 1+s.rng.IntN(3), time.Duration(10+s.rng.IntN(110))*time.Minute
			if s.rng.IntN(6) == 0 {
				gpus = 8
				wide = append(wide, id)
			}
			runtime := time.Duration(s.rng.Int64N(int64(walltime)))
			at := s.now().Add(time.Duration(s.rng.IntN(180)) * time.Minute)
			s.at(at, func() {
				s.submit(ledger.Submit{Account: "a", ID: id, GPUs: gpus, Cost: 1, Walltime: walltime}, simJob{runtime: runtime})
			})
		}
		s.run(s.now().Add(72 * time.Hour))
		for _, id := range wide {
			res, ok := s.shadowAt[id]
			if !ok {
				continue // it never had to wait
			}
			if st := s.starts[id]; len(st) == 0 || st[0].After(res) {
				t.Fatalf("seed %d: wide job %s reserved for %v started at %v", base+i, id, res, st)
			}
		}
		for id, st := range s.starts {
			j := s.l.Job(id)
			for _, w := range wide {
				if wj := s.l.Job(w); j.SubmitSeq > wj.SubmitSeq && len(st) > 0 && len(s.starts[w]) > 0 && st[0].Before(s.starts[w][0]) {
					backfilled++
				}
			}
		}
	}
	if backfilled == 0 {
		t.Error("no small job ever backfilled ahead of a wide one")
	}
	t.Logf("%d small jobs started ahead of wide jobs submitted before them", backfilled)
}

// TestSimBackfillScenario: a wide job waits for a running one; a small job
// that ends before the wide one can start is backfilled, one that would
// run past it is not — unless backfill is turned off, when it delays the
// wide job.
func TestSimBackfillScenario(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		s := newSim(t, 1, scheduler.CoreConfig{NoBackfill: off})
		s.create("a", 1000)
		s.host("h", "H100", 8)
		s.submit(ledger.Submit{Account: "a", ID: "running", GPUs: 4, Cost: 1, Walltime: time.Hour}, simJob{runtime: time.Hour})
		s.round()
		s.submit(ledger.Submit{Account: "a", ID: "wide", GPUs: 8, Cost: 1, Walltime: time.Hour}, simJob{runtime: time.Hour})
		s.submit(ledger.Submit{Account: "a", ID: "short", GPUs: 2, Cost: 1, Walltime: 30 * time.Minute}, simJob{runtime: 30 * time.Minute})
		s.submit(ledger.Submit{Account: "a", ID: "long", GPUs: 2, Cost: 1, Walltime: 3 * time.Hour}, simJob{runtime: 3 * time.Hour})
		start := s.now()
		s.run(start.Add(10 * time.Hour))
		at := func(id string) time.Duration { return s.starts[id][0].Sub(start) }
		if at("short") != 0 {
			t.Errorf("backfill off=%v: the short job started after %v, want at once", off, at("short"))
		}
		if !off && (at("wide") != time.Hour || at("long") != 2*time.Hour) {
			t.Errorf("backfill on: wide started at %v (want 1h), long at %v (want after wide, 2h)", at("wide"), at("long"))
		}
		if off && (at("long") != 0 || at("wide") != 3*time.Hour) {
			t.Errorf("backfill off: long started at %v (want at once), wide at %v (want delayed to 3h)", at("long"), at("wide"))
		}
	}
}

// TestSimRetriesFollowThePolicy fails attempts by the infrastructure and
// checks each retry starts exactly its backoff after the failure, that
// only the successful attempt is charged, and that a job out of attempts
// fails with every attempt listed.
func TestSimRetriesFollowThePolicy(t *testing.T) {
	t.Parallel()
	s := newSim(t, seed(t), scheduler.CoreConfig{Retry: scheduler.RetryPolicy{Initial: 10 * time.Second, Multiplier: 3, Max: time.Hour}})
	s.create("a", 1000)
	s.host("h", "H100", 8)
	s.submit(ledger.Submit{Account: "a", ID: "third-time", GPUs: 1, Cost: 100, MaxAttempts: 3}, simJob{runtime: time.Minute, infra: 2})
	s.submit(ledger.Submit{Account: "a", ID: "gives-up", GPUs: 1, Cost: 100, MaxAttempts: 2}, simJob{runtime: time.Minute, infra: 5})
	start := s.now()
	s.run(start.Add(time.Hour))
	st := s.starts["third-time"]
	want := []time.Duration{0, time.Minute + 10*time.Second, 2*time.Minute + 40*time.Second}
	if len(st) != 3 {
		t.Fatalf("third-time started %d times", len(st))
	}
	for i, w := range want {
		if got := st[i].Sub(start); got != w {
			t.Errorf("attempt %d started at %v, want %v", i+1, got, w)
		}
	}
	if j := s.l.Job("third-time"); j.State != ledger.StateSucceeded || j.Charged != 100 {
		t.Errorf("third-time: %s charged %d", j.State, j.Charged)
	}
	g := s.l.Job("gives-up")
	if g.State != ledger.StateFailed || g.Reason() != ledger.ReasonAttemptsExhausted || len(g.Attempts()) != 2 || g.Charged != 0 {
		t.Errorf("gives-up: %s %s, %d attempts, charged %d", g.State, g.Reason(), len(g.Attempts()), g.Charged)
	}
	if a := s.l.Account("a"); a.Balance != 900 || a.Reserved != 0 {
		t.Errorf("account: %+v", a)
	}
}
