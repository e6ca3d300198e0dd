package scheduler

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// Core decides what runs where. It keeps the queue of pending jobs, the
// hosts and their free GPUs, and the decisions it has published but not yet
// seen applied by the fold; [Core.Decide] returns new decisions as values.
//
// Core reads the ledger but never changes it: a decision takes effect only
// when the fold applies it from the log, and the fold re-checks everything
// the decision assumed.
//
// Core performs no I/O, reads no clock and is not safe for concurrent use.
type Core struct {
	cfg      CoreConfig
	queue    *Queue
	hosts    map[string]*hostState
	onHost   map[string]placement // jobs the ledger has on a host: dispatched or running
	inflight map[string]*decision // dispatch decisions published, not yet applied
	perAcct  map[string]*usage    // GPUs and jobs of in-flight decisions, per account
	// unplaceableSince is when each job was first seen needing more GPUs
	// than any live host has.
	unplaceableSince map[string]time.Time
	// goneSince is when a host holding attempts was last seen.
	goneSince map[string]time.Time
	// lostSent is when a lost verdict was last published for each job.
	lostSent map[string]time.Time
	// missingSince is when a running attempt was first absent from its
	// live host's heartbeat (a worker restarted, or lost track of it).
	missingSince map[string]time.Time
}

// CoreConfig tunes the decisions. The zero value means defaults.
type CoreConfig struct {
	// UnplaceableAfter is how long a job may need more GPUs than the largest
	// live host has before it fails as unplaceable. Hosts may join, so this
	// is a grace period, not a verdict at first sight. Defaults to 1m; a
	// negative value means at once.
	UnplaceableAfter time.Duration
	// LostAfter is how long a host may be gone (its heartbeat key expired),
	// or a running attempt missing from its host's heartbeat, before the
	// attempt is declared lost. Defaults to 30s; a negative value means at
	// once.
	LostAfter time.Duration
	// StartTimeout is how long a dispatched attempt may go unlisted by its
	// live host (the worker never took the order) before it is declared
	// lost. Workers take orders in turn, so this is longer. Defaults to 5m.
	StartTimeout time.Duration
	// DecisionTimeout is how long a published decision may go unapplied
	// before Core forgets it and may decide again. Defaults to 30s.
	DecisionTimeout time.Duration
	// MaxExamine bounds how many queued jobs one Decide looks at. Defaults
	// to 10000.
	MaxExamine int
}

func (c *CoreConfig) withDefaults() CoreConfig {
	out := *c
	if out.UnplaceableAfter == 0 {
		out.UnplaceableAfter = time.Minute
	}
	if out.LostAfter == 0 {
		out.LostAfter = 30 * time.Second
	}
	if out.StartTimeout <= 0 {
		out.StartTimeout = 5 * time.Minute
	}
	if out.DecisionTimeout <= 0 {
		out.DecisionTimeout = 30 * time.Second
	}
	if out.MaxExamine <= 0 {
		out.MaxExamine = 10000
	}
	return out
}

type hostState struct {
	name     string
	capacity int // GPUs gpuq may use
	total    int // every device, healthy or not
	used     int // GPUs of ledger jobs on the host
	inflight int // GPUs of decisions not yet applied
	// stray counts GPUs the worker says an attempt holds that the ledger
	// does not place there (a job still ending after it was declared lost).
	stray int
	info  wire.Host
}

func (h *hostState) free() int { return max(h.capacity-h.used-h.inflight-h.stray, 0) }

type placement struct {
	host    string
	gpus    int
	attempt int
	running bool // the worker reported it started
}

type decision struct {
	job, account, host string
	attempt, gpus      int
	at                 time.Time
}

type usage struct{ jobs, gpus int }

// NewCore returns a core with no hosts and an empty queue.
func NewCore(cfg CoreConfig) *Core {
	return &Core{
		cfg:              cfg.withDefaults(),
		queue:            NewQueue(),
		hosts:            map[string]*hostState{},
		onHost:           map[string]placement{},
		inflight:         map[string]*decision{},
		perAcct:          map[string]*usage{},
		unplaceableSince: map[string]time.Time{},
		goneSince:        map[string]time.Time{},
		lostSent:         map[string]time.Time{},
		missingSince:     map[string]time.Time{},
	}
}

// Load indexes every job of s, replacing what Core knew of jobs. Hosts are
// kept.
func (c *Core) Load(s *ledger.State) {
	c.queue = NewQueue()
	c.onHost = map[string]placement{}
	c.inflight = map[string]*decision{}
	c.perAcct = map[string]*usage{}
	for _, h := range c.hosts {
		h.used, h.inflight = 0, 0
	}
	for _, j := range s.Jobs {
		c.index(j)
	}
}

// Queue returns the queue of pending jobs, for reading.
func (c *Core) Queue() *Queue { return c.queue }

// Observe updates Core after the fold applied cmd with result res.
func (c *Core) Observe(s *ledger.State, cmd ledger.Command, res ledger.Result) {
	if d, ok := cmd.(ledger.Dispatch); ok {
		if in := c.inflight[d.Job]; in != nil && in.attempt == d.Attempt {
			c.forget(in)
		}
	}
	for _, k := range res.Changed {
		if k.Kind == ledger.KeyJob {
			if j := s.Jobs[k.ID]; j != nil {
				c.index(j)
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

// index brings the queue and host usage in line with j's state.
func (c *Core) index(j *ledger.Job) {
	if p, ok := c.onHost[j.ID]; ok && (!j.State.OnHost() || p.host != j.Host || p.attempt != j.Attempt) {
		if h := c.hosts[p.host]; h != nil {
			h.used -= p.gpus
		}
		delete(c.onHost, j.ID)
		delete(c.missingSince, j.ID)
	}
	if j.State.OnHost() {
		p, ok := c.onHost[j.ID]
		if !ok {
			p = placement{host: j.Host, gpus: j.GPUs, attempt: j.Attempt}
			if h := c.hosts[j.Host]; h != nil {
				h.used += j.GPUs
			}
		}
		if running := j.State == ledger.StateRunning; running != p.running {
			p.running = running
			delete(c.missingSince, j.ID) // the grace restarts for the new state
		}
		c.onHost[j.ID] = p
	}
	if j.State == ledger.StatePending && c.inflight[j.ID] == nil {
		c.queue.Push(QueueItem{Job: j.ID, Account: j.Account, Priority: j.Priority, SubmitSeq: j.SubmitSeq})
	} else {
		c.queue.Remove(j.ID)
	}
	if j.State != ledger.StatePending {
		delete(c.unplaceableSince, j.ID)
	}
	if !j.State.OnHost() {
		delete(c.lostSent, j.ID)
	}
}

// SetHost records a host's latest heartbeat, received at now. A running
// attempt the heartbeat does not list starts its grace period as missing.
func (c *Core) SetHost(h wire.Host, now time.Time) {
	hs := c.hosts[h.Host]
	if hs == nil {
		hs = &hostState{name: h.Host}
		for _, p := range c.onHost {
			if p.host == h.Host {
				hs.used += p.gpus
			}
		}
		for _, d := range c.inflight {
			if d.host == h.Host {
				hs.inflight += d.gpus
			}
		}
		c.hosts[h.Host] = hs
	}
	hs.capacity, hs.total, hs.info = h.Capacity(), len(h.Devices), h
	hs.stray = 0
	for _, d := range h.Devices {
		if p, ok := c.onHost[d.Job]; d.Job != "" && d.Healthy && (!ok || p.host != h.Host || p.attempt != d.Attempt) {
			hs.stray++
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
func (c *Core) Hosts() []wire.Host {
	out := make([]wire.Host, 0, len(c.hosts))
	for _, h := range c.hosts {
		out = append(out, h.info)
	}
	slices.SortFunc(out, func(a, b wire.Host) int { return cmp.Compare(a.Host, b.Host) })
	return out
}

// Abandon forgets a decision that could not be published, so its job can be
// decided again.
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
}

// Decide returns the decisions to publish now: dispatches of pending jobs to
// hosts with room, unplaceable verdicts for jobs no host can fit, and lost
// verdicts for attempts on hosts that have been gone too long.
//
// Jobs are considered highest priority first, then oldest. An account at its
// running-jobs cap is set aside for the pass; a job over its account's GPU
// cap, in its retry delay, or with no host to fit it now is skipped, and the
// pass goes on to later jobs. Among hosts with room, a job goes to the one
// whose free GPUs fit it most tightly (best fit), ties broken by name.
func (c *Core) Decide(s *ledger.State, now time.Time) []ledger.Command {
	var out []ledger.Command
	out = append(out, c.lost(s, now)...)
	for _, d := range c.inflight {
		if now.Sub(d.at) > c.cfg.DecisionTimeout {
			c.forget(d)
			if j := s.Jobs[d.job]; j != nil {
				c.index(j)
			}
		}
	}
	totalFree, largest := 0, 0
	for _, h := range c.hosts {
		totalFree += h.free()
		largest = max(largest, h.total)
	}
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
		if len(c.hosts) > 0 && j.GPUs > largest {
			since, seen := c.unplaceableSince[j.ID]
			if !seen {
				since = now
				c.unplaceableSince[j.ID] = now
			}
			if now.Sub(since) >= c.cfg.UnplaceableAfter {
				out = append(out, ledger.Unplaceable{Job: j.ID,
					Message: fmt.Sprintf("job needs %d GPUs; the largest live host has %d", j.GPUs, largest)})
				p.Take()
			}
			continue
		}
		delete(c.unplaceableSince, j.ID)
		if totalFree == 0 {
			break // nothing more can start; the rest of the queue waits
		}
		if now.Before(j.NotBefore) {
			continue
		}
		a := s.Accounts[j.Account]
		u := c.perAcct[j.Account]
		if u == nil {
			u = &usage{}
		}
		if a.Limits.MaxRunningJobs > 0 && a.RunningJobs+u.jobs >= a.Limits.MaxRunningJobs {
			p.SkipAccount()
			continue
		}
		if a.Limits.MaxRunningGPUs > 0 && a.RunningGPUs+u.gpus+j.GPUs > a.Limits.MaxRunningGPUs {
			continue
		}
		h := c.bestFit(j.GPUs)
		if h == nil {
			continue
		}
		d := &decision{job: j.ID, account: j.Account, host: h.name, attempt: j.Attempt + 1, gpus: j.GPUs, at: now}
		c.inflight[j.ID] = d
		h.inflight += j.GPUs
		totalFree -= j.GPUs
		u.jobs++
		u.gpus += j.GPUs
		c.perAcct[j.Account] = u
		p.Take()
		out = append(out, ledger.Dispatch{Job: j.ID, Attempt: d.attempt, Host: h.name})
	}
	return out
}

// bestFit returns the host with the fewest free GPUs that still fit gpus.
func (c *Core) bestFit(gpus int) *hostState {
	var best *hostState
	for _, h := range c.hosts {
		f := h.free()
		if f < gpus {
			continue
		}
		if best == nil || f < best.free() || f == best.free() && h.name < best.name {
			best = h
		}
	}
	return best
}

// lost returns lost verdicts for attempts on hosts gone longer than
// LostAfter, and for running attempts missing from their live host's
// heartbeats for as long.
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
