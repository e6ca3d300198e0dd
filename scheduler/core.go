package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// Core decides what runs where. It keeps the queue of pending jobs ordered
// by priority, fair share and age, the hosts and their free GPUs, each
// account's decayed usage, and the decisions it has published but not yet
// seen applied by the fold; [Core.Decide] returns new decisions as values.
//
// Core reads the ledger but never changes it: a decision takes effect only
// when the fold applies it from the log, and the fold re-checks what the
// decision assumed.
//
// Core performs no I/O, reads no clock, draws no random number and is not
// safe for concurrent use. Its output is a function of its inputs alone:
// every tie is broken by a stable key (a host's name, a job's id), no map
// order reaches a decision, an emitted order or a float sum, and a retry
// delay is closed-form ([RetryPolicy.Delay]). The determinism tests
// (determinism_test.go) feed it clones of one state filled in shuffled
// orders and require identical output.
type Core struct {
	cfg      CoreConfig
	queue    *Queue
	usage    *usage
	hosts    map[string]*hostState
	onHost   map[string]placement // jobs the ledger has on a host: dispatched or running
	inflight map[string]*decision // dispatch decisions published, not yet applied
	perAcct  map[string]*load     // GPUs and jobs of in-flight decisions, per account
	weights  map[string]int       // each account's fair-share weight
	// unplaceableSince is when each job was first seen needing more GPUs
	// than any live host has (of the GPU model it asks for, if any).
	unplaceableSince map[string]time.Time
	// goneSince is when a host holding attempts was last seen.
	goneSince map[string]time.Time
	// lostSent is when a lost verdict was last published for each job.
	lostSent map[string]time.Time
	// missingSince is when an attempt was first absent from its live
	// host's heartbeat (a worker restarted, or never took the order).
	missingSince map[string]time.Time
	// admitSent is the refill time an admit decision was last published
	// for, per account.
	admitSent map[string]time.Time
	// shadows are the reservations the last Decide made for blocked jobs,
	// for tests and explanations.
	shadows map[string]Shadow
	// gated are the pending jobs kept out of the queue: waiting on a
	// dependency or paused by their owner (see deps.go).
	gated map[string]bool
	// refused are the hosts that have refused orders since they last
	// started one: they are backed off (see refusals.go).
	refused map[string]*refusals
	// archiver queues final jobs for archiving (see archive.go).
	archiver *archiver
	sealer   *sealer
}

type hostState struct {
	name     string
	capacity int // GPUs gpuq may use: healthy, no foreign process, the host not draining
	total    int // every device, healthy or not
	used     int // GPUs of ledger jobs on the host
	inflight int // GPUs of decisions not yet applied
	// held counts the usable GPUs (of capacity) the heartbeat shows each
	// attempt holding, whatever the ledger thinks of that attempt; heldAll
	// is their sum.
	held    map[attemptKey]int
	heldAll int
	// covered is the part of heldAll held by the attempts the ledger
	// places on the host, at most each one's GPUs: those GPUs are already
	// in used. The rest is stray.
	covered int
	info    wire.Heartbeat
	model   string // the one model of all its devices, "" if none or several (see hostModel)
}

type attemptKey struct {
	job     string
	attempt int
}

// stray counts GPUs the heartbeat shows held by attempts the ledger does not
// place on the host: a job still ending after it was declared lost, one a
// restarted worker runs from a stale order, or one whose end the ledger has
// applied but the heartbeat does not show yet.
func (h *hostState) stray() int { return h.heldAll - h.covered }

// free counts the GPUs a new job may take now: usable, held by no attempt
// the heartbeat shows, not kept for a ledger job that has not claimed its
// GPUs yet, nor for a decision in flight.
func (h *hostState) free() int { return max(h.capacity-h.used-h.inflight-h.stray(), 0) }

// count adds a ledger placement of attempt k on GPUs to the host's counts,
// or takes it off with sign -1.
func (h *hostState) count(k attemptKey, gpus, sign int) {
	h.used += sign * gpus
	h.covered += sign * min(gpus, h.held[k])
}

type placement struct {
	host    string
	account string
	gpus    int
	attempt int
	running bool      // the worker reported it started
	end     time.Time // when it ends at the latest: its start plus walltime
	// usage charged to the account for this attempt until it ends: its GPUs
	// times its walltime, at dispatch.
	estimate float64
	at       time.Time
}

type decision struct {
	job, account, host string
	attempt, gpus      int
	at                 time.Time
	end                time.Time
	estimate           float64
}

type load struct{ jobs, gpus int }

// Shadow is the reservation EASY backfill makes for the first job that
// cannot start: on Host, at At at the latest, when running jobs have
// reached their walltimes; Spare GPUs of Host are free at that time beyond
// what the job needs. A later job may start now only if it leaves the
// reservation whole.
type Shadow struct {
	Job   string
	Host  string
	At    time.Time
	Spare int
}

// runsInto reports whether j, started on host now, would still run on the
// reserved host at the reserved time.
func (s *Shadow) runsInto(host string, j *ledger.Job, now time.Time) bool {
	return host == s.Host && now.Add(j.Walltime).After(s.At)
}

// rulesOut reports whether the reservation rules out starting j on host
// now: j would run into it on more GPUs than it has to spare.
func (s *Shadow) rulesOut(host string, j *ledger.Job, now time.Time) bool {
	return s.runsInto(host, j, now) && j.GPUs > s.Spare
}

// NewCore returns a core with no hosts and an empty queue.
func NewCore(cfg CoreConfig) *Core {
	c := &Core{
		cfg:              cfg.withDefaults(),
		hosts:            map[string]*hostState{},
		onHost:           map[string]placement{},
		inflight:         map[string]*decision{},
		perAcct:          map[string]*load{},
		weights:          map[string]int{},
		unplaceableSince: map[string]time.Time{},
		goneSince:        map[string]time.Time{},
		lostSent:         map[string]time.Time{},
		missingSince:     map[string]time.Time{},
		admitSent:        map[string]time.Time{},
		shadows:          map[string]Shadow{},
		refused:          map[string]*refusals{},
		archiver:         newArchiver(),
		sealer:           newSealer(),
	}
	c.usage = newUsage(c.cfg.HalfLife)
	c.queue = NewQueue(c.share)
	return c
}

// share is an account's decayed GPU-seconds over its weight: the fair-share
// key among accounts whose best jobs have equal priority.
func (c *Core) share(account string) float64 {
	w := c.weights[account]
	if w < 1 {
		w = 1
	}
	return c.usage.value(account) / float64(w)
}

// Share returns an account's current share, for explanations: its decayed
// GPU-seconds of use, including the walltime of what it runs now, over its
// weight.
func (c *Core) Share(account string, now time.Time) float64 {
	return c.usage.decayedAt(account, now) / float64(max(c.weights[account], 1))
}

// Load indexes every job and account of s, replacing what Core knew of
// them. Hosts are kept.
func (c *Core) Load(s *ledger.State) {
	c.usage = newUsage(c.cfg.HalfLife)
	c.queue = NewQueue(c.share)
	c.gated = map[string]bool{}
	c.onHost = map[string]placement{}
	c.inflight = map[string]*decision{}
	c.perAcct = map[string]*load{}
	c.weights = map[string]int{}
	for _, h := range c.hosts {
		h.used, h.inflight, h.covered = 0, 0, 0
	}
	c.refused = map[string]*refusals{}
	c.archiver = newArchiver()
	c.sealer = newSealer()
	for host, r := range refusalsFrom(s) {
		c.rebackoff(host, r)
	}
	for id, a := range s.Accounts {
		c.weights[id] = a.Weight
	}
	// A pending job that never ran, nearly every job of a large takeover,
	// adds no usage and is only queued: those are queued at once, in bulk,
	// after the rest, whose order matters. The queue's order is total, so
	// the order jobs are queued in does not reach a decision.
	fresh := make([]QueueItem, 0, len(s.Jobs))
	var rest []string
	for id, j := range s.Jobs {
		if j.State == ledger.StatePending && len(j.Attempts()) == 0 && !j.Gated() {
			fresh = append(fresh, QueueItem{Job: j.ID, Account: j.Account, Priority: j.Priority, SubmitSeq: j.SubmitSeq})
			delete(c.lostSent, id) // as index does for a job off its host
			continue
		}
		rest = append(rest, id)
	}
	// In job order: usage is a float sum, and no map order may reach a
	// decision.
	slices.Sort(rest)
	for _, id := range rest {
		j := s.Jobs[id]
		for _, a := range j.Attempts() {
			c.usage.add(j.Account, attemptUsage(a), a.EndedAt)
		}
		c.index(j)
	}
	// Last, so the accounts take their places among the heads with the
	// usage of every attempt counted.
	c.queue.pushAll(fresh)
}

// attemptUsage is the GPU-seconds an ended attempt used.
func attemptUsage(a ledger.Attempt) float64 {
	if a.StartedAt.IsZero() || !a.EndedAt.After(a.StartedAt) {
		return 0
	}
	return float64(a.GPUs) * a.EndedAt.Sub(a.StartedAt).Seconds()
}

// Observe updates Core after the fold applied cmd with result res.
func (c *Core) Observe(s *ledger.State, cmd ledger.Command, res ledger.Result) {
	if d, ok := cmd.(ledger.Dispatch); ok {
		if in := c.inflight[d.Job]; in != nil && in.attempt == d.Attempt {
			c.forget(in)
		}
	}
	if r, ok := cmd.(ledger.Report); ok && slices.Contains(res.Changed, ledger.Key{Kind: ledger.KeyJob, ID: r.Job}) {
		c.observeReport(s.Jobs[r.Job], r)
	}
	for _, eff := range res.Effects {
		if a, ok := eff.(ledger.ArchivedJob); ok {
			c.observeArchived(a.Job)
		}
	}
	for _, k := range res.Changed {
		switch k.Kind {
		case ledger.KeyJob:
			if j := s.Jobs[k.ID]; j != nil {
				c.index(j)
			}
		case ledger.KeyAccount:
			if a := s.Accounts[k.ID]; a != nil && c.weights[k.ID] != a.Weight {
				c.weights[k.ID] = a.Weight
				c.queue.FixAccount(k.ID)
			}
		}
	}
	// A decision the fold ignored leaves its job pending and out of the
	// queue; put it back.
	if d, ok := cmd.(ledger.Dispatch); ok {
		if j := s.Jobs[d.Job]; j != nil {
			c.index(j)
		}
	}
}

// index brings the queue, host usage and account usage in line with j.
func (c *Core) index(j *ledger.Job) {
	if p, ok := c.onHost[j.ID]; ok && (!j.State.OnHost() || p.host != j.Host() || p.attempt != j.Attempt) {
		if h := c.hosts[p.host]; h != nil {
			h.count(attemptKey{j.ID, p.attempt}, p.gpus, -1)
		}
		delete(c.onHost, j.ID)
		delete(c.missingSince, j.ID)
		// The attempt ended: its estimate gives way to what it really used.
		c.usage.add(p.account, -p.estimate, p.at)
		if n := len(j.Attempts()); n > 0 && j.Attempts()[n-1].N == p.attempt {
			c.usage.add(j.Account, attemptUsage(j.Attempts()[n-1]), j.Attempts()[n-1].EndedAt)
		}
		c.queue.FixAccount(p.account)
	}
	if j.State.OnHost() {
		p, ok := c.onHost[j.ID]
		if !ok {
			p = placement{host: j.Host(), account: j.Account, gpus: j.GPUs, attempt: j.Attempt,
				estimate: float64(j.GPUs) * j.Walltime.Seconds(), at: j.DispatchedAt()}
			if h := c.hosts[j.Host()]; h != nil {
				h.count(attemptKey{j.ID, j.Attempt}, j.GPUs, 1)
			}
			c.usage.add(j.Account, p.estimate, p.at)
			c.queue.FixAccount(j.Account)
		}
		if running := j.State == ledger.StateRunning; running != p.running {
			p.running = running
			delete(c.missingSince, j.ID) // the grace restarts for the new state
		}
		start := j.DispatchedAt()
		if p.running {
			start = j.StartedAt()
		}
		p.end = start.Add(j.Walltime)
		c.onHost[j.ID] = p
	}
	if j.State == ledger.StatePending && c.inflight[j.ID] == nil {
		c.queueJob(j) // or set it aside, gated: see deps.go
	} else {
		c.unqueueJob(j.ID)
	}
	if j.State != ledger.StatePending {
		delete(c.unplaceableSince, j.ID)
	}
	if !j.State.OnHost() {
		delete(c.lostSent, j.ID)
	}
	c.archiver.index(j)
}

// SetHost records a host's latest heartbeat, received at now. An attempt
// the heartbeat does not list starts its grace period as missing. A device
// the heartbeat shows held by an attempt, busy with a foreign process or
// unhealthy is not free, whatever the ledger says runs there.
func (c *Core) SetHost(h wire.Heartbeat, now time.Time) {
	hs := c.hosts[h.Host]
	if hs == nil {
		hs = &hostState{name: h.Host}
		for _, d := range c.inflight {
			if d.host == h.Host {
				hs.inflight += d.gpus
			}
		}
		c.hosts[h.Host] = hs
	}
	hs.capacity, hs.total, hs.info = h.Capacity(), len(h.Devices), h
	hs.model = hostModel(h)
	hs.held, hs.heldAll = map[attemptKey]int{}, 0
	for _, d := range h.Devices {
		// A busy or unhealthy device is already outside capacity.
		if d.Job != "" && d.Healthy && !d.Busy {
			hs.held[attemptKey{d.Job, d.Attempt}]++
			hs.heldAll++
		}
	}
	hs.used, hs.covered = 0, 0
	for job, p := range c.onHost {
		if p.host == h.Host {
			hs.count(attemptKey{job, p.attempt}, p.gpus, 1)
		}
	}
	delete(c.goneSince, h.Host)
	listed := make(map[string]int, len(h.Running))
	for _, r := range h.Running {
		listed[r.Job] = r.Attempt
	}
	for job, p := range c.onHost {
		if p.host != h.Host {
			continue
		}
		if listed[job] == p.attempt {
			delete(c.missingSince, job)
		} else if _, ok := c.missingSince[job]; !ok {
			c.missingSince[job] = now
		}
	}
}

// RemoveHost records that a host's heartbeat expired at time at.
func (c *Core) RemoveHost(name string, at time.Time) {
	if _, ok := c.hosts[name]; !ok {
		return
	}
	delete(c.hosts, name)
	c.goneSince[name] = at
}

// Hosts returns the live hosts' latest heartbeats, sorted by name.
func (c *Core) Hosts() []wire.Heartbeat {
	out := make([]wire.Heartbeat, 0, len(c.hosts))
	for _, h := range c.hosts {
		out = append(out, h.info)
	}
	slices.SortFunc(out, func(a, b wire.Heartbeat) int { return cmp.Compare(a.Host, b.Host) })
	return out
}

// Shadows returns the backfill reservations of the last Decide, by job.
func (c *Core) Shadows() map[string]Shadow { return c.shadows }

// Abandon forgets a decision that could not be published, so it can be
// made again.
func (c *Core) Abandon(s *ledger.State, cmd ledger.Command) {
	var job string
	switch d := cmd.(type) {
	case ledger.Dispatch:
		job = d.Job
		if in := c.inflight[d.Job]; in != nil && in.attempt == d.Attempt {
			c.forget(in)
		}
	case ledger.Unplaceable:
		job = d.Job
	case ledger.Lost:
		job = d.Job
		delete(c.lostSent, d.Job)
	case ledger.Admit:
		delete(c.admitSent, d.Account)
	case ledger.Archive:
		c.abandonArchive(s, d)
		return
	case ledger.Seal:
		c.abandonSeal(d)
		return
	}
	if j := s.Jobs[job]; j != nil {
		c.index(j)
	}
}

func (c *Core) forget(d *decision) {
	delete(c.inflight, d.job)
	if h := c.hosts[d.host]; h != nil {
		h.inflight -= d.gpus
	}
	if u := c.perAcct[d.account]; u != nil {
		u.jobs--
		u.gpus -= d.gpus
		if u.jobs == 0 {
			delete(c.perAcct, d.account)
		}
	}
	c.usage.add(d.account, -d.estimate, d.at)
	c.queue.FixAccount(d.account)
}

// retryAt returns when a pending job that has failed attempts may be
// dispatched again: the end of its last attempt that failed, plus the retry
// delay. A busy refusal is not a failure and starts no delay (the host that
// refused is backed off instead).
func (c *Core) retryAt(j *ledger.Job) time.Time {
	if j.Failures == 0 {
		return time.Time{}
	}
	for i := len(j.Attempts()) - 1; i >= 0; i-- {
		if a := j.Attempts()[i]; a.Reason != ledger.ReasonHostBusy {
			return a.EndedAt.Add(c.cfg.Retry.Delay(j.ID, j.Failures))
		}
	}
	return time.Time{}
}

// Decide returns the decisions to publish now: dispatches of pending jobs to
// hosts with room, admissions of held jobs the refill now pays for,
// unplaceable verdicts for jobs no host can fit, lost verdicts for
// attempts whose hosts lost them, archives of jobs that ended more than
// CoreConfig.JobRetention ago (at most CoreConfig.MaxArchives), and, last,
// seals of accounts' journals that no command sealed for a day.
//
// Jobs are considered highest priority first; at equal priority, the
// account with the lowest share (decayed usage over weight) first; then
// oldest. An account at its running-jobs cap is set aside for the pass; a
// job over its account's GPU cap or in its retry delay is skipped. Among
// hosts with room, a job goes to the one whose free GPUs fit it most
// tightly; a host that refused an order is backed off (see [Core.BackedOff])
// and gets none. The first job that fits no host now gets a backfill
// reservation (EASY): later jobs start only where and while they leave it
// whole.
func (c *Core) Decide(s *ledger.State, now time.Time) []ledger.Command {
	var out []ledger.Command
	out = append(out, c.lost(s, now)...)
	out = append(out, c.admits(s, now)...)
	var expired []*decision
	for _, d := range c.inflight {
		if now.Sub(d.at) > c.cfg.DecisionTimeout {
			expired = append(expired, d)
		}
	}
	// In job order: forgetting adjusts usage, a float sum.
	slices.SortFunc(expired, func(a, b *decision) int { return cmp.Compare(a.job, b.job) })
	for _, d := range expired {
		c.forget(d)
		if j := s.Jobs[d.job]; j != nil {
			c.index(j)
		}
	}
	clear(c.shadows)
	totalFree, largest := 0, 0
	for _, h := range c.hosts {
		if !c.backedOff(h.name, now) {
			totalFree += h.free()
		}
		largest = max(largest, h.total)
	}
	widest := map[string]int{} // by GPU model asked for: see Core.widest
	var shadow *Shadow
	var ends endings // built when the first shadow is computed, kept up to date after
	p := c.queue.Begin()
	defer p.End()
	for examined := 0; examined < c.cfg.MaxExamine; examined++ {
		it, ok := p.Next()
		if !ok {
			break
		}
		j := s.Jobs[it.Job]
		if j == nil || j.State != ledger.StatePending {
			p.Take() // stale entry
			continue
		}
		if wide := c.widest(j.GPUModel(), largest, widest); len(c.hosts) > 0 && j.GPUs > wide {
			since, seen := c.unplaceableSince[j.ID]
			if !seen {
				since = now
				c.unplaceableSince[j.ID] = now
			}
			if now.Sub(since) >= c.cfg.UnplaceableAfter {
				out = append(out, ledger.Unplaceable{Job: j.ID, Message: c.unplaceableMessage(j.GPUs, j.GPUModel(), wide)})
				p.Take()
			}
			continue
		}
		delete(c.unplaceableSince, j.ID)
		if totalFree == 0 && (shadow != nil || c.cfg.NoBackfill || len(c.hosts) == 0) {
			// Nothing more can start, and the first job that must wait
			// has its reservation (or no host could hold one): the rest
			// of the queue waits.
			break
		}
		if now.Before(c.retryAt(j)) {
			continue
		}
		u := c.perAcct[j.Account]
		if u == nil {
			u = &load{}
		}
		if caps := ledger.CapBlocks(s.Accounts[j.Account], ledger.Running{Jobs: u.jobs, GPUs: u.gpus}, j.GPUs); len(caps) > 0 {
			if caps[0].Reason == ledger.ReasonMaxRunningJobs {
				p.SkipAccount() // no job of the account can start this pass
			}
			continue
		}
		h := c.place(j, now, shadow)
		if h == nil {
			if shadow == nil && !c.cfg.NoBackfill {
				if ends == nil {
					ends = c.endings(now)
				}
				shadow = c.shadow(j, now, ends)
			}
			continue
		}
		if shadow != nil && shadow.runsInto(h.name, j, now) {
			shadow.Spare -= j.GPUs // it runs past the reservation on its GPUs' spare
		}
		d := &decision{job: j.ID, account: j.Account, host: h.name, attempt: j.Attempt + 1, gpus: j.GPUs, at: now,
			end: now.Add(j.Walltime), estimate: float64(j.GPUs) * j.Walltime.Seconds()}
		c.inflight[j.ID] = d
		h.inflight += j.GPUs
		if ends != nil {
			ends.add(h.name, ending{d.end, d.gpus})
		}
		totalFree -= j.GPUs
		u.jobs++
		u.gpus += j.GPUs
		c.perAcct[j.Account] = u
		p.Take()
		c.usage.add(j.Account, d.estimate, now)
		c.queue.FixAccount(j.Account)
		out = append(out, ledger.Dispatch{Job: j.ID, Attempt: d.attempt, Host: h.name})
	}
	if shadow != nil {
		c.shadows[shadow.Job] = *shadow // with the spare later jobs left
	}
	// Last, and bounded: archiving never holds up a dispatch.
	out = append(out, c.archives(s, now)...)
	out = append(out, c.seals(s, now)...)
	return out
}

// place returns the host j should start on now, or nil: one of its GPU
// model, if it names one (see model.go). With a backfill
// reservation in force, a host is allowed only if starting j there leaves
// the reserved job's GPUs free at the reserved time: another host, or j ends
// before then, or j fits in the spare.
func (c *Core) place(j *ledger.Job, now time.Time, shadow *Shadow) *hostState {
	var best *hostState
	for _, h := range c.hosts {
		f := h.free()
		if f < j.GPUs || c.backedOff(h.name, now) || !modelMatches(h.model, j.GPUModel()) {
			continue
		}
		if shadow != nil && shadow.rulesOut(h.name, j, now) {
			continue
		}
		if best == nil || f < best.free() || f == best.free() && h.name < best.name {
			best = h
		}
	}
	return best
}

// ending is when GPUs held on a host free up at the latest.
type ending struct {
	at   time.Time
	gpus int
}

// endings are the endings of the jobs on each host and of the decisions in
// flight, by host, each host's in time order.
type endings map[string][]ending

// endings returns when the GPUs held by ledger jobs and in-flight decisions
// free up. An ending already past is taken to be now: the job is ending any
// moment.
func (c *Core) endings(now time.Time) endings {
	ends := endings{}
	for _, p := range c.onHost {
		ends[p.host] = append(ends[p.host], ending{p.end, p.gpus})
	}
	for _, d := range c.inflight {
		ends[d.host] = append(ends[d.host], ending{d.end, d.gpus})
	}
	for host, es := range ends {
		for i := range es {
			if es[i].at.Before(now) {
				es[i].at = now
			}
		}
		slices.SortFunc(es, compareEndings)
		ends[host] = es
	}
	return ends
}

// compareEndings orders endings by time, then GPUs: a total order on
// their values, so a host's list is the same whatever order the maps gave.
func compareEndings(a, b ending) int {
	return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.gpus, b.gpus))
}

// add records e on host, keeping the host's endings in order.
func (ends endings) add(host string, e ending) {
	es := ends[host]
	i, _ := slices.BinarySearchFunc(es, e, compareEndings)
	ends[host] = slices.Insert(es, i, e)
}

// shadow computes the backfill reservation of j, which fits no host now:
// the earliest time some host frees enough GPUs as its running jobs reach
// their walltimes (ends), and what that host has to spare then. It returns
// nil if no host ever frees enough.
func (c *Core) shadow(j *ledger.Job, now time.Time, ends endings) *Shadow {
	var best *Shadow
	for _, h := range c.hosts {
		if h.capacity < j.GPUs || !modelMatches(h.model, j.GPUModel()) {
			continue
		}
		// Stray GPUs (held by an attempt the ledger has ended, as a
		// heartbeat sent just before a job's end still shows) are taken to
		// free at once for the reservation's time, which is then never
		// later than it could be, but not for its spare: backfill on this
		// host is only stricter.
		free := max(h.capacity-h.used-h.inflight, 0)
		at := now
		if until := c.backoffUntil(h.name); until.After(at) {
			at = until // the host takes nothing before its backoff ends
		}
		es, i := ends[h.name], 0
		for ; i < len(es) && free < j.GPUs; i++ {
			free += es[i].gpus
			at = later(at, es[i].at)
		}
		if free < j.GPUs {
			continue
		}
		// GPUs that free at that same moment are free then too (and
		// whichever order endings at one moment were listed in, the
		// spare is the same).
		for ; i < len(es) && !es[i].at.After(at); i++ {
			free += es[i].gpus
		}
		s := Shadow{Job: j.ID, Host: h.name, At: at, Spare: max(free-j.GPUs-h.stray(), 0)}
		if best == nil || s.At.Before(best.At) || s.At.Equal(best.At) && (s.Spare < best.Spare || s.Spare == best.Spare && s.Host < best.Host) {
			best = &s
		}
	}
	return best
}

// admits returns admit decisions for accounts whose refill has grown to pay
// for their oldest held job.
func (c *Core) admits(s *ledger.State, now time.Time) []ledger.Command {
	var out []ledger.Command
	for id, a := range s.Accounts {
		if len(a.HeldJobs) == 0 {
			continue
		}
		j := s.Jobs[a.HeldJobs[0]]
		if j == nil {
			continue
		}
		at, ok := AffordableAt(a, j.Cost)
		if !ok || now.Before(at) || c.admitSent[id].Equal(at) {
			continue
		}
		c.admitSent[id] = at
		out = append(out, ledger.Admit{Account: id, Due: at})
	}
	slices.SortFunc(out, func(a, b ledger.Command) int { return cmp.Compare(a.(ledger.Admit).Account, b.(ledger.Admit).Account) })
	return out
}

// AffordableAt returns the earliest time the refill lets account a pay
// cost, from its state as stored, to the nanosecond; false if the refill
// never will (no rate, or a cap below what it needs).
func AffordableAt(a *ledger.Account, cost ledger.Credits) (time.Time, bool) {
	if cost <= a.Available() {
		return a.Refill.Last, true
	}
	need := cost - a.Available()
	r := a.Refill
	if r.RatePerHour <= 0 || r.Cap-a.Balance < need {
		return time.Time{}, false
	}
	covers := func(elapsed time.Duration) bool { return a.BalanceAt(r.Last.Add(elapsed))-a.Reserved >= cost }
	// The refill reaches need within need/rate hours (plus a second for
	// rounding); search that range for the first nanosecond it covers.
	hiF := float64(need)/float64(r.RatePerHour)*float64(time.Hour) + float64(time.Second)
	hi := time.Duration(min(hiF, float64(1<<62)))
	lo := time.Duration(0)
	if !covers(hi) {
		return time.Time{}, false
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		if covers(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return r.Last.Add(lo), true
}

// lost returns lost verdicts for attempts on hosts gone longer than
// LostAfter, for running attempts missing from their live host's
// heartbeats as long, and for dispatched attempts their live host has not
// taken within StartTimeout.
func (c *Core) lost(s *ledger.State, now time.Time) []ledger.Command {
	var out []ledger.Command
	for job, p := range c.onHost {
		var why string
		if _, live := c.hosts[p.host]; live {
			since, missing := c.missingSince[job]
			grace := c.cfg.LostAfter
			if !p.running {
				grace = c.cfg.StartTimeout
			}
			if !missing || now.Sub(since) < grace {
				continue
			}
			why = fmt.Sprintf("host %s has not listed it among its attempts for %s", p.host, now.Sub(since).Round(time.Second))
		} else {
			since, known := c.goneSince[p.host]
			if !known {
				// The host was never seen by this scheduler (it took over
				// while the host was already gone): start the grace now.
				since = now
				c.goneSince[p.host] = now
			}
			if now.Sub(since) < c.cfg.LostAfter {
				continue
			}
			why = fmt.Sprintf("host %s stopped heartbeating %s ago", p.host, now.Sub(since).Round(time.Second))
		}
		if sent, ok := c.lostSent[job]; ok && now.Sub(sent) < c.cfg.DecisionTimeout {
			continue // already published; waiting for the fold
		}
		if j := s.Jobs[job]; j != nil && j.State.OnHost() {
			c.lostSent[job] = now
			out = append(out, ledger.Lost{Job: job, Attempt: j.Attempt, Reason: why})
		}
	}
	slices.SortFunc(out, func(a, b ledger.Command) int { return cmp.Compare(a.(ledger.Lost).Job, b.(ledger.Lost).Job) })
	return out
}

// NextWake returns the next time a decision may change without a new
// command or heartbeat: a retry delay ending, a refill covering a held job,
// a grace period ending. The zero time means none is due.
func (c *Core) NextWake(s *ledger.State, now time.Time) time.Time {
	var next time.Time
	soon := func(t time.Time) {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for id := range c.queue.index {
		if j := s.Jobs[id]; j != nil && j.Failures > 0 {
			soon(c.retryAt(j))
		}
	}
	for _, a := range s.Accounts {
		if len(a.HeldJobs) > 0 {
			if j := s.Jobs[a.HeldJobs[0]]; j != nil {
				if at, ok := AffordableAt(a, j.Cost); ok {
					soon(at)
				}
			}
		}
	}
	for _, since := range c.unplaceableSince {
		soon(since.Add(c.cfg.UnplaceableAfter))
	}
	for job, since := range c.missingSince {
		grace := c.cfg.LostAfter
		if p, ok := c.onHost[job]; ok && !p.running {
			grace = c.cfg.StartTimeout
		}
		soon(since.Add(grace))
	}
	for _, since := range c.goneSince {
		soon(since.Add(c.cfg.LostAfter))
	}
	for host := range c.refused {
		soon(c.backoffUntil(host))
	}
	soon(c.nextArchive())
	return next
}

// backedOff reports whether host is in its backoff at now.
func (c *Core) backedOff(host string, now time.Time) bool {
	return now.Before(c.backoffUntil(host))
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
