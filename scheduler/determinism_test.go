// Determinism of the core. Goal: Core's output is a function of its inputs
// alone, never of the order Go happens to iterate a map in or the order
// hosts were set in, so two schedulers (a leader and its successor, or the
// scheduler and `gpuq why`) given one ledger decide, reserve and explain
// alike. Method: rapid generates a ledger state through the real fold
// (accounts with caps and weights, jobs dispatched, running, refused,
// failed by the infrastructure, pending in their retry delay) and host
// heartbeats built to tie often (equal hosts, equal walltimes, equal
// dispatch times); the state is cloned with every map filled in a shuffled
// order and the hosts set in a shuffled order; each clone gets a fresh
// Core, two rounds of Decide (the first round's decisions folded and
// observed in between), NextWake, the backfill reservations, and Explain
// for every waiting job. Every clone must give exactly the first one's
// output.
package scheduler_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

// detCase is one generated input: a ledger, the live hosts' heartbeats,
// the time of the decision round, and the core's configuration.
type detCase struct {
	state *ledger.State
	hosts []wire.Heartbeat
	now   time.Time
	cfg   scheduler.CoreConfig
}

// detOutput is everything a core says about a case, in order.
type detOutput struct {
	Decisions [2][]ledger.Command
	Shadows   [2]map[string]scheduler.Shadow
	Wake      [2]time.Time
	Explain   []string // per waiting job, in id order: its blockers or its error
	Hosts     []wire.Heartbeat
	// Shares are the accounts' fair shares, in id order, to the last bit:
	// a float sum taken in map order differs there first.
	Shares []float64
}

func TestDeterminismDecide(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		c := genDetCase(rt)
		seed := rapid.Uint64().Draw(rt, "shuffle")
		want := runDetCase(rt, shuffledCase(c, rand.New(rand.NewPCG(0, seed))))
		for k := 1; k <= 6; k++ {
			got := runDetCase(rt, shuffledCase(c, rand.New(rand.NewPCG(uint64(k), seed))))
			if !reflect.DeepEqual(got, want) {
				rt.Fatalf("clone %d, filled in another order, gives another output:\n%s", k, firstDiff(got, want))
			}
		}
	})
}

// genDetCase builds a ledger through the fold, with few distinct values
// (GPU counts, walltimes, times) so that ties are common.
func genDetCase(rt *rapid.T) detCase {
	l := ledgertest.NewLog(rt)
	nAccts := rapid.IntRange(1, 4).Draw(rt, "accounts")
	accts := make([]string, nAccts)
	for i := range accts {
		accts[i] = fmt.Sprintf("a%d", i)
		l.Create(accts[i], 1_000_000)
		if w := rapid.IntRange(0, 3).Draw(rt, "weight"); w > 0 {
			l.Apply(ledger.Admin{Account: accts[i], ID: "w", Op: ledger.OpWeight, Weight: w})
		}
		if rapid.IntRange(0, 3).Draw(rt, "capped") == 0 {
			l.Apply(ledger.Admin{Account: accts[i], ID: "lim", Op: ledger.OpLimits, Limits: ledger.Limits{
				MaxRunningJobs: rapid.IntRange(0, 4).Draw(rt, "max_jobs"), MaxRunningGPUs: rapid.IntRange(0, 16).Draw(rt, "max_gpus")}})
		}
	}
	nHosts := rapid.IntRange(1, 4).Draw(rt, "hosts")
	hostGPUs := map[string]int{}
	var hostNames []string
	for i := range nHosts {
		name := fmt.Sprintf("h%d", i)
		hostNames = append(hostNames, name)
		hostGPUs[name] = rapid.SampledFrom([]int{4, 8, 8}).Draw(rt, "host_gpus")
	}
	used := map[string]int{}
	walltimes := []time.Duration{30 * time.Minute, time.Hour, time.Hour, 2 * time.Hour}
	nJobs := rapid.IntRange(1, 24).Draw(rt, "jobs")
	for k := range nJobs {
		id := fmt.Sprintf("j%02d", k)
		acct := rapid.SampledFrom(accts).Draw(rt, "account")
		gpus := rapid.SampledFrom([]int{1, 2, 4, 8}).Draw(rt, "gpus")
		l.Apply(ledger.Submit{Account: acct, ID: id, GPUs: gpus, Cost: 1, Priority: rapid.IntRange(0, 1).Draw(rt, "priority"),
			Walltime: rapid.SampledFrom(walltimes).Draw(rt, "walltime"), MaxAttempts: 4, Command: []string{"train"}})
		// What becomes of it: left pending, dispatched, started, then
		// perhaps refused, failed by the infrastructure or ended.
		fate := rapid.IntRange(0, 6).Draw(rt, "fate")
		host := rapid.SampledFrom(hostNames).Draw(rt, "host")
		if fate == 0 || used[host]+gpus > hostGPUs[host] || l.State.Jobs[id].State != ledger.StatePending {
			continue
		}
		l.Apply(ledger.Dispatch{Job: id, Attempt: 1, Host: host})
		if l.State.Jobs[id].State != ledger.StateDispatched {
			continue // the fold refused it (an account cap)
		}
		switch fate {
		case 1: // dispatched, not started yet
			used[host] += gpus
		case 2: // refused by its worker, busy or not
			l.Apply(ledger.Report{Type: ledger.ReportRejected, Host: host, Job: id, Attempt: 1, Reason: "no",
				Busy: rapid.Bool().Draw(rt, "busy")})
		default:
			devs := make([]string, gpus)
			for d := range devs {
				devs[d] = fmt.Sprintf("%s-%s-%d", host, id, d)
			}
			l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: host, Job: id, Attempt: 1, Devices: devs})
			switch fate {
			case 3: // ended by the infrastructure: it waits out its retry delay
				l.Apply(ledger.Report{Type: ledger.ReportDone, Host: host, Job: id, Attempt: 1, ExitCode: 137,
					Runtime: time.Minute, Infra: "Xid 79"})
			case 4: // succeeded: its use counts in its account's share
				l.Apply(ledger.Report{Type: ledger.ReportDone, Host: host, Job: id, Attempt: 1, Runtime: time.Minute})
			default: // running
				used[host] += gpus
			}
		}
		if rapid.IntRange(0, 2).Draw(rt, "tick") == 0 {
			l.Advance(time.Minute)
		}
	}
	// Heartbeats as the workers would send them: every device of a
	// started attempt held by it, a device now and then unhealthy.
	var hosts []wire.Heartbeat
	for _, name := range hostNames {
		hb := wire.Heartbeat{Host: name}
		for d := range hostGPUs[name] {
			hb.Devices = append(hb.Devices, wire.Device{UUID: fmt.Sprintf("%s-%d", name, d), Healthy: rapid.IntRange(0, 15).Draw(rt, "sick") != 0})
		}
		next := 0
		for _, id := range slices.Sorted(maps.Keys(l.State.Jobs)) {
			j := l.State.Jobs[id]
			if j.Host() != name || j.State != ledger.StateRunning {
				continue
			}
			hb.Running = append(hb.Running, wire.Running{Job: j.ID, Attempt: j.Attempt})
			for range j.GPUs {
				if next < len(hb.Devices) {
					hb.Devices[next].Job, hb.Devices[next].Attempt = j.ID, j.Attempt
					next++
				}
			}
		}
		hosts = append(hosts, hb)
	}
	cfg := scheduler.CoreConfig{NoBackfill: rapid.IntRange(0, 4).Draw(rt, "no_backfill") == 0}
	if rapid.Bool().Draw(rt, "retry_policy") {
		cfg.Retry = scheduler.RetryPolicy{Initial: 30 * time.Second, Multiplier: 1.5, Max: 5 * time.Minute, Jitter: 0.2}
	}
	now := l.Now.Add(rapid.SampledFrom([]time.Duration{0, time.Second, time.Minute, 30 * time.Minute}).Draw(rt, "later"))
	return detCase{state: l.State, hosts: hosts, now: now, cfg: cfg}
}

// runDetCase runs a fresh core over c, which it owns (it folds decisions
// into c.state): Explain for every waiting job; hosts set in c's order,
// the ledger loaded, a round decided, its decisions folded and observed,
// and a second round a minute later.
func runDetCase(rt *rapid.T, c detCase) detOutput {
	var out detOutput
	s := c.state
	for _, id := range slices.Sorted(maps.Keys(s.Jobs)) {
		if st := s.Jobs[id].State; st != ledger.StatePending && st != ledger.StateHeld {
			continue
		}
		bs, err := scheduler.Explain(s, c.hosts, id, c.now, c.cfg)
		out.Explain = append(out.Explain, fmt.Sprintf("%s: %+v %v", id, bs, err))
	}
	core := scheduler.NewCore(c.cfg)
	for _, h := range c.hosts {
		core.SetHost(h, c.now)
	}
	core.Load(s)
	now := c.now
	for round := range 2 {
		out.Decisions[round] = core.Decide(s, now)
		out.Shadows[round] = maps.Clone(core.Shadows())
		out.Wake[round] = core.NextWake(s, now)
		for _, cmd := range out.Decisions[round] {
			s.Seq++
			core.Observe(s, cmd, s.Apply(cmd, s.Seq, now))
		}
		now = now.Add(time.Minute)
	}
	out.Hosts = core.Hosts()
	for _, id := range slices.Sorted(maps.Keys(s.Accounts)) {
		out.Shares = append(out.Shares, core.Share(id, now))
	}
	if err := s.CheckInvariants(); err != nil {
		rt.Fatalf("after the decisions: %v", err)
	}
	return out
}

// shuffledCase returns a deep copy of c whose maps were filled in an order
// drawn from perm, and whose hosts come in another order. (Go randomizes
// each map iteration as well; the shuffle adds the insertion order.)
func shuffledCase(c detCase, perm *rand.Rand) detCase {
	s := c.state.Clone()
	out := ledger.New()
	out.Pricing, out.Seq = s.Pricing, s.Seq
	accts := slices.Sorted(maps.Keys(s.Accounts))
	perm.Shuffle(len(accts), func(i, k int) { accts[i], accts[k] = accts[k], accts[i] })
	for _, id := range accts {
		out.Accounts[id] = s.Accounts[id]
	}
	jobs := slices.Sorted(maps.Keys(s.Jobs))
	perm.Shuffle(len(jobs), func(i, k int) { jobs[i], jobs[k] = jobs[k], jobs[i] })
	for _, id := range jobs {
		out.Jobs[id] = s.Jobs[id]
	}
	hosts := slices.Clone(c.hosts)
	perm.Shuffle(len(hosts), func(i, k int) { hosts[i], hosts[k] = hosts[k], hosts[i] })
	return detCase{state: out, hosts: hosts, now: c.now, cfg: c.cfg}
}

// firstDiff names the first part of two outputs that differs.
func firstDiff(got, want detOutput) string {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := range gv.NumField() {
		if g, w := gv.Field(i).Interface(), wv.Field(i).Interface(); !reflect.DeepEqual(g, w) {
			return fmt.Sprintf("%s:\n got  %+v\n want %+v", gv.Type().Field(i).Name, g, w)
		}
	}
	return "(no field differs)"
}

// TestDeterminismRetryDelay checks the closed form of RetryPolicy.Delay:
// Initial × Multiplier^(n−1) capped at Max, the same on every call, with
// a jitter within its bounds that depends only on the job and the count.
func TestDeterminismRetryDelay(t *testing.T) {
	t.Parallel()
	p := scheduler.RetryPolicy{Initial: 10 * time.Second, Multiplier: 3, Max: time.Hour}
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{0, 10 * time.Second}, {1, 10 * time.Second}, {2, 30 * time.Second}, {3, 90 * time.Second},
		{6, 2430 * time.Second}, {7, time.Hour}, {64, time.Hour}, {1 << 30, time.Hour},
	} {
		if got := p.Delay("j", tc.failures); got != tc.want {
			t.Errorf("Delay(j, %d) = %v, want %v", tc.failures, got, tc.want)
		}
	}
	// The defaults: 10s, doubling, at most 10m.
	var def scheduler.RetryPolicy
	for n, want := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second,
		160 * time.Second, 320 * time.Second, 10 * time.Minute, 10 * time.Minute} {
		if got := def.Delay("j", n+1); got != want {
			t.Errorf("default Delay(j, %d) = %v, want %v", n+1, got, want)
		}
	}
	// Jitter spreads each delay by at most ±Jitter of it, the same for the
	// same job and count, and differently across jobs.
	jp := scheduler.RetryPolicy{Initial: 10 * time.Second, Multiplier: 2, Max: 10 * time.Minute, Jitter: 0.5}
	seen := map[time.Duration]bool{}
	for k := range 50 {
		job := fmt.Sprintf("job-%d", k)
		for n := 1; n <= 8; n++ {
			d, base := jp.Delay(job, n), p2(n)
			if d != jp.Delay(job, n) {
				t.Fatalf("Delay(%s, %d) changed between calls", job, n)
			}
			if d < base/2 || d > base*3/2 {
				t.Errorf("Delay(%s, %d) = %v, want within ±50%% of %v", job, n, d, base)
			}
			if n == 1 {
				seen[d] = true
			}
		}
	}
	if len(seen) < 40 {
		t.Errorf("50 jobs got only %d distinct jittered first delays", len(seen))
	}
}

// p2 is 10s doubling per failure, at most 10m.
func p2(n int) time.Duration { return min(10*time.Second<<(n-1), 10*time.Minute) }
