// Model-based test of the ledger. rapid draws random sequences of every
// command — admin ops, submissions (many with reused ids), cancels, dispatch
// and lost decisions, worker reports with random attempts and hosts (busy
// refusals among them), invalid entries, archive decisions (some stale,
// early or for unfinished jobs), commands re-sent as new log
// entries, and replays of earlier log entries at their old sequence
// numbers — and runs each against the real
// ledger and against the small model below, written separately and as
// plainly as possible. After every step:
//
//   - the ledger's own invariants hold (ledgertest.Log checks them, and
//     recomputes every balance from the journal and compares);
//   - every account and job matches the model field by field;
//   - each fresh command's outcome (event type and reason), and the cancel
//     orders it sends (a cancel of a job on a host, a started report for a
//     run that is not the job's current one), match the model's;
//   - a replay changed no key at all (of a command that names no job
//     archived since: the scheduler replays only from its checkpoint,
//     against records as of it, so it never re-applies one);
//   - an archived job is gone from the ledger, whatever its accounts hold.
//
// Failures shrink to the shortest sequence; replay one with -rapid.seed or
// the file rapid writes under testdata/rapid/.
package ledger_test

import (
	"flag"
	"fmt"
	"math/big"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"pgregory.net/rapid"
)

// TestMain makes the default run check at least 1,000 sequences of about 60
// steps each, unless -rapid.checks or -rapid.steps say otherwise.
func TestMain(m *testing.M) {
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	defaults := map[string]string{"rapid.checks": "1000", "rapid.steps": "60"}
	for name, v := range defaults {
		if !set[name] && os.Getenv("RAPID_"+map[string]string{"rapid.checks": "CHECKS", "rapid.steps": "STEPS"}[name]) == "" {
			if err := flag.Set(name, v); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
		}
	}
	os.Exit(m.Run())
}

// The model.

type mAccount struct {
	balance, reserved int64
	runJobs, runGPUs  int
	limits            ledger.Limits
	weight            int
	rate, cap         int64
	last              time.Time
	carry             *big.Int
	ops               []ledger.Admin
	held              []string // held job ids, oldest first
}

type mJob struct {
	terms             ledger.Submit // with defaults; Cost is the reservation for metered jobs
	state             ledger.JobState
	attempt, failures int
	busy              int // busy refusals that spent no attempt
	host, model       string
	ended             time.Time // when it reached a final state
	cancel            bool
	held, charged     int64
}

type mPricing struct {
	per  map[string]int64
	def  int64
	fail int
	op   string
}

type model struct {
	accts   map[string]*mAccount
	jobs    map[string]*mJob
	pricing *mPricing
	// touched are the accounts the current command changed; after it,
	// their held jobs are admitted if the account can pay.
	touched map[string]bool
	// cancels are the cancel orders the current command sends.
	cancels []ledger.CancelOrder
	// staleArchive says the archive decision being applied names an older
	// record of its job than the current one.
	staleArchive bool
}

func newModel() *model { return &model{accts: map[string]*mAccount{}, jobs: map[string]*mJob{}} }

func out(typ ledger.EventType, reason ledger.Reason) string {
	return string(typ) + "/" + string(reason)
}

// refill adds rate·elapsed/hour to the balance, carrying the remainder,
// never past the cap.
func (a *mAccount) refill(at time.Time) {
	if !at.After(a.last) {
		return
	}
	elapsed := at.Sub(a.last)
	a.last = at
	if a.rate <= 0 || a.balance >= a.cap {
		a.carry = new(big.Int)
		return
	}
	acc := new(big.Int).Mul(big.NewInt(a.rate), big.NewInt(int64(elapsed)))
	acc.Add(acc, a.carry)
	q, r := new(big.Int).QuoRem(acc, big.NewInt(int64(time.Hour)), new(big.Int))
	if room := a.cap - a.balance; q.Cmp(big.NewInt(room)) >= 0 {
		a.balance, a.carry = a.cap, new(big.Int)
		return
	}
	a.balance += q.Int64()
	a.carry = r
}

// touch refills an account the command changes and marks it touched.
func (m *model) touch(id string, at time.Time) {
	m.accts[id].refill(at)
	m.touched[id] = true
}

// gpuCost is ⌈gpus × seconds × price / 3600⌉.
func gpuCost(gpus int, seconds, price int64) int64 {
	n := new(big.Int).Mul(big.NewInt(int64(gpus)*seconds), big.NewInt(price))
	n.Add(n, big.NewInt(3599))
	return n.Quo(n, big.NewInt(3600)).Int64()
}

func secondsUp(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func (m *model) maxPrice() int64 {
	if m.pricing == nil {
		return 0
	}
	p := m.pricing.def
	for _, v := range m.pricing.per {
		p = max(p, v)
	}
	return p
}

func (m *model) submit(c ledger.Submit, at time.Time) string {
	c = c.WithDefaults()
	if c.Cost < 0 || c.GPUs < 1 || len(c.Command) == 0 || c.Metered && c.Cost != 0 {
		return out(ledger.EventRejected, ledger.ReasonInvalid)
	}
	if j := m.jobs[c.ID]; j != nil && j.state != ledger.StateRejected {
		t := j.terms
		if slices.Equal(t.Command, c.Command) && t.Account == c.Account && (t.Metered || t.Cost == c.Cost) && t.Metered == c.Metered &&
			t.Hold == c.Hold && t.GPUs == c.GPUs && t.Priority == c.Priority && t.MaxAttempts == c.MaxAttempts && t.Walltime == c.Walltime {
			return out(ledger.EventIgnored, ledger.ReasonDuplicate)
		}
		return out(ledger.EventRejected, ledger.ReasonDuplicateConflict)
	}
	a := m.accts[c.Account]
	if a == nil {
		m.jobs[c.ID] = &mJob{terms: c, state: ledger.StateRejected}
		return out(ledger.EventRejected, ledger.ReasonUnknownAccount)
	}
	if c.Metered {
		price := m.maxPrice()
		if price == 0 {
			m.jobs[c.ID] = &mJob{terms: c, state: ledger.StateRejected}
			return out(ledger.EventRejected, ledger.ReasonNoPrice)
		}
		c.Cost = ledger.Credits(gpuCost(c.GPUs, secondsUp(c.Walltime), price))
	}
	m.touch(c.Account, at)
	if int64(c.Cost) > a.balance-a.reserved || c.Hold && len(a.held) > 0 {
		if !c.Hold {
			m.jobs[c.ID] = &mJob{terms: c, state: ledger.StateRejected}
			return out(ledger.EventRejected, ledger.ReasonInsufficientCredits)
		}
		m.jobs[c.ID] = &mJob{terms: c, state: ledger.StateHeld}
		a.held = append(a.held, c.ID)
		return out(ledger.EventHeld, "")
	}
	a.reserved += int64(c.Cost)
	m.jobs[c.ID] = &mJob{terms: c, state: ledger.StatePending, held: int64(c.Cost)}
	return out(ledger.EventAccepted, "")
}

// admitHeld reserves the account's held jobs, oldest first, while it can
// pay, and reports whether it admitted any.
func (m *model) admitHeld(id string, at time.Time) bool {
	a := m.accts[id]
	if len(a.held) == 0 {
		return false
	}
	a.refill(at)
	admitted := false
	for len(a.held) > 0 {
		j := m.jobs[a.held[0]]
		if int64(j.terms.Cost) > a.balance-a.reserved {
			break
		}
		a.held = a.held[1:]
		a.reserved += int64(j.terms.Cost)
		j.state, j.held = ledger.StatePending, int64(j.terms.Cost)
		admitted = true
	}
	return admitted
}

func onHost(s ledger.JobState) bool { return s == ledger.StateDispatched || s == ledger.StateRunning }

// finish settles j, charging charged and releasing the rest.
func (m *model) finish(j *mJob, to ledger.JobState, charged int64, at time.Time) {
	a := m.accts[j.terms.Account]
	m.touch(j.terms.Account, at)
	if onHost(j.state) {
		a.runJobs--
		a.runGPUs -= j.terms.GPUs
	}
	a.reserved -= j.held
	a.balance -= charged
	j.charged, j.held, j.state = charged, 0, to
}

// charge is what an attempt of j that ran runtime pays, at pct percent.
func (m *model) charge(j *mJob, runtime time.Duration, pct int) int64 {
	if pct == 0 {
		return 0
	}
	if !j.terms.Metered {
		return j.held
	}
	price, ok := m.pricing.per[j.model]
	if !ok {
		price = m.pricing.def
	}
	full := min(gpuCost(j.terms.GPUs, secondsUp(runtime), price), j.held)
	return full * int64(pct) / 100
}

func (m *model) failPct(j *mJob) int {
	if !j.terms.Metered || m.pricing == nil {
		return 0
	}
	return m.pricing.fail
}

func (m *model) cancel(c ledger.Cancel, at time.Time) string {
	j := m.jobs[c.Job]
	switch {
	case j == nil:
		return out(ledger.EventIgnored, ledger.ReasonUnknownJob)
	case j.terms.Account != c.Account:
		return out(ledger.EventIgnored, ledger.ReasonAccountMismatch)
	case j.state == ledger.StatePending:
		m.finish(j, ledger.StateCancelled, 0, at)
		return out(ledger.EventCancelled, ledger.ReasonCancelled)
	case j.state == ledger.StateHeld:
		a := m.accts[j.terms.Account]
		a.held = slices.DeleteFunc(a.held, func(id string) bool { return id == c.Job })
		m.touched[j.terms.Account] = true
		j.state = ledger.StateCancelled
		return out(ledger.EventCancelled, ledger.ReasonCancelled)
	case onHost(j.state) && j.cancel:
		return out(ledger.EventIgnored, ledger.ReasonAlreadyCancelling)
	case onHost(j.state):
		j.cancel = true
		m.cancels = append(m.cancels, ledger.CancelOrder{Host: j.host, Job: c.Job, Account: j.terms.Account, Attempt: j.attempt})
		return out(ledger.EventCancelRequested, ledger.ReasonCancelled)
	}
	return out(ledger.EventIgnored, ledger.ReasonAlreadyTerminal)
}

func (m *model) admin(c ledger.Admin, at time.Time) string {
	rejected := func(r ledger.Reason) string { return out(ledger.EventRejected, r) }
	switch {
	case c.Op == ledger.OpGrant && c.Amount == 0,
		c.Op == ledger.OpWeight && c.Weight < 1,
		c.Op == ledger.OpRefill && c.RatePerHour > 0 && c.Cap == 0:
		return rejected(ledger.ReasonInvalid)
	}
	a := m.accts[c.Account]
	if a != nil {
		recent := a.ops[max(0, len(a.ops)-ledger.MaxRecentOps):]
		for _, op := range recent {
			if op.ID == c.ID {
				if op == c {
					return out(ledger.EventIgnored, ledger.ReasonDuplicate)
				}
				return rejected(ledger.ReasonDuplicateConflict)
			}
		}
	}
	var result string
	switch {
	case c.Op == ledger.OpCreate && a != nil:
		return rejected(ledger.ReasonAccountExists)
	case c.Op == ledger.OpCreate:
		a = &mAccount{balance: int64(c.Balance), weight: 1, last: at, carry: new(big.Int)}
		m.accts[c.Account] = a
		m.touched[c.Account] = true
		result = out(ledger.EventCreated, "")
	case a == nil:
		return rejected(ledger.ReasonUnknownAccount)
	case c.Op == ledger.OpGrant:
		m.touch(c.Account, at)
		nb := a.balance + int64(c.Amount)
		if nb > int64(ledger.MaxCredits) || nb < -int64(ledger.MaxCredits) {
			return rejected(ledger.ReasonOverflow)
		}
		if nb < a.reserved {
			return rejected(ledger.ReasonInsufficientCredits)
		}
		a.balance = nb
		result = out(ledger.EventGranted, "")
	case c.Op == ledger.OpLimits:
		m.touched[c.Account] = true
		a.limits = c.Limits
		result = out(ledger.EventLimitsSet, "")
	case c.Op == ledger.OpRefill:
		m.touch(c.Account, at)
		a.rate, a.cap, a.last, a.carry = int64(c.RatePerHour), int64(c.Cap), at, new(big.Int)
		result = out(ledger.EventRefillSet, "")
	case c.Op == ledger.OpWeight:
		m.touched[c.Account] = true
		a.weight = c.Weight
		result = out(ledger.EventWeightSet, "")
	}
	a.ops = append(a.ops, c)
	return result
}

func (m *model) pricingCmd(c ledger.SetPricing) string {
	if c.FailurePercent < 0 || c.FailurePercent > 100 {
		return out(ledger.EventRejected, ledger.ReasonInvalid)
	}
	if m.pricing != nil && m.pricing.op == c.ID {
		return out(ledger.EventIgnored, ledger.ReasonDuplicate)
	}
	per := map[string]int64{}
	for k, v := range c.PerGPUHour {
		per[k] = int64(v)
	}
	m.pricing = &mPricing{per: per, def: int64(c.Default), fail: c.FailurePercent, op: c.ID}
	return out(ledger.EventPricingSet, "")
}

func (m *model) dispatch(c ledger.Dispatch) string {
	j := m.jobs[c.Job]
	if j == nil {
		return out("invalid", ledger.ReasonUnknownJob)
	}
	ignored := func(r ledger.Reason) string { return out(ledger.EventIgnored, r) }
	a := m.accts[j.terms.Account]
	switch {
	case j.state != ledger.StatePending:
		return ignored(ledger.ReasonNotPending)
	case c.Attempt != j.attempt+1:
		return ignored(ledger.ReasonStaleAttempt)
	case a.limits.MaxRunningJobs > 0 && a.runJobs+1 > a.limits.MaxRunningJobs:
		return ignored(ledger.ReasonMaxRunningJobs)
	case a.limits.MaxRunningGPUs > 0 && a.runGPUs+j.terms.GPUs > a.limits.MaxRunningGPUs:
		return ignored(ledger.ReasonMaxRunningGPUs)
	}
	j.state, j.attempt, j.host = ledger.StateDispatched, c.Attempt, c.Host
	a.runJobs++
	a.runGPUs += j.terms.GPUs
	m.touched[j.terms.Account] = true
	return out(ledger.EventDispatched, "")
}

func (m *model) retry(j *mJob, reason ledger.Reason, at time.Time) string {
	j.failures++
	switch {
	case j.cancel:
		m.finish(j, ledger.StateCancelled, 0, at)
		return out(ledger.EventCancelled, ledger.ReasonCancelled)
	case j.failures >= j.terms.MaxAttempts:
		m.finish(j, ledger.StateFailed, 0, at)
		return out(ledger.EventFailed, ledger.ReasonAttemptsExhausted)
	}
	return m.requeue(j, reason)
}

// requeue takes j off its host, pending again.
func (m *model) requeue(j *mJob, reason ledger.Reason) string {
	a := m.accts[j.terms.Account]
	a.runJobs--
	a.runGPUs -= j.terms.GPUs
	m.touched[j.terms.Account] = true
	j.state, j.host, j.model = ledger.StatePending, "", ""
	return out(ledger.EventRequeued, reason)
}

func (m *model) report(r ledger.Report, at time.Time) string {
	j := m.jobs[r.Job]
	if j == nil {
		return out("invalid", ledger.ReasonUnknownJob)
	}
	ignored := func(reason ledger.Reason) string { return out(ledger.EventIgnored, reason) }
	want := ledger.StateDispatched
	if r.Type == ledger.ReportDone {
		want = ledger.StateRunning
	}
	// A started report for anything but the attempt the job runs or
	// waits to start on that host is a run to stop.
	if r.Type == ledger.ReportStarted && (r.Attempt != j.attempt || r.Host != j.host || !onHost(j.state)) {
		m.cancels = append(m.cancels, ledger.CancelOrder{Host: r.Host, Job: r.Job, Account: j.terms.Account, Attempt: r.Attempt})
	}
	switch {
	case r.Attempt != j.attempt:
		return ignored(ledger.ReasonStaleAttempt)
	case r.Host != j.host:
		return ignored(ledger.ReasonWrongHost)
	case j.state != want:
		return ignored(ledger.ReasonBadState)
	case r.Type == ledger.ReportStarted && len(r.Devices) != j.terms.GPUs:
		return ignored(ledger.ReasonBadDevices)
	case r.Type == ledger.ReportStarted:
		j.state, j.model = ledger.StateRunning, r.Model
		return out(ledger.EventStarted, "")
	case r.Type == ledger.ReportDone && r.Infra != "":
		return m.retry(j, ledger.ReasonInfrastructure, at)
	case r.Type == ledger.ReportDone && r.ExitCode == 0:
		m.finish(j, ledger.StateSucceeded, m.charge(j, r.Runtime, 100), at)
		return out(ledger.EventSucceeded, "")
	case r.Type == ledger.ReportDone && j.cancel:
		m.finish(j, ledger.StateCancelled, m.charge(j, r.Runtime, m.failPct(j)), at)
		return out(ledger.EventCancelled, ledger.ReasonCancelled)
	case r.Type == ledger.ReportDone:
		m.finish(j, ledger.StateFailed, m.charge(j, r.Runtime, m.failPct(j)), at)
		return out(ledger.EventFailed, ledger.ReasonExitCode)
	case r.Busy && j.busy < ledger.MaxBusyRefusals && !j.cancel:
		j.busy++
		return m.requeue(j, ledger.ReasonHostBusy)
	}
	return m.retry(j, ledger.ReasonWorkerRejected, at)
}

func (m *model) lost(l ledger.Lost, at time.Time) string {
	j := m.jobs[l.Job]
	switch {
	case j == nil:
		return out("invalid", ledger.ReasonUnknownJob)
	case l.Attempt != j.attempt:
		return out(ledger.EventIgnored, ledger.ReasonStaleAttempt)
	case !onHost(j.state):
		return out(ledger.EventIgnored, ledger.ReasonBadState)
	}
	m.retry(j, ledger.ReasonLost, at)
	return out(ledger.EventLost, ledger.ReasonLost)
}

func (m *model) apply(cmd ledger.Command, at time.Time) string {
	m.touched = map[string]bool{}
	m.cancels = nil
	before := map[string]*mJob{}
	final := map[string]bool{}
	for id, j := range m.jobs {
		before[id], final[id] = j, j.state.Terminal()
	}
	result := m.apply1(cmd, at)
	// A job that reached a final state now (or a record replaced by a new
	// rejection) ended at this command's time.
	for id, j := range m.jobs {
		if j.state.Terminal() && (before[id] != j || !final[id]) {
			j.ended = at
		}
	}
	admitted := false
	for id := range m.touched {
		admitted = m.admitHeld(id, at) || admitted
	}
	if result == "(no event)" && admitted {
		result = out(ledger.EventAccepted, "") // an admit's only events are the admissions
	}
	return result
}

func (m *model) apply1(cmd ledger.Command, at time.Time) string {
	switch c := cmd.(type) {
	case ledger.Submit:
		return m.submit(c, at)
	case ledger.Cancel:
		return m.cancel(c, at)
	case ledger.Admin:
		return m.admin(c, at)
	case ledger.SetPricing:
		return m.pricingCmd(c)
	case ledger.Dispatch:
		return m.dispatch(c)
	case ledger.Report:
		return m.report(c, at)
	case ledger.Lost:
		return m.lost(c, at)
	case ledger.Admit:
		if m.accts[c.Account] == nil {
			return out("invalid", ledger.ReasonUnknownAccount)
		}
		m.touch(c.Account, at)
		return "(no event)"
	case ledger.Unplaceable:
		j := m.jobs[c.Job]
		switch {
		case j == nil:
			return out("invalid", ledger.ReasonUnknownJob)
		case j.state != ledger.StatePending:
			return out(ledger.EventIgnored, ledger.ReasonNotPending)
		}
		m.finish(j, ledger.StateFailed, 0, at)
		return out(ledger.EventFailed, ledger.ReasonUnplaceable)
	case ledger.Invalid:
		return out("invalid", c.Reason)
	case ledger.Archive:
		return m.archive(c, at)
	}
	panic(fmt.Sprintf("model: unknown command %T", cmd))
}

// archive removes a final job that ended at least the retention ago, if
// the decision saw the job's current record (staleArchive says it did not).
func (m *model) archive(c ledger.Archive, at time.Time) string {
	j := m.jobs[c.Job]
	switch {
	case j == nil:
		return out("invalid", ledger.ReasonUnknownJob)
	case m.staleArchive:
		return out(ledger.EventIgnored, ledger.ReasonNotArchivable)
	case !j.state.Terminal() || at.Before(j.ended.Add(c.Retention)):
		return out(ledger.EventIgnored, ledger.ReasonNotArchivable)
	}
	delete(m.jobs, c.Job)
	return out(ledger.EventArchived, "")
}

// outcome reads the real ledger's answer to a command: the type and reason of
// its first event.
func outcome(res ledger.Result) string {
	for _, e := range res.Effects {
		switch ev := e.(type) {
		case ledger.JobEvent:
			return out(ev.Type, ev.Reason)
		case ledger.AccountEvent:
			return out(ev.Type, ev.Reason)
		case ledger.ConfigEvent:
			return out(ev.Type, ev.Reason)
		case ledger.InvalidEvent:
			return out("invalid", ev.Reason)
		}
	}
	return "(no event)"
}

// compare fails unless every account and job of the ledger matches the model.
func (m *model) compare(t *rapid.T, s *ledger.State) {
	if len(s.Accounts) != len(m.accts) || len(s.Jobs) != len(m.jobs) {
		t.Fatalf("ledger has %d accounts, %d jobs; model %d, %d", len(s.Accounts), len(s.Jobs), len(m.accts), len(m.jobs))
	}
	for id, want := range m.accts {
		a := s.Accounts[id]
		if a == nil {
			t.Fatalf("account %s missing", id)
		}
		got := fmt.Sprintf("balance %d reserved %d running %d/%d limits %+v weight %d refill %d/%d held %v",
			a.Balance, a.Reserved, a.RunningJobs, a.RunningGPUs, a.Limits, a.Weight, a.Refill.RatePerHour, a.Refill.Cap, a.HeldJobs)
		exp := fmt.Sprintf("balance %d reserved %d running %d/%d limits %+v weight %d refill %d/%d held %v",
			want.balance, want.reserved, want.runJobs, want.runGPUs, want.limits, want.weight, want.rate, want.cap, want.held)
		if got != exp {
			t.Fatalf("account %s: ledger %s; model %s", id, got, exp)
		}
	}
	for id, want := range m.jobs {
		j := s.Jobs[id]
		if j == nil {
			t.Fatalf("job %s missing", id)
		}
		got := fmt.Sprintf("%s cost %d attempt %d failures %d busy %d host %q cancel %v held %d charged %d",
			j.State, j.Cost, j.Attempt, j.Failures, j.BusyRefusals, j.Host(), j.CancelRequested, j.Reserved, j.Charged)
		exp := fmt.Sprintf("%s cost %d attempt %d failures %d busy %d host %q cancel %v held %d charged %d",
			want.state, want.terms.Cost, want.attempt, want.failures, want.busy, want.host, want.cancel, want.held, want.charged)
		if want.state == ledger.StateRejected {
			got, exp = string(j.State), string(want.state)
		}
		if got != exp {
			t.Fatalf("job %s: ledger %s; model %s", id, got, exp)
		}
	}
}

// The generators.

var (
	accountIDs = []string{"a", "b", "c", "ghost"}
	jobIDs     = []string{"j0", "j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8", "j9", "j10", "j11", "j12", "j13", "j14", "j15"}
	hosts      = []string{"h1", "h2", "h3"}
	opIDs      = []string{"op-0", "op-1", "op-2", "op-3", "op-4", "op-5"}
)

// rare draws true about one time in twenty. rapid favours the low end of a
// range, so the rare value sits at the high end.
func rare(rt *rapid.T, label string) bool {
	return rapid.IntRange(0, 19).Draw(rt, label) == 19
}

type logged struct {
	cmd ledger.Command
	seq uint64
	at  time.Time
}

func TestLedgerMatchesModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		l := ledgertest.NewLog(rt)
		m := newModel()
		var history []logged
		archivedAt := map[string]uint64{} // the last archive of each job id

		// existing draws a job id with a record, or any id when none exists.
		existing := func(rt *rapid.T, states ...ledger.JobState) string {
			var ids []string
			for _, id := range jobIDs {
				if j := m.jobs[id]; j != nil && (len(states) == 0 || slices.Contains(states, j.state)) {
					ids = append(ids, id)
				}
			}
			if rapid.IntRange(0, 9).Draw(rt, "any job") == 0 {
				return rapid.SampledFrom(jobIDs).Draw(rt, "job")
			}
			if len(ids) == 0 {
				rt.Skip("no job in a fitting state")
			}
			return rapid.SampledFrom(ids).Draw(rt, "job")
		}
		fresh := func(rt *rapid.T, cmd ledger.Command) {
			if rapid.IntRange(0, 3).Draw(rt, "same time") > 0 {
				l.Advance(time.Duration(rapid.Int64Range(0, int64(90*time.Minute)).Draw(rt, "advance")))
			}
			// The sequence a record carries is the ledger's bookkeeping, not
			// a rule under test: the model reads it to tell a decision that
			// saw an older record (drawn stale, or re-sent) from a current one.
			if c, ok := cmd.(ledger.Archive); ok {
				j := l.State.Jobs[c.Job]
				m.staleArchive = j != nil && j.Seq != c.Seq
			}
			want := m.apply(cmd, l.Now)
			res := l.Apply(cmd)
			history = append(history, logged{cmd, l.Seq, l.Now})
			// An archive, drawn or re-sent, moves the job out of the ledger.
			if c, ok := cmd.(ledger.Archive); ok && m.jobs[c.Job] == nil {
				if _, ok := l.State.Jobs[c.Job]; ok {
					rt.Fatalf("job %s is archived in the model but still in the ledger", c.Job)
				}
				archivedAt[c.Job] = l.Seq
			}
			if got := outcome(res); got != want {
				rt.Fatalf("%s %+v at seq %d: ledger says %s, model %s", cmd.Kind(), cmd, l.Seq, got, want)
			}
			if got := ledgertest.All[ledger.CancelOrder](res); !slices.Equal(got, m.cancels) {
				rt.Fatalf("%s %+v at seq %d: ledger sends cancel orders %+v, model %+v", cmd.Kind(), cmd, l.Seq, got, m.cancels)
			}
		}

		// Most runs start with two funded accounts; the rest start empty.
		if rapid.IntRange(0, 4).Draw(rt, "start empty") > 0 {
			for _, id := range accountIDs[:2] {
				fresh(rt, ledger.Admin{Account: id, ID: "setup", Op: ledger.OpCreate,
					Balance: ledger.Credits(rapid.Int64Range(0, 2000).Draw(rt, "setup balance"))})
			}
		}
		actions := map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				fresh(rt, ledger.Admin{Account: rapid.SampledFrom(accountIDs[:3]).Draw(rt, "account"),
					ID: rapid.SampledFrom(opIDs).Draw(rt, "op"), Op: ledger.OpCreate,
					Balance: ledger.Credits(rapid.Int64Range(0, 1000).Draw(rt, "balance"))})
			},
			"admin": func(rt *rapid.T) {
				c := ledger.Admin{Account: rapid.SampledFrom(accountIDs).Draw(rt, "account"), ID: rapid.SampledFrom(opIDs).Draw(rt, "op")}
				switch rapid.IntRange(0, 3).Draw(rt, "op kind") {
				case 0:
					c.Op, c.Amount = ledger.OpGrant, ledger.Credits(rapid.Int64Range(-500, 1000).Draw(rt, "amount"))
				case 1:
					c.Op = ledger.OpLimits
					c.Limits = ledger.Limits{MaxRunningJobs: rapid.IntRange(0, 3).Draw(rt, "max jobs"), MaxRunningGPUs: rapid.IntRange(0, 6).Draw(rt, "max gpus")}
				case 2:
					c.Op, c.RatePerHour, c.Cap = ledger.OpRefill, ledger.Credits(rapid.Int64Range(0, 500).Draw(rt, "rate")), ledger.Credits(rapid.Int64Range(1, 2000).Draw(rt, "cap"))
					if rare(rt, "zero cap") {
						c.Cap = 0
					}
				case 3:
					c.Op, c.Weight = ledger.OpWeight, rapid.IntRange(1, 5).Draw(rt, "weight")
					if rare(rt, "zero weight") {
						c.Weight = 0
					}
				}
				fresh(rt, c)
			},
			"submit": func(rt *rapid.T) {
				cmd := []string{"train"}
				if rare(rt, "empty command") {
					cmd = nil
				}
				id := rapid.SampledFrom(jobIDs).Draw(rt, "id")
				var unused []string
				for _, id := range jobIDs {
					if m.jobs[id] == nil {
						unused = append(unused, id)
					}
				}
				if len(unused) > 0 && rapid.IntRange(0, 2).Draw(rt, "new id") > 0 {
					id = rapid.SampledFrom(unused).Draw(rt, "unused id")
				}
				gpus, cost := rapid.IntRange(1, 4).Draw(rt, "gpus"), ledger.Credits(rapid.Int64Range(0, 400).Draw(rt, "cost"))
				if rare(rt, "zero gpus") {
					gpus = 0
				}
				if rare(rt, "negative cost") {
					cost = -cost - 1
				}
				metered := rapid.IntRange(0, 2).Draw(rt, "metered") == 2
				if metered {
					cost = 0
					if rare(rt, "metered with a cost") {
						cost = 5
					}
				}
				fresh(rt, ledger.Submit{
					Account:     rapid.SampledFrom(accountIDs).Draw(rt, "account"),
					ID:          id,
					Metered:     metered,
					Hold:        rapid.IntRange(0, 2).Draw(rt, "hold") == 2,
					Walltime:    time.Duration(rapid.IntRange(0, 120).Draw(rt, "walltime minutes")) * time.Minute,
					Priority:    rapid.IntRange(0, 2).Draw(rt, "priority"),
					GPUs:        gpus,
					Cost:        cost,
					Command:     cmd,
					MaxAttempts: rapid.IntRange(0, 3).Draw(rt, "max attempts"),
				})
			},
			"cancel": func(rt *rapid.T) {
				id, acct := existing(rt), rapid.SampledFrom(accountIDs).Draw(rt, "account")
				if j := m.jobs[id]; j != nil && rapid.IntRange(0, 3).Draw(rt, "own account") > 0 {
					acct = j.terms.Account
				}
				fresh(rt, ledger.Cancel{Account: acct, Job: id})
			},
			"dispatch": func(rt *rapid.T) {
				id := existing(rt, ledger.StatePending)
				attempt := 1
				if j := m.jobs[id]; j != nil {
					attempt = j.attempt + rapid.IntRange(0, 2).Draw(rt, "attempt delta")
				}
				fresh(rt, ledger.Dispatch{Job: id, Attempt: max(attempt, 1), Host: rapid.SampledFrom(hosts).Draw(rt, "host")})
			},
			"report": func(rt *rapid.T) {
				id := existing(rt, ledger.StateDispatched, ledger.StateRunning)
				r := ledger.Report{Job: id, Attempt: 1, Host: rapid.SampledFrom(hosts).Draw(rt, "host")}
				if j := m.jobs[id]; j != nil && rapid.IntRange(0, 3).Draw(rt, "right address") > 0 {
					r.Attempt, r.Host = max(j.attempt, 1), j.host
					if r.Host == "" {
						r.Host = "h1"
					}
				} else {
					r.Attempt = rapid.IntRange(1, 4).Draw(rt, "attempt")
				}
				typ := rapid.IntRange(0, 2).Draw(rt, "report type")
				if j := m.jobs[id]; j != nil && rapid.IntRange(0, 3).Draw(rt, "natural type") > 0 {
					switch j.state {
					case ledger.StateDispatched:
						typ = 0
					case ledger.StateRunning:
						typ = 1
					}
				}
				switch typ {
				case 0:
					r.Type = ledger.ReportStarted
					r.Model = rapid.SampledFrom([]string{"H100", "H200", "B200"}).Draw(rt, "model")
					n := 1
					if j := m.jobs[id]; j != nil {
						n = j.terms.GPUs
					}
					n += rapid.IntRange(-1, 1).Draw(rt, "device count skew") * rapid.IntRange(0, 1).Draw(rt, "skew")
					for i := range max(n, 1) {
						r.Devices = append(r.Devices, fmt.Sprintf("GPU-%d", i))
					}
				case 1:
					r.Type, r.ExitCode = ledger.ReportDone, rapid.SampledFrom([]int{0, 0, 1, 137}).Draw(rt, "exit code")
					r.Runtime = time.Duration(rapid.Int64Range(0, int64(3*time.Hour)).Draw(rt, "runtime"))
					if rare(rt, "infra") {
						r.Infra = "Xid 79"
					}
				case 2:
					r.Type, r.Reason = ledger.ReportRejected, "GPU busy"
					r.Busy = rapid.Bool().Draw(rt, "busy")
				}
				fresh(rt, r)
			},
			"lost": func(rt *rapid.T) {
				id := existing(rt, ledger.StateDispatched, ledger.StateRunning)
				attempt := 1
				if j := m.jobs[id]; j != nil {
					attempt = max(j.attempt-rapid.IntRange(0, 1).Draw(rt, "stale"), 1)
				}
				fresh(rt, ledger.Lost{Job: id, Attempt: attempt, Reason: "heartbeat expired"})
			},
			"pricing": func(rt *rapid.T) {
				per := map[string]ledger.Credits{}
				for _, m := range []string{"H100", "H200"} {
					if rapid.Bool().Draw(rt, "priced "+m) {
						per[m] = ledger.Credits(rapid.Int64Range(0, 400).Draw(rt, "price "+m))
					}
				}
				fresh(rt, ledger.SetPricing{ID: rapid.SampledFrom(opIDs).Draw(rt, "op"), PerGPUHour: per,
					Default:        ledger.Credits(rapid.Int64Range(0, 200).Draw(rt, "default price")),
					FailurePercent: rapid.IntRange(0, 100).Draw(rt, "failure percent")})
			},
			"admit": func(rt *rapid.T) {
				fresh(rt, ledger.Admit{Account: rapid.SampledFrom(accountIDs[:3]).Draw(rt, "account")})
			},
			"unplaceable": func(rt *rapid.T) {
				fresh(rt, ledger.Unplaceable{Job: existing(rt, ledger.StatePending), Message: "needs more GPUs than any host has"})
			},
			"archive": func(rt *rapid.T) {
				id := existing(rt, ledger.StateSucceeded, ledger.StateFailed, ledger.StateCancelled, ledger.StateRejected)
				c := ledger.Archive{Job: id, Seq: 1, Retention: time.Duration(rapid.IntRange(1, 180).Draw(rt, "retention minutes")) * time.Minute}
				if j := l.State.Jobs[id]; j != nil {
					c.Seq = j.Seq
					if rare(rt, "stale archive") && j.Seq > 1 {
						c.Seq = j.Seq - 1
					}
				}
				fresh(rt, c)
			},
			"invalid": func(rt *rapid.T) {
				fresh(rt, ledger.Invalid{Account: rapid.SampledFrom(accountIDs).Draw(rt, "account"), Reason: ledger.ReasonInvalid, Message: "not JSON"})
			},
			"resend": func(rt *rapid.T) {
				if len(history) == 0 {
					rt.Skip("nothing to resend")
				}
				fresh(rt, rapid.SampledFrom(history).Draw(rt, "resent").cmd)
			},
			"replay": func(rt *rapid.T) {
				if len(history) == 0 {
					rt.Skip("nothing to replay")
				}
				e := rapid.SampledFrom(history).Draw(rt, "replayed")
				if at, ok := archivedAt[jobOf(e.cmd)]; ok && at > e.seq {
					rt.Skip("the command names a job archived since")
				}
				if res := l.ApplyAt(e.cmd, e.seq, e.at); len(res.Changed) != 0 {
					rt.Fatalf("replay of %s at seq %d changed %v", e.cmd.Kind(), e.seq, res.Changed)
				}
			},
			"": func(rt *rapid.T) { m.compare(rt, l.State) },
		}
		// Weight the actions that move jobs along by listing them again.
		for name, n := range map[string]int{"submit": 2, "dispatch": 2, "report": 3, "replay": 1, "archive": 1} {
			for i := range n {
				actions[fmt.Sprintf("%s#%d", name, i)] = actions[name]
			}
		}
		rt.Repeat(actions)
	})
}

// jobOf returns the job a command names, if any.
func jobOf(cmd ledger.Command) string {
	switch c := cmd.(type) {
	case ledger.Submit:
		return c.ID
	case ledger.Cancel:
		return c.Job
	case ledger.Dispatch:
		return c.Job
	case ledger.Report:
		return c.Job
	case ledger.Lost:
		return c.Job
	case ledger.Unplaceable:
		return c.Job
	case ledger.Archive:
		return c.Job
	}
	return ""
}
