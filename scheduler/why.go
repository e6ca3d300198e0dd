package scheduler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// Blocker is one reason a pending job is not running yet.
type Blocker struct {
	// Kind is machine-readable: "backoff" (its retry delay),
	// "max_running_jobs", "max_running_gpus", "no_hosts",
	// "no_matching_host" (no live host has the GPU model it asks for),
	// "too_wide",
	// "no_free_gpus", "host_backoff" (the only hosts with room refused
	// orders and are backed off), "queue", "backfill_reserved" (the job
	// holds the backfill reservation: when it starts at the latest),
	// "backfill_blocked" (it would delay the job that holds it),
	// "waiting_on_dependency" (it waits for the jobs the message names) and
	// "user_hold" (its owner paused it), and for a held job "credits" and
	// "held_behind".
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Explain lists every reason the pending or held job id is not running at
// now, given the ledger, the live hosts' heartbeats and the scheduler's
// configuration: for a held job, when the refill lets its account pay; for a
// pending one, its retry delay, its account's caps, the hosts (none, none
// wide enough, none with enough free GPUs, those with room backed off after
// refusing orders), and the jobs queued ahead of it. Free GPUs are counted
// as Decide counts them: a GPU a heartbeat shows held by any attempt is not
// free.
// It applies the rules Decide does, and reports all that apply, not just
// the first. An empty list means nothing holds the job back: the next
// decision round will dispatch it.
func Explain(s *ledger.State, hosts []wire.Heartbeat, id string, now time.Time, cfg CoreConfig) ([]Blocker, error) {
	j := s.Jobs[id]
	if j == nil {
		return nil, fmt.Errorf("no job %s", id)
	}
	if j.State == ledger.StateHeld {
		return append(explainHeld(s, j, now), gateBlockers(s, j)...), nil
	}
	if j.State != ledger.StatePending {
		return nil, fmt.Errorf("job %s is %s, not waiting", id, j.State)
	}
	if j.Gated() {
		return gateBlockers(s, j), nil
	}
	core := NewCore(cfg)
	core.Load(s)
	for _, h := range hosts {
		core.SetHost(h, now)
	}
	var out []Blocker
	add := func(kind, format string, args ...any) {
		out = append(out, Blocker{Kind: kind, Message: fmt.Sprintf(format, args...)})
	}
	if at := core.retryAt(j); now.Before(at) {
		add("backoff", "attempt %d waits out its retry delay until %s (%s from now) after %s",
			j.Attempt+1, at.UTC().Format(time.RFC3339), at.Sub(now).Round(time.Second), j.Reason())
	}
	for _, b := range ledger.CapBlocks(s.Accounts[j.Account], ledger.Running{}, j.GPUs) {
		add(string(b.Reason), "%s", b.Message())
	}
	used := map[string]int{}
	for _, o := range s.Jobs {
		if o.State.OnHost() {
			used[o.Host()] += o.GPUs
		}
	}
	byName := slices.SortedFunc(slices.Values(hosts), func(a, b wire.Heartbeat) int { return cmp.Compare(a.Host, b.Host) })
	largest, mostFree, freest, strayed := 0, 0, "", ""
	var backedOff []string // hosts with room for the job, backed off
	roomNow := false       // some host with room is not backed off
	matching := 0          // hosts of the model the job asks for
	for _, h := range byName {
		hs := core.hosts[h.Host]
		if !modelMatches(hs.model, j.GPUModel()) {
			continue // the job cannot run there at all
		}
		matching++
		largest = max(largest, len(h.Devices))
		if f := hs.free(); f > mostFree {
			mostFree, freest = f, h.Host
		}
		if hs.free() < j.GPUs && hs.free()+hs.stray() >= j.GPUs && strayed == "" {
			strayed = fmt.Sprintf(" (on %s, %d GPUs are held by attempts the ledger does not run there: a job just ended, or a restarted worker's stale runs)", h.Host, hs.stray())
		}
		if hs.free() >= j.GPUs {
			if _, until := core.BackedOff(h.Host); now.Before(until) {
				backedOff = append(backedOff, fmt.Sprintf("%s %s; it gets no new one until %s (%s from now)",
					h.Host, core.failuresText(h.Host), until.UTC().Format(time.RFC3339Nano), until.Sub(now).Round(time.Millisecond)))
			} else {
				roomNow = true
			}
		}
	}
	switch {
	case len(hosts) == 0:
		add("no_hosts", "no worker is heartbeating: start a worker (gpuq worker) or check its connection")
	case matching == 0:
		add("no_matching_host", "it needs GPU model %q; no live host has it (live hosts have %s; it fails as unplaceable if no such host joins)",
			j.GPUModel(), liveModels(core.hostList()))
	case j.GPUs > largest && j.GPUModel() != "":
		add("too_wide", "it needs %d GPUs of model %q; the largest live host with that model has %d (it fails as unplaceable if no larger host joins)", j.GPUs, j.GPUModel(), largest)
	case j.GPUs > largest:
		add("too_wide", "it needs %d GPUs; the largest live host has %d (it fails as unplaceable if no larger host joins)", j.GPUs, largest)
	case mostFree < j.GPUs && freest == "":
		add("no_free_gpus", "it needs %d GPUs; no host has a free GPU now%s", j.GPUs, strayed)
	case mostFree < j.GPUs:
		add("no_free_gpus", "it needs %d GPUs; the most free on any host is %d, on %s%s", j.GPUs, mostFree, freest, strayed)
	case !roomNow && len(backedOff) > 0:
		add("host_backoff", "the hosts with room for it are backed off after refusing orders or losing attempts to the infrastructure: %s", strings.Join(backedOff, "; "))
	}
	// The queue order, as Decide sees it: priority, then the accounts'
	// fair shares, then age.
	mine := core.share(j.Account)
	higher, fairer, older := 0, 0, 0
	fairerAccts := map[string]bool{}
	for _, o := range s.Jobs {
		if o.State != ledger.StatePending || o.ID == j.ID || o.Gated() {
			continue
		}
		theirs := core.share(o.Account)
		switch {
		case o.Priority > j.Priority:
			higher++
		case o.Priority < j.Priority:
		case o.Account != j.Account && theirs < mine:
			fairer++
			fairerAccts[o.Account] = true
		case (o.Account == j.Account || theirs == mine) && o.SubmitSeq < j.SubmitSeq:
			older++
		}
	}
	if n := higher + fairer + older; n > 0 {
		msg := fmt.Sprintf("%d jobs are ahead of it in the queue: %d of higher priority", n, higher)
		if fairer > 0 {
			msg += fmt.Sprintf(", %d from %d accounts with a smaller fair share of recent use (account %s has used %.0f GPU-seconds per unit of weight)",
				fairer, len(fairerAccts), j.Account, core.Share(j.Account, now))
		}
		msg += fmt.Sprintf(", %d older at priority %d", older, j.Priority)
		add("queue", "%s", msg)
	}
	// Backfill, as the next decision round would see it.
	if cfg.NoBackfill {
		return out, nil
	}
	for _, d := range core.Decide(s, now) {
		if d, ok := d.(ledger.Dispatch); ok && d.Job == j.ID {
			return out, nil // it starts now; nothing else to say
		}
	}
	shadows := core.Shadows()
	if sh, ok := shadows[j.ID]; ok {
		when := "when the jobs there reach their walltimes"
		if _, until := core.BackedOff(sh.Host); sh.At.Equal(until) {
			when = "when its backoff ends"
		}
		add("backfill_reserved", "it is first in line for %d GPUs: they are reserved for it on %s from %s at the latest (%s from now), %s; until then only jobs that leave that reservation whole may start",
			j.GPUs, sh.Host, sh.At.UTC().Format(time.RFC3339), sh.At.Sub(now).Round(time.Second), when)
		return out, nil
	}
	// The reservation blocks the job if some host has room for it and the
	// reservation rules out every such host, as in place. Room is judged as
	// for no_free_gpus: from the ledger's jobs on each host.
	for _, id := range slices.Sorted(maps.Keys(shadows)) { // in job order, so the output is the same on every run
		sh := shadows[id]
		room, allowed := false, false
		for _, h := range hosts {
			if h.Capacity()-used[h.Host] >= j.GPUs && modelMatches(hostModel(h), j.GPUModel()) {
				room = true
				allowed = allowed || !sh.rulesOut(h.Host, j, now)
			}
		}
		if room && !allowed {
			add("backfill_blocked", "job %s has GPUs reserved on %s from %s; this job's walltime of %s would run into that reservation",
				sh.Job, sh.Host, sh.At.UTC().Format(time.RFC3339), j.Walltime)
		}
	}
	return out, nil
}

// explainHeld says when a held job's account can pay for it.
func explainHeld(s *ledger.State, j *ledger.Job, now time.Time) []Blocker {
	a := s.Accounts[j.Account]
	var out []Blocker
	add := func(kind, format string, args ...any) {
		out = append(out, Blocker{Kind: kind, Message: fmt.Sprintf(format, args...)})
	}
	ahead := 0
	var cost ledger.Credits
	for _, id := range a.HeldJobs {
		if id == j.ID {
			break
		}
		ahead++
		cost += s.Jobs[id].Cost
	}
	cost += j.Cost
	avail := a.BalanceAt(now) - a.Reserved
	if ahead > 0 {
		add("held_behind", "%d held jobs of account %s come first (held jobs are reserved in submit order); with them it needs %d", ahead, a.ID, cost)
	}
	switch at, ok := AffordableAt(a, cost); {
	case ok:
		add("credits", "it costs %d and account %s has %d available; the refill of %d per hour covers it at %s (%s from now)",
			j.Cost, a.ID, avail, a.Refill.RatePerHour, at.UTC().Format(time.RFC3339Nano), at.Sub(now).Round(time.Second))
	case a.Refill.RatePerHour <= 0:
		add("credits", "it costs %d and account %s has %d available, with no refill: an admin must grant credits", j.Cost, a.ID, avail)
	default:
		add("credits", "it costs %d and account %s has %d available; its refill stops at a cap of %d, too low to cover it: an admin must grant credits or raise the cap",
			j.Cost, a.ID, avail, a.Refill.Cap)
	}
	return out
}
