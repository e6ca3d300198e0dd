package scheduler

import (
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// A host that refuses orders is backed off, not fed: after a worker refuses
// an attempt (busy or not), Core places nothing more on that host for
// CoreConfig.HostBackoff's delay for the number of refusals in a row, and
// the count starts again when the host next reports an attempt started.
//
// The count is read from the ledger, where every refusal and start is
// recorded with its command's time, so a new leader and `gpuq why` see the
// same count as the core that observed the commands one by one (the two
// agree as long as command times do not go backwards). The rule: a host's
// refusals in a row are those at or after its latest start (a refusal at
// the very instant of a start counts), and the backoff runs from the latest
// of them.

// refusals is a host's refusals in a row.
type refusals struct {
	n  int       // refusals at or after the host's latest start
	at time.Time // the latest of them
	// nAt counts those of the n at exactly at, which a start at that
	// instant leaves counted.
	nAt       int
	lastStart time.Time
	until     time.Time // when the backoff ends; see Core.rebackoff
}

// maxBackoffCount bounds the refusals in a row the backoff is computed
// from: the delay has long reached its maximum by then.
const maxBackoffCount = 64

// refused reports whether attempt a ended as its worker's refusal.
func refused(a ledger.Attempt) bool {
	return a.StartedAt.IsZero() && (a.Reason == ledger.ReasonWorkerRejected || a.Reason == ledger.ReasonHostBusy)
}

// refusal counts a refusal at time at.
func (r *refusals) refusal(at time.Time) {
	if at.Before(r.lastStart) {
		return // before the latest start: not in a row
	}
	switch {
	case r.n > 0 && at.Equal(r.at):
		r.nAt++
	case r.n == 0 || at.After(r.at):
		r.at, r.nAt = at, 1
	}
	r.n++
}

// start records that the host started an attempt at time at.
func (r *refusals) start(at time.Time) {
	if at.Before(r.lastStart) {
		return
	}
	r.lastStart = at
	switch {
	case r.n == 0:
	case at.After(r.at):
		r.n, r.nAt, r.at = 0, 0, time.Time{}
	case at.Equal(r.at):
		r.n = r.nAt // the refusals at this very instant still count
	}
}

// refusalsFrom reads every host's refusals in a row from the ledger: the
// attempts its jobs record as refused, and the starts of their attempts.
// Hosts with none are in the map too; Core.rebackoff drops them.
func refusalsFrom(s *ledger.State) map[string]*refusals {
	type mark struct {
		host string
		at   time.Time
	}
	var refs, starts []mark
	for _, j := range s.Jobs {
		for _, a := range j.Attempts {
			switch {
			case !a.StartedAt.IsZero():
				starts = append(starts, mark{a.Host, a.StartedAt})
			case refused(a):
				refs = append(refs, mark{a.Host, a.EndedAt})
			}
		}
		if j.State == ledger.StateRunning {
			starts = append(starts, mark{j.Host, j.StartedAt})
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
	// Every start first, then every refusal: the order the rule implies,
	// whatever order the map gave.
	for _, m := range starts {
		if r := get(m.host); m.at.After(r.lastStart) {
			r.lastStart = m.at
		}
	}
	for _, m := range refs {
		get(m.host).refusal(m.at)
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

// rebackoff brings host's backoff in line with its refusals r, after they
// changed: it ends HostBackoff's delay for r.n refusals after the latest.
func (c *Core) rebackoff(host string, r *refusals) {
	if r.n == 0 {
		delete(c.refused, host)
		return
	}
	c.refused[host] = r
	r.until = r.at.Add(c.cfg.HostBackoff.Delay(host, min(r.n, maxBackoffCount)))
}

// BackedOff returns how many orders host has refused in a row and until
// when Core places nothing on it: n is 0 and until the zero time if it has
// refused none since it last started one.
func (c *Core) BackedOff(host string) (n int, until time.Time) {
	if r := c.refused[host]; r != nil {
		return r.n, r.until
	}
	return 0, time.Time{}
}

// observeReport counts a report the fold applied to job j in the reporting
// host's refusals in a row.
func (c *Core) observeReport(j *ledger.Job, r ledger.Report) {
	rs := c.refused[r.Host]
	switch r.Type {
	case ledger.ReportStarted:
		if rs == nil {
			return // nothing to start again
		}
		rs.start(j.StartedAt)
	case ledger.ReportRejected:
		n := len(j.Attempts)
		if n == 0 || j.Attempts[n-1].Host != r.Host || !refused(j.Attempts[n-1]) {
			return
		}
		if rs == nil {
			rs = &refusals{}
		}
		rs.refusal(j.Attempts[n-1].EndedAt)
	default:
		return
	}
	c.rebackoff(r.Host, rs)
}
