package scheduler

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// FactStore keeps the leader's read-optimised facts (see the package doc,
// # Facts). internal/natsbus implements it over the gpuq_facts bucket. Its
// writes are advisory: a failed one is retried, and never stops the fold.
type FactStore interface {
	// Put stores value at key.
	Put(ctx context.Context, key string, value []byte) error
	// Delete removes key; removing a key that is not there is no error.
	Delete(ctx context.Context, key string) error
	// Keys lists the keys present.
	Keys(ctx context.Context) ([]string, error)
}

// Waiting is why a waiting job is not running, as the core found it right
// after a pass: the blockers by Decide's rules, with the core's
// configuration, hosts, backoffs and in-flight decisions, and the backfill
// reservation the pass itself made for it, if any.
type Waiting struct {
	Job         string
	Account     string
	State       ledger.JobState
	Blockers    []Blocker
	Reservation *Shadow
	// key sums up what must change for the explanation to be published
	// again: the kinds and the facts that matter (a retry time, the
	// reservation), not counts that move with every dispatch ahead.
	key uint64
}

// Waiting returns the explanations of the first limit pending jobs in queue
// order (the jobs the next pass examines first) and of the first limit held
// jobs (by account, then the order they are admitted in), and how many jobs
// are queued. Call it after [Core.Decide]: the reservations are that pass's.
// It costs O(limit × hosts) and leaves the queue as it was.
func (c *Core) Waiting(s *ledger.State, now time.Time, limit int) ([]Waiting, int) {
	hv := &hostViews{hosts: slices.SortedFunc(maps.Values(c.hosts), func(a, b *hostState) int { return cmp.Compare(a.name, b.name) }),
		byNeed: map[need]*hostView{}}
	shadows := slices.SortedFunc(maps.Values(c.shadows), func(a, b Shadow) int { return cmp.Compare(a.Job, b.Job) })
	var out []Waiting
	var ahead queueAhead
	p := c.queue.Begin()
	for len(out) < limit {
		it, ok := p.Next()
		if !ok {
			break
		}
		j := s.Jobs[it.Job]
		if j == nil || j.State != ledger.StatePending {
			continue // stale entry; skipped, restored by End
		}
		out = append(out, c.waiting(s, j, now, hv, shadows, &ahead))
		ahead.add(j)
	}
	p.End()
	out = append(out, c.waitingGated(s, limit)...)
	held := 0
	for _, id := range slices.Sorted(maps.Keys(s.Accounts)) {
		if held >= limit {
			break
		}
		for _, jid := range s.Accounts[id].HeldJobs {
			if held >= limit {
				break
			}
			if j := s.Jobs[jid]; j != nil && j.State == ledger.StateHeld {
				// As Explain says of it: the credits, and any gate too.
				w := Waiting{Job: j.ID, Account: j.Account, State: j.State, Blockers: append(explainHeld(s, j, now), gateBlockers(s, j)...)}
				w.key = blockersKey(w.Blockers, strings.Join(j.WaitingOn(), ",")+fmt.Sprint(j.Paused))
				out = append(out, w)
				held++
			}
		}
	}
	return out, c.queue.Len()
}

// queueAhead counts the jobs a walk of the queue has passed, by priority
// and account.
type queueAhead struct {
	n      int
	byPrio map[int]map[string]int
}

func (q *queueAhead) add(j *ledger.Job) {
	if q.byPrio == nil {
		q.byPrio = map[int]map[string]int{}
	}
	if q.byPrio[j.Priority] == nil {
		q.byPrio[j.Priority] = map[string]int{}
	}
	q.n++
	q.byPrio[j.Priority][j.Account]++
}

// split counts the jobs ahead of j as Explain sorts them: of higher
// priority; at its priority, of accounts with a smaller share; and older
// (its own account's, or of an account with the same share).
func (q *queueAhead) split(c *Core, j *ledger.Job) (higher, fairer, older int) {
	mine := c.share(j.Account)
	for p, accts := range q.byPrio {
		for acct, n := range accts {
			switch {
			case p > j.Priority:
				higher += n
			case p < j.Priority:
			case acct != j.Account && c.share(acct) < mine:
				fairer += n
			default:
				older += n
			}
		}
	}
	return higher, fairer, older
}

// hostViews are the hosts as a pass's jobs see them, by the GPUs and the
// GPU model a job needs: jobs of one need see the same, so each need is
// computed once per walk and a job costs O(1) in the hosts.
type hostViews struct {
	hosts  []*hostState // by name
	byNeed map[need]*hostView
}

// need is what of a job decides which hosts it can use.
type need struct {
	gpus  int
	model string // lower case; "" is any
}

type hostView struct {
	matching          int // hosts of the model asked for (all without one)
	largest, mostFree int
	freest, strayed   string
	backedOff         []string     // hosts with room, backed off, described
	roomNow           bool         // some host with room is not backed off
	room              []*hostState // hosts with room, by name
}

// of returns the hosts as a job needing gpus of model ("" is any) sees
// them at now: only the hosts of that model.
func (hv *hostViews) of(c *Core, gpus int, model string, now time.Time) *hostView {
	key := need{gpus, strings.ToLower(model)}
	if v := hv.byNeed[key]; v != nil {
		return v
	}
	v := &hostView{}
	for _, h := range hv.hosts {
		if !modelMatches(h.model, model) {
			continue
		}
		v.matching++
		v.largest = max(v.largest, h.total)
		if f := h.free(); f > v.mostFree {
			v.mostFree, v.freest = f, h.name
		}
		if h.free() < gpus && h.free()+h.stray() >= gpus && v.strayed == "" {
			v.strayed = fmt.Sprintf(" (on %s, %d GPUs are held by attempts the ledger does not run there: a job just ended, or a restarted worker's stale runs)", h.name, h.stray())
		}
		if h.free() >= gpus {
			v.room = append(v.room, h)
			if until := c.backoffUntil(h.name); now.Before(until) {
				v.backedOff = append(v.backedOff, fmt.Sprintf("%s %s; it gets no new one until %s", h.name, c.failuresText(h.name), until.UTC().Format(time.RFC3339Nano)))
			} else {
				v.roomNow = true
			}
		}
	}
	hv.byNeed[key] = v
	return v
}

// waiting explains pending job j, with ahead the jobs queued before it.
func (c *Core) waiting(s *ledger.State, j *ledger.Job, now time.Time, hv *hostViews, shadows []Shadow, ahead *queueAhead) Waiting {
	w := Waiting{Job: j.ID, Account: j.Account, State: j.State}
	var stable []string
	add := func(kind, key, format string, args ...any) {
		w.Blockers = append(w.Blockers, Blocker{Kind: kind, Message: fmt.Sprintf(format, args...)})
		stable = append(stable, key)
	}
	if at := c.retryAt(j); now.Before(at) {
		add("backoff", at.String(), "attempt %d waits out its retry delay until %s after %s",
			j.Attempt+1, at.UTC().Format(time.RFC3339), j.Reason())
	}
	if a := s.Accounts[j.Account]; a != nil {
		u := c.perAcct[j.Account]
		if u == nil {
			u = &load{}
		}
		// The one cap rule, with this pass's own decisions counted.
		for _, b := range ledger.CapBlocks(a, ledger.Running{Jobs: u.jobs, GPUs: u.gpus}, j.GPUs) {
			add(string(b.Reason), "", "%s", b.Message())
		}
	}
	v := hv.of(c, j.GPUs, j.GPUModel(), now)
	largest, mostFree, freest, strayed, backedOff, roomNow := v.largest, v.mostFree, v.freest, v.strayed, v.backedOff, v.roomNow
	switch {
	case len(hv.hosts) == 0:
		add("no_hosts", "", "no worker is heartbeating: start a worker (gpuq worker) or check its connection")
	case v.matching == 0:
		models := liveModels(hv.hosts)
		add("no_matching_host", models, "it needs GPU model %q; no live host has it (live hosts have %s; it fails as unplaceable if no such host joins)", j.GPUModel(), models)
	case j.GPUs > largest && j.GPUModel() != "":
		add("too_wide", fmt.Sprint(largest), "it needs %d GPUs of model %q; the largest live host with that model has %d (it fails as unplaceable if no larger host joins)", j.GPUs, j.GPUModel(), largest)
	case j.GPUs > largest:
		add("too_wide", fmt.Sprint(largest), "it needs %d GPUs; the largest live host has %d (it fails as unplaceable if no larger host joins)", j.GPUs, largest)
	case mostFree < j.GPUs && freest == "":
		add("no_free_gpus", "", "it needs %d GPUs; no host has a free GPU now%s", j.GPUs, strayed)
	case mostFree < j.GPUs:
		add("no_free_gpus", "", "it needs %d GPUs; the most free on any host is %d, on %s%s", j.GPUs, mostFree, freest, strayed)
	case !roomNow && len(backedOff) > 0:
		add("host_backoff", strings.Join(backedOff, ";"), "the hosts with room for it are backed off after refusing orders or losing attempts to the infrastructure: %s", strings.Join(backedOff, "; "))
	}
	if ahead.n > 0 {
		higher, fairer, older := ahead.split(c, j)
		msg := fmt.Sprintf("%d jobs are ahead of it in the queue: %d of higher priority", ahead.n, higher)
		if fairer > 0 {
			msg += fmt.Sprintf(", %d from accounts with a smaller fair share of recent use (account %s has used %.0f GPU-seconds per unit of weight)",
				fairer, j.Account, c.Share(j.Account, now))
		}
		msg += fmt.Sprintf(", %d older at priority %d", older, j.Priority)
		add("queue", "", "%s", msg)
	}
	if sh, ok := c.shadows[j.ID]; ok {
		when := "when the jobs there reach their walltimes"
		if until := c.backoffUntil(sh.Host); sh.At.Equal(until) {
			when = "when its backoff ends"
		}
		add("backfill_reserved", sh.Host+sh.At.String(), "it is first in line for %d GPUs: they are reserved for it on %s from %s at the latest, %s; until then only jobs that leave that reservation whole may start",
			j.GPUs, sh.Host, sh.At.UTC().Format(time.RFC3339), when)
		w.Reservation = &sh
	} else {
		for _, sh := range shadows {
			allowed := false
			for _, h := range v.room {
				allowed = allowed || !sh.rulesOut(h.name, j, now)
			}
			if len(v.room) > 0 && !allowed {
				add("backfill_blocked", sh.Job+sh.Host+sh.At.String(), "job %s has GPUs reserved on %s from %s; this job's walltime of %s would run into that reservation",
					sh.Job, sh.Host, sh.At.UTC().Format(time.RFC3339), j.Walltime)
			}
		}
	}
	w.key = blockersKey(w.Blockers, strings.Join(stable, "\x00"))
	return w
}

// blockersKey hashes the blockers' kinds and the stable detail.
func blockersKey(bs []Blocker, detail string) uint64 {
	h := fnv.New64a()
	for _, b := range bs {
		h.Write([]byte(b.Kind))
		h.Write([]byte{0})
	}
	h.Write([]byte(detail))
	return h.Sum64()
}

// Fact returns w as the value of its wait fact, computed by pass of term at
// at, with the log folded through seq.
func (w Waiting) Fact(term string, pass, seq uint64, at time.Time) wire.WaitFact {
	f := wire.WaitFact{Job: w.Job, Account: w.Account, State: w.State, Term: term, Pass: pass, Seq: seq, At: at,
		Blockers: make([]wire.Blocker, 0, len(w.Blockers))}
	for _, b := range w.Blockers {
		f.Blockers = append(f.Blockers, wire.Blocker(b))
	}
	if r := w.Reservation; r != nil {
		f.Reservation = &wire.Reservation{Host: r.Host, At: r.At, Spare: r.Spare}
	}
	return f
}

// SchedulerFact returns the core's effective configuration, defaults filled
// in, as the value of the config fact.
func (c *Core) SchedulerFact() wire.SchedulerFact {
	cfg := c.cfg
	retry := func(p RetryPolicy) wire.RetryFact {
		return wire.RetryFact{Initial: p.Initial.String(), Multiplier: p.Multiplier, Max: p.Max.String(), Jitter: p.Jitter}
	}
	return wire.SchedulerFact{HalfLife: cfg.HalfLife.String(), NoBackfill: cfg.NoBackfill, Retry: retry(cfg.Retry),
		HostBackoff: retry(cfg.HostBackoff), UnplaceableAfter: cfg.UnplaceableAfter.String(), LostAfter: cfg.LostAfter.String(),
		StartTimeout: cfg.StartTimeout.String(), DecisionTimeout: cfg.DecisionTimeout.String(), MaxExamine: cfg.MaxExamine,
		JobRetention: cfg.JobRetention.String(), MaxArchives: cfg.MaxArchives}
}

// firstSorted returns, in order, the first limit of keys that keep accepts,
// without sorting every key: a bounded max-heap keeps the limit smallest
// accepted so far, and only those are sorted. A pass over a large set
// (every gated job) costs the set once and the window's log, not a sort of
// the set.
func firstSorted[K cmp.Ordered](keys func(yield func(K) bool), limit int, keep func(K) bool) []K {
	if limit <= 0 {
		return nil
	}
	h := make([]K, 0, limit) // a max-heap: h[0] is the largest kept
	down := func(i int) {
		for {
			l, big := 2*i+1, i
			if l < len(h) && h[l] > h[big] {
				big = l
			}
			if r := l + 1; r < len(h) && h[r] > h[big] {
				big = r
			}
			if big == i {
				return
			}
			h[i], h[big] = h[big], h[i]
			i = big
		}
	}
	for k := range keys {
		if len(h) == limit && k >= h[0] {
			continue // not among the first limit: no need to ask keep
		}
		if !keep(k) {
			continue
		}
		if len(h) < limit {
			h = append(h, k)
			for i := len(h) - 1; i > 0 && h[(i-1)/2] < h[i]; i = (i - 1) / 2 {
				h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
			}
			continue
		}
		h[0] = k
		down(0)
	}
	slices.Sort(h)
	return h
}
