package scheduler

import (
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// Metrics receives what a [Service] measures, for an exporter such as
// internal/metrics. The service calls it only from its own goroutine (the one
// that runs [Service.Run]), in the order things happen; an implementation
// that is read elsewhere (a scrape) guards its own state. Calls must return
// at once: they sit on the fold's path. A nil Config.Metrics turns metrics
// off, and then nothing is measured.
type Metrics interface {
	// Standing reports the service's standing, each time it is found
	// (not only when it changes).
	Standing(s Standing)
	// Folded reports one command folded: its kind (ledger.Command.Kind),
	// its outcome (see [FoldOutcome]) and the wall time the fold took.
	Folded(kind string, outcome FoldOutcome, took time.Duration)
	// Credits reports credits moved by a journal entry the fold emitted.
	Credits(account string, move CreditMove, amount ledger.Credits)
	// JobStarted reports a job started, with the command time from its
	// acceptance to its start.
	JobStarted(account string, wait time.Duration)
	// JobEnded reports a job that ran ending in final state, with its
	// last attempt's runtime in command time.
	JobEnded(account string, state ledger.JobState, runtime time.Duration)
	// Flushed reports a flush: the wall time it took, the records and
	// effects it carried, and its error (nil when it succeeded).
	Flushed(took time.Duration, records, effects int, err error)
	// Conflict reports a ledger write that failed its compare-and-swap
	// ([ErrConflict]).
	Conflict()
	// Decided reports decisions of one kind stored on the command log.
	Decided(kind string, n int)
	// Progress reports how far the fold is behind the log.
	Progress(p Progress)
	// Stats reports the queue and the hosts as the leader sees them. It
	// is called at most once per [StatsInterval]; s is the caller's copy.
	Stats(s Stats)
}

// Standing is where a scheduler stands with respect to the leader lease.
type Standing int

// Standings.
const (
	// StandingContending: starting, or stepped down, and trying for the
	// lease.
	StandingContending Standing = iota
	// StandingStandby: another scheduler leads; the lease is reachable.
	StandingStandby
	// StandingUnreachable: the lease cannot be reached.
	StandingUnreachable
	// StandingLeading: this scheduler holds the lease and folds the log
	// (see [Progress] for whether it has caught up).
	StandingLeading
)

func (s Standing) String() string {
	switch s {
	case StandingContending:
		return "contending"
	case StandingStandby:
		return "standby"
	case StandingUnreachable:
		return "unreachable"
	case StandingLeading:
		return "leading"
	}
	return "unknown"
}

// FoldOutcome is what folding one command came to.
type FoldOutcome string

// Fold outcomes.
const (
	FoldApplied  FoldOutcome = "applied"  // it changed the ledger
	FoldRejected FoldOutcome = "rejected" // it was answered with a rejection
	FoldIgnored  FoldOutcome = "ignored"  // it changed nothing (a stale report, a repeated cancel)
	FoldSkipped  FoldOutcome = "skipped"  // a replay of a command the ledger already reflects
)

// CreditMove is a kind of credit movement a journal entry records.
type CreditMove string

// Credit movements.
const (
	CreditsReserved CreditMove = "reserved" // held for a job (a reserve entry)
	CreditsCharged  CreditMove = "charged"  // taken from the balance at settlement
	CreditsReleased CreditMove = "released" // held and given back at settlement
)

// Progress is how far the fold is behind the command log.
type Progress struct {
	// Applied is the sequence of the last entry folded.
	Applied uint64
	// Stored is the last sequence the log had stored, as the follower
	// last said (an entry's sequence plus the entries pending after it).
	Stored uint64
	// Caught is set while the fold has applied everything the log had.
	Caught bool
}

// Lag is how many stored entries are not applied yet.
func (p Progress) Lag() uint64 {
	if p.Stored <= p.Applied {
		return 0
	}
	return p.Stored - p.Applied
}

// Stats is the leader's view of its queue and hosts.
type Stats struct {
	// Jobs counts the jobs in each state that is not final, by account,
	// sorted by account then state. Every such state of an account that
	// has had a job in one this term is listed, with 0 where none is.
	Jobs []JobCount
	// Hosts are the live hosts' latest heartbeats, sorted by name. Each
	// is a copy the receiver may keep.
	Hosts []wire.Heartbeat
}

// JobCount is how many jobs of an account are in a state.
type JobCount struct {
	Account string
	State   ledger.JobState
	N       int
}

// StatsInterval is how often at most a leader reports [Stats].
const StatsInterval = time.Second

// termMetrics is what a term remembers for its metrics.
type termMetrics struct {
	stored    uint64    // the last sequence the log said it had stored
	statsAt   time.Time // when Stats were last computed
	statsSent bool
	// queue counts the jobs in each state that is not final, by account,
	// kept up to date by each fold from the job keys it changed (a walk
	// of every job, finished ones included, would stall the fold once per
	// StatsInterval); nil until the term first counts them all.
	queue map[string]*[len(queueStates)]int
	// queued is where each job in a state that is not final was counted.
	queued map[string]queuedJob
}

// queuedJob is where a job was counted: its account and its state's index
// in queueStates.
type queuedJob struct {
	account string
	state   int
}

// standing reports st, if metrics are on.
func (s *Service) standing(st Standing) {
	if s.cfg.Metrics != nil {
		s.cfg.Metrics.Standing(st)
	}
}

// observe measures one folded entry: its outcome, the credits its journal
// entries moved, and the jobs it started or ended.
func (t *term) observe(e LogEntry, cmd ledger.Command, res ledger.Result, began time.Time) {
	t.m.stored = max(t.m.stored, e.Seq+e.Pending)
	m := t.s.cfg.Metrics
	if m == nil {
		return
	}
	m.Folded(cmd.Kind(), foldOutcome(res), time.Since(began))
	if t.m.queue == nil {
		t.m.countQueue(t.state) // the state already reflects this command
	} else {
		for _, k := range res.Changed {
			if k.Kind == ledger.KeyJob {
				t.m.requeue(k.ID, t.state.Jobs[k.ID])
			}
		}
	}
	for _, eff := range res.Effects {
		switch ef := eff.(type) {
		case ledger.Entry:
			switch ef.Kind {
			case ledger.EntryReserve:
				m.Credits(ef.Account, CreditsReserved, ef.Amount)
			case ledger.EntrySettle:
				m.Credits(ef.Account, CreditsCharged, ef.Amount)
				m.Credits(ef.Account, CreditsReleased, ef.Released)
			}
		case ledger.JobEvent:
			j := t.state.Jobs[ef.Job]
			if j == nil || j.StartedAt().IsZero() {
				continue
			}
			switch {
			case ef.Type == ledger.EventStarted:
				m.JobStarted(ef.Account, j.StartedAt().Sub(j.SubmittedAt))
			case ef.State.Terminal() && (ef.Type == ledger.EventSucceeded || ef.Type == ledger.EventFailed || ef.Type == ledger.EventCancelled):
				m.JobEnded(ef.Account, ef.State, j.EndedAt().Sub(j.StartedAt()))
			}
		}
	}
}

// flushed measures a flush the flusher carried out; it runs on the service
// goroutine, as every call of [Metrics] does.
func (s *Service) flushed(r flushed) {
	m := s.cfg.Metrics
	if m == nil {
		return
	}
	m.Flushed(r.took, r.records, r.effects, r.err)
	if errors.Is(r.err, ErrConflict) {
		m.Conflict()
	}
}

// decided measures decisions stored on the log, by kind.
func (t *term) decided(sent []ledger.Command) {
	m := t.s.cfg.Metrics
	if m == nil || len(sent) == 0 {
		return
	}
	kinds := make([]string, len(sent))
	for i, c := range sent {
		kinds[i] = c.Kind()
	}
	slices.Sort(kinds)
	for i := 0; i < len(kinds); {
		j := i
		for j < len(kinds) && kinds[j] == kinds[i] {
			j++
		}
		m.Decided(kinds[i], j-i)
		i = j
	}
}

// publish reports the term's progress, and its stats once per
// StatsInterval. It runs on the service goroutine, which owns the state it
// reads.
func (t *term) publish(now time.Time) {
	m := t.s.cfg.Metrics
	if m == nil {
		return
	}
	m.Progress(Progress{Applied: t.applied, Stored: max(t.m.stored, t.applied), Caught: t.caught && t.applied >= t.ahead})
	if t.m.statsSent && now.Sub(t.m.statsAt) < StatsInterval {
		return
	}
	t.m.statsAt, t.m.statsSent = now, true
	if t.m.queue == nil {
		t.m.countQueue(t.state)
	}
	m.Stats(Stats{Jobs: t.m.jobCounts(), Hosts: cloneHosts(t.core.Hosts())})
}

// foldOutcome classifies what a fold did from the events it emitted: a
// rejection anywhere makes it rejected; only ignored events make it ignored.
func foldOutcome(res ledger.Result) FoldOutcome {
	if res.Skipped {
		return FoldSkipped
	}
	events, ignored := 0, 0
	for _, eff := range res.Effects {
		var typ ledger.EventType
		switch ef := eff.(type) {
		case ledger.JobEvent:
			typ = ef.Type
		case ledger.AccountEvent:
			typ = ef.Type
		case ledger.ConfigEvent:
			typ = ef.Type
		case ledger.InvalidEvent:
			typ = ledger.EventRejected
		default:
			continue
		}
		events++
		switch typ {
		case ledger.EventRejected:
			return FoldRejected
		case ledger.EventIgnored:
			ignored++
		}
	}
	if events > 0 && ignored == events {
		return FoldIgnored
	}
	if events == 0 && len(res.Changed) == 0 {
		return FoldIgnored
	}
	return FoldApplied
}

// queueStates are the states countJobs counts, in the order it lists them.
var queueStates = [...]ledger.JobState{ledger.StateDispatched, ledger.StateHeld, ledger.StatePending, ledger.StateRunning}

// countQueue counts every job of s in a state that is not final, afresh.
func (m *termMetrics) countQueue(s *ledger.State) {
	m.queue, m.queued = map[string]*[len(queueStates)]int{}, map[string]queuedJob{}
	for id, j := range s.Jobs {
		m.requeue(id, j)
	}
}

// requeue moves job id's count to where j (nil when archived) is now.
func (m *termMetrics) requeue(id string, j *ledger.Job) {
	if old, ok := m.queued[id]; ok {
		m.queue[old.account][old.state]--
		delete(m.queued, id)
	}
	if j == nil {
		return
	}
	i := slices.Index(queueStates[:], j.State)
	if i < 0 {
		return
	}
	n := m.queue[j.Account]
	if n == nil {
		n = new([len(queueStates)]int)
		m.queue[j.Account] = n
	}
	n[i]++
	m.queued[id] = queuedJob{account: j.Account, state: i}
}

// jobCounts lists the counts, sorted by account then state.
func (m *termMetrics) jobCounts() []JobCount {
	out := make([]JobCount, 0, len(m.queue)*len(queueStates))
	for _, a := range slices.Sorted(maps.Keys(m.queue)) {
		for i, n := range m.queue[a] {
			out = append(out, JobCount{Account: a, State: queueStates[i], N: n})
		}
	}
	return out
}

// countJobs counts the jobs of s in each state that is not final, by
// account, as [termMetrics] keeps them: the reference its tests compare the
// kept counts with.
func countJobs(s *ledger.State) []JobCount {
	var m termMetrics
	m.countQueue(s)
	return m.jobCounts()
}

// cloneHosts copies hs deeply enough that the receiver may keep it.
func cloneHosts(hs []wire.Heartbeat) []wire.Heartbeat {
	for i := range hs {
		hs[i].Devices = slices.Clone(hs[i].Devices)
		hs[i].Running = slices.Clone(hs[i].Running)
	}
	return hs
}
