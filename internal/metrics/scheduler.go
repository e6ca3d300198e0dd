package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
)

// Scheduler implements scheduler.Metrics with Prometheus collectors, and
// says whether its scheduler is ready (see [Scheduler.Ready]). Counters and
// histograms are updated as the service reports; the gauges of the queue,
// the hosts, the GPUs and the log come from the last report the service made
// from its own goroutine, read under a lock at scrape time. They are exported
// only while the scheduler leads: a standby knows no queue, and a sum over
// every scheduler of an installation counts each job once.
type Scheduler struct {
	folded    *prometheus.CounterVec
	foldTime  prometheus.Histogram
	flushTime prometheus.Histogram
	flushes   *prometheus.CounterVec
	records   prometheus.Counter
	effects   prometheus.Counter
	decisions *prometheus.CounterVec
	conflicts prometheus.Counter
	reserved  *prometheus.CounterVec
	charged   *prometheus.CounterVec
	released  *prometheus.CounterVec
	terms     prometheus.Counter
	runtime   *prometheus.HistogramVec
	wait      *prometheus.HistogramVec

	mu       sync.Mutex
	standing scheduler.Standing
	progress scheduler.Progress
	stats    scheduler.Stats
	reported bool // Standing has been called
}

var _ scheduler.Metrics = (*Scheduler)(nil)

// Descriptions of the gauges Scheduler computes at scrape time.
var (
	descLeader   = prometheus.NewDesc("gpuq_scheduler_leader", "1 while this scheduler holds the leader lease, else 0.", nil, nil)
	descStanding = prometheus.NewDesc("gpuq_scheduler_standing", "1 for this scheduler's standing: contending, standby, unreachable or leading.", []string{"standing"}, nil)
	descCaught   = prometheus.NewDesc("gpuq_scheduler_caught_up", "1 while the leader has applied every entry the command log had stored (leader only).", nil, nil)
	descApplied  = prometheus.NewDesc("gpuq_scheduler_log_applied_sequence", "Sequence of the last command-log entry the leader folded (leader only).", nil, nil)
	descStored   = prometheus.NewDesc("gpuq_scheduler_log_stored_sequence", "Last command-log sequence stored, as the leader's follower last reported (leader only).", nil, nil)
	descLag      = prometheus.NewDesc("gpuq_scheduler_log_lag_entries", "Command-log entries stored but not yet folded: stored minus applied (leader only).", nil, nil)
	descJobs     = prometheus.NewDesc("gpuq_jobs", "Jobs in the ledger in each state that is not final (pending, held, dispatched, running), by account (leader only).", []string{"account", "state"}, nil)
	descHosts    = prometheus.NewDesc("gpuq_hosts", "Live hosts by state (up or draining), as their heartbeats show (leader only).", []string{"state", "simulated"}, nil)
	descGPUs     = prometheus.NewDesc("gpuq_gpus", "GPUs of live hosts by state: free, claimed (held by a gpuq attempt), busy (used by a process gpuq did not start) or unhealthy (leader only).", []string{"state", "simulated"}, nil)
)

// NewScheduler returns a Scheduler with its collectors registered on reg.
func NewScheduler(reg prometheus.Registerer) (*Scheduler, error) {
	s := &Scheduler{
		folded: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_scheduler_commands_folded_total",
			Help: "Commands folded into the ledger, by command kind and outcome (applied, rejected, ignored, skipped)."}, []string{"kind", "outcome"}),
		foldTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuq_scheduler_fold_duration_seconds",
			Help: "Wall time to fold one command into the ledger.", Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10)}),
		flushTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpuq_scheduler_flush_duration_seconds",
			Help:    "Wall time of one flush, from the start of its writes to its checkpoint: write the changed ledger keys, send the effects, move the checkpoint. Two flushes overlap, and the time includes any wait for the one before to send its effects.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		flushes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_scheduler_flushes_total",
			Help: "Flushes, by result (ok or error)."}, []string{"result"}),
		records: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_scheduler_records_written_total",
			Help: "Ledger records carried by flushes that succeeded."}),
		effects: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_scheduler_effects_sent_total",
			Help: "Effects (events, journal entries, orders) carried by flushes that succeeded."}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_scheduler_decisions_total",
			Help: "Decisions stored on the command log, by kind (dispatch, lost, unplaceable, admit, archive, seal)."}, []string{"kind"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_scheduler_kv_conflicts_total",
			Help: "Ledger writes that failed their compare-and-swap: another scheduler wrote, and this one stepped down."}),
		reserved: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_credits_reserved_total",
			Help: "Credits reserved for jobs, from the journal's reserve entries, by account."}, []string{"account"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_credits_charged_total",
			Help: "Credits charged at settlement, from the journal's settle entries, by account."}, []string{"account"}),
		released: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpuq_credits_released_total",
			Help: "Credits held and given back at settlement, from the journal's settle entries, by account."}, []string{"account"}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpuq_scheduler_terms_total",
			Help: "Times this scheduler took the leader lease and began a term."}),
		runtime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpuq_job_runtime_seconds",
			Help:    "Runtime of the last attempt of jobs that ran and ended, in command time, by account and final state.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 9)}, []string{"account", "state"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpuq_job_wait_seconds",
			Help:    "Time from a job's acceptance to its start, in command time, by account.",
			Buckets: prometheus.ExponentialBuckets(0.1, 4, 10)}, []string{"account"}),
	}
	for _, c := range []prometheus.Collector{s.folded, s.foldTime, s.flushTime, s.flushes, s.records, s.effects, s.decisions,
		s.conflicts, s.reserved, s.charged, s.released, s.terms, s.runtime, s.wait, gauges{s}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: register the scheduler's collectors: %w", err)
		}
	}
	return s, nil
}

// Standing implements scheduler.Metrics.
func (s *Scheduler) Standing(st scheduler.Standing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == scheduler.StandingLeading && s.standing != scheduler.StandingLeading {
		s.terms.Inc()
		s.progress = scheduler.Progress{}
	}
	if st != scheduler.StandingLeading {
		s.progress, s.stats = scheduler.Progress{}, scheduler.Stats{}
	}
	s.standing, s.reported = st, true
}

// Folded implements scheduler.Metrics.
func (s *Scheduler) Folded(kind string, outcome scheduler.FoldOutcome, took time.Duration) {
	s.folded.WithLabelValues(kind, string(outcome)).Inc()
	s.foldTime.Observe(took.Seconds())
}

// Credits implements scheduler.Metrics.
func (s *Scheduler) Credits(account string, move scheduler.CreditMove, amount ledger.Credits) {
	if amount <= 0 {
		return
	}
	var c *prometheus.CounterVec
	switch move {
	case scheduler.CreditsReserved:
		c = s.reserved
	case scheduler.CreditsCharged:
		c = s.charged
	case scheduler.CreditsReleased:
		c = s.released
	default:
		return
	}
	c.WithLabelValues(account).Add(float64(amount))
}

// JobStarted implements scheduler.Metrics.
func (s *Scheduler) JobStarted(account string, wait time.Duration) {
	s.wait.WithLabelValues(account).Observe(max(wait, 0).Seconds())
}

// JobEnded implements scheduler.Metrics.
func (s *Scheduler) JobEnded(account string, state ledger.JobState, runtime time.Duration) {
	s.runtime.WithLabelValues(account, string(state)).Observe(max(runtime, 0).Seconds())
}

// Flushed implements scheduler.Metrics.
func (s *Scheduler) Flushed(took time.Duration, records, effects int, err error) {
	s.flushTime.Observe(took.Seconds())
	if err != nil {
		s.flushes.WithLabelValues("error").Inc()
		return
	}
	s.flushes.WithLabelValues("ok").Inc()
	s.records.Add(float64(records))
	s.effects.Add(float64(effects))
}

// Conflict implements scheduler.Metrics.
func (s *Scheduler) Conflict() { s.conflicts.Inc() }

// Decided implements scheduler.Metrics.
func (s *Scheduler) Decided(kind string, n int) { s.decisions.WithLabelValues(kind).Add(float64(n)) }

// Progress implements scheduler.Metrics.
func (s *Scheduler) Progress(p scheduler.Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress = p
}

// Stats implements scheduler.Metrics. s is kept as given: the service
// hands over its own copy.
func (s *Scheduler) Stats(st scheduler.Stats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = st
}

// Ready reports whether the scheduler is ready: leading and caught up with
// the command log, or a healthy standby (another leads; the lease is
// reachable). The string says what it is; the error why it is not ready.
func (s *Scheduler) Ready() (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.reported:
		return "", errors.New("starting")
	case s.standing == scheduler.StandingStandby:
		return "standby: another scheduler leads; the lease is reachable", nil
	case s.standing == scheduler.StandingUnreachable:
		return "", errors.New("the leader lease cannot be reached")
	case s.standing == scheduler.StandingContending:
		return "", errors.New("contending for the leader lease")
	case !s.progress.Caught && s.progress.Lag() == 0:
		return "", errors.New("leading, not caught up with the command log yet")
	case !s.progress.Caught:
		return "", fmt.Errorf("leading, catching up: %d entries behind the command log", s.progress.Lag())
	}
	return fmt.Sprintf("leading, caught up at %d", s.progress.Applied), nil
}

// gauges collects Scheduler's gauges from its last reports.
type gauges struct{ s *Scheduler }

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeader, descStanding, descCaught, descApplied, descStored, descLag, descJobs, descHosts, descGPUs} {
		ch <- d
	}
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	s := g.s
	s.mu.Lock()
	standing, p, st, reported := s.standing, s.progress, s.stats, s.reported
	s.mu.Unlock()
	leading := reported && standing == scheduler.StandingLeading
	ch <- prometheus.MustNewConstMetric(descLeader, prometheus.GaugeValue, boolValue(leading))
	for _, x := range []scheduler.Standing{scheduler.StandingContending, scheduler.StandingStandby, scheduler.StandingUnreachable, scheduler.StandingLeading} {
		ch <- prometheus.MustNewConstMetric(descStanding, prometheus.GaugeValue, boolValue(reported && standing == x), x.String())
	}
	if !leading {
		return
	}
	ch <- prometheus.MustNewConstMetric(descCaught, prometheus.GaugeValue, boolValue(p.Caught))
	ch <- prometheus.MustNewConstMetric(descApplied, prometheus.GaugeValue, float64(p.Applied))
	ch <- prometheus.MustNewConstMetric(descStored, prometheus.GaugeValue, float64(max(p.Stored, p.Applied)))
	ch <- prometheus.MustNewConstMetric(descLag, prometheus.GaugeValue, float64(p.Lag()))
	for _, j := range st.Jobs {
		ch <- prometheus.MustNewConstMetric(descJobs, prometheus.GaugeValue, float64(j.N), j.Account, string(j.State))
	}
	hosts, gpus := countHosts(st.Hosts)
	for _, h := range hosts {
		ch <- prometheus.MustNewConstMetric(descHosts, prometheus.GaugeValue, float64(h.n), h.state, strconv.FormatBool(h.simulated))
	}
	for _, d := range gpus {
		ch <- prometheus.MustNewConstMetric(descGPUs, prometheus.GaugeValue, float64(d.n), d.state, strconv.FormatBool(d.simulated))
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
