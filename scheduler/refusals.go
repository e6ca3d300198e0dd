package scheduler

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// A host that refuses orders, or whose attempts the infrastructure keeps
// ending, is backed off, not fed: after a worker refuses an attempt (busy
// or not), or reports one ended by the infrastructure (a GPU error, a
// worker that cannot clean up after its jobs, a drain), Core places
// nothing more on that host for CoreConfig.HostBackoff's delay for the
// number of such failures in a row. Without this, a host that fails
// everything it is sent (its worker broken, say) becomes a black hole that
// takes every job while healthy hosts idle. A job's own exit code is not
// the host's failure, and is not counted.
//
// Two streaks make up the count: refusals, which start again when the
// host next reports an attempt started (it takes work again); and
// infrastructure failures, which start again when an attempt on the host
// next ends by the job's own doing (it exited, or was cancelled): a host
// that starts every attempt and loses each to the infrastructure does not
// reset its count by starting them.
//
// The counts are read from the ledger, where every refusal, start and end
// is recorded with its command's time, so a new leader and `gpuq why` see
// the same counts as the core that observed the commands one by one (the
// two agree as long as command times do not go backwards). The rule for a
// streak: its failures are those at or after its latest reset (a failure
// at the very instant of a reset counts), and the backoff runs from the
// latest failure of either streak.

// streak is one kind of failure of a host, in a row.
type streak struct {
	n  int       // failures at or after the latest reset
	at time.Time // the latest of them
	// nAt counts those of the n at exactly at, which a reset at that
	// instant leaves counted.
	nAt       int
	lastReset time.Time
}

// refusals is a host's failures in a row: its refusals and its attempts
// ended by the infrastructure.
type refusals struct {
	refused streak    // reset by a start
	failed  streak    // reset by an attempt that ended by the job's doing
	until   time.Time // when the backoff ends; see Core.rebackoff
}

// n is the failures in a row the backoff counts.
func (r *refusals) n() int { return r.refused.n + r.failed.n }

// latest is the time of the latest failure in a row.
func (r *refusals) latest() time.Time {
	switch {
	case r.failed.n == 0:
		return r.refused.at
	case r.refused.n == 0 || r.failed.at.After(r.refused.at):
		return r.failed.at
	}
	return r.refused.at
}

// maxBackoffCount bounds the failures in a row the backoff is computed
// from: the delay has long reached its maximum by then.
const maxBackoffCount = 64

// refused reports whether attempt a ended as its worker's refusal.
func refused(a ledger.Attempt) bool {
	return a.StartedAt.IsZero() && (a.Reason == ledger.ReasonWorkerRejected || a.Reason == ledger.ReasonHostBusy)
}

// infraEnded reports whether attempt a started and was then ended by the
// infrastructure.
func infraEnded(a ledger.Attempt) bool {
	return !a.StartedAt.IsZero() && a.Reason == ledger.ReasonInfrastructure
}

// jobEnded reports whether attempt a started and then ended by the job's
// own doing: it exited (zero or not) or was cancelled. A lost attempt says
// nothing either way.
func jobEnded(a ledger.Attempt) bool {
	return !a.StartedAt.IsZero() && a.Reason != ledger.ReasonInfrastructure && a.Reason != ledger.ReasonLost
}

// fail counts a failure at time at.
func (r *streak) fail(at time.Time) {
	if at.Before(r.lastReset) {
		return // before the latest reset: not in a row
	}
	switch {
	case r.n > 0 && at.Equal(r.at):
		r.nAt++
	case r.n == 0 || at.After(r.at):
		r.at, r.nAt = at, 1
	}
	r.n++
}

// reset records that the streak ended at time at.
func (r *streak) reset(at time.Time) {
	if at.Before(r.lastReset) {
		return
	}
	r.lastReset = at
	switch {
	case r.n == 0:
	case at.After(r.at):
		r.n, r.nAt, r.at = 0, 0, time.Time{}
	case at.Equal(r.at):
		r.n = r.nAt // the failures at this very instant still count
	}
}

// refusalsFrom reads every host's failures in a row from the ledger: the
// attempts its jobs record as refused or ended by the infrastructure, and
// the starts and job-ended attempts that reset them. Hosts with none are in
// the map too; Core.rebackoff drops them.
func refusalsFrom(s *ledger.State) map[string]*refusals {
	type mark struct {
		host string
		at   time.Time
	}
	var refs, starts, fails, ends []mark
	for _, j := range s.Jobs {
		for _, a := range j.Attempts() {
			if !a.StartedAt.IsZero() {
				starts = append(starts, mark{a.Host, a.StartedAt})
			}
			switch {
			case refused(a):
				refs = append(refs, mark{a.Host, a.EndedAt})
			case infraEnded(a):
				fails = append(fails, mark{a.Host, a.EndedAt})
			case jobEnded(a):
				ends = append(ends, mark{a.Host, a.EndedAt})
			}
		}
		if j.State == ledger.StateRunning {
			starts = append(starts, mark{j.Host(), j.StartedAt()})
		}
	}
	out := map[string]*refusals{}
	get := func(host string) *refusals {
		r := out[host]
		if r == nil {
			r = &refusals{}
			out[host] = r
		}
		return r
	}
	// Every reset first, then every failure: the order the rule implies,
	// whatever order the map gave.
	for _, m := range starts {
		if r := get(m.host); m.at.After(r.refused.lastReset) {
			r.refused.lastReset = m.at
		}
	}
	for _, m := range ends {
		if r := get(m.host); m.at.After(r.failed.lastReset) {
			r.failed.lastReset = m.at
		}
	}
	for _, m := range refs {
		get(m.host).refused.fail(m.at)
	}
	for _, m := range fails {
		get(m.host).failed.fail(m.at)
	}
	return out
}

// hostBackoffDefaults fills in HostBackoff's defaults: 1s, doubling, at
// most 30s.
func hostBackoffDefaults(p RetryPolicy) RetryPolicy {
	if p.Initial <= 0 {
		p.Initial = time.Second
	}
	if p.Max <= 0 {
		p.Max = 30 * time.Second
	}
	return p.withDefaults()
}

// backoffUntil returns when host's backoff ends: the zero time if it has
// none.
func (c *Core) backoffUntil(host string) time.Time {
	if r := c.refused[host]; r != nil {
		return r.until
	}
	return time.Time{}
}

// rebackoff brings host's backoff in line with its failures r, after they
// changed: it ends HostBackoff's delay for r.n() failures after the
// latest.
func (c *Core) rebackoff(host string, r *refusals) {
	if r.n() == 0 {
		delete(c.refused, host)
		return
	}
	c.refused[host] = r
	r.until = r.latest().Add(c.cfg.HostBackoff.Delay(host, min(r.n(), maxBackoffCount)))
}

// BackedOff returns how many orders host has failed in a row (refusals
// since it last started an attempt, plus attempts ended by the
// infrastructure since one last ended by the job's doing) and until when
// Core places nothing on it: n is 0 and until the zero time if it has
// none.
func (c *Core) BackedOff(host string) (n int, until time.Time) {
	if r := c.refused[host]; r != nil {
		return r.n(), r.until
	}
	return 0, time.Time{}
}

// HostFailures returns host's failures in a row by kind: orders refused
// since it last started one, and attempts ended by the infrastructure
// since one last ended by the job's doing.
func (c *Core) HostFailures(host string) (refusedOrders, infraFailures int) {
	if r := c.refused[host]; r != nil {
		return r.refused.n, r.failed.n
	}
	return 0, 0
}

// observeReport counts a report the fold applied to job j in the reporting
// host's failures in a row.
func (c *Core) observeReport(j *ledger.Job, r ledger.Report) {
	if j == nil {
		return
	}
	rs := c.refused[r.Host]
	n := len(j.Attempts())
	var last ledger.Attempt
	if n > 0 {
		last = j.Attempts()[n-1]
	}
	switch {
	case r.Type == ledger.ReportStarted:
		if rs == nil {
			return // nothing to start again
		}
		rs.refused.reset(j.StartedAt())
	case n == 0 || last.Host != r.Host:
		return
	case r.Type == ledger.ReportRejected && refused(last):
		if rs == nil {
			rs = &refusals{}
		}
		rs.refused.fail(last.EndedAt)
	case r.Type == ledger.ReportDone && infraEnded(last):
		if rs == nil {
			rs = &refusals{}
		}
		rs.failed.fail(last.EndedAt)
	case r.Type == ledger.ReportDone && jobEnded(last):
		if rs == nil {
			return // nothing to end
		}
		rs.failed.reset(last.EndedAt)
	default:
		return
	}
	c.rebackoff(r.Host, rs)
}

// failuresText says what host failed in a row, for `gpuq why`.
func (c *Core) failuresText(host string) string {
	refs, fails := c.HostFailures(host)
	var parts []string
	if refs > 0 {
		parts = append(parts, fmt.Sprintf("refused its last %d orders", refs))
	}
	if fails > 0 {
		parts = append(parts, fmt.Sprintf("had its last %d attempts ended by the infrastructure (not by their jobs)", fails))
	}
	return strings.Join(parts, " and ")
}
