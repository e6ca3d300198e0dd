// Package ledgertest has helpers for tests that drive the ledger: a tiny
// reference queue and a log that applies commands in order and checks the
// ledger's invariants and books after every one.
//
// It is imported only by tests.
package ledgertest

import (
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// Next returns the pending job that should run next: the highest priority,
// then the oldest submission. It returns nil when nothing is pending. It
// scans every job, so it is only a reference for tests; the scheduler's queue
// is the real one.
func Next(s *ledger.State) *ledger.Job {
	var best *ledger.Job
	for _, j := range s.Jobs {
		if j.State != ledger.StatePending || j.Gated() {
			continue
		}
		if best == nil || j.Priority > best.Priority || j.Priority == best.Priority && j.SubmitSeq < best.SubmitSeq {
			best = j
		}
	}
	return best
}

// TB is the part of testing.TB (and of *rapid.T) a [Log] uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Log applies commands to a ledger at increasing sequences with a test clock,
// and after each one checks [ledger.State.CheckInvariants] and that the
// journal entries emitted so far sum to the ledger's balances.
type Log struct {
	t     TB
	State *ledger.State
	Books *ledger.Books
	Seq   uint64    // sequence of the last applied command
	Now   time.Time // timestamp given to the next command
}

// Epoch is the time a new [Log] starts at.
var Epoch = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// NewLog returns a log over an empty ledger.
func NewLog(t TB) *Log {
	return &Log{t: t, State: ledger.New(), Books: ledger.NewBooks(), Now: Epoch}
}

// Apply applies cmd at the next sequence and checks the ledger. It fails the
// test on a broken invariant or a journal that disagrees with the ledger.
func (l *Log) Apply(cmd ledger.Command) ledger.Result {
	l.t.Helper()
	l.Seq++
	return l.ApplyAt(cmd, l.Seq, l.Now)
}

// ApplyAt applies cmd at an explicit sequence and time (a replay), then
// checks the ledger as Apply does.
func (l *Log) ApplyAt(cmd ledger.Command, seq uint64, at time.Time) ledger.Result {
	l.t.Helper()
	res := l.State.Apply(cmd, seq, at)
	if err := l.State.CheckInvariants(); err != nil {
		l.t.Fatalf("after %s at seq %d: %v", cmd.Kind(), seq, err)
	}
	for _, e := range res.Effects {
		if entry, ok := e.(ledger.Entry); ok {
			if err := l.Books.Post(entry); err != nil {
				l.t.Fatalf("after %s at seq %d: %v", cmd.Kind(), seq, err)
			}
		}
	}
	if err := l.Books.Compare(l.State); err != nil {
		l.t.Fatalf("after %s at seq %d: %v", cmd.Kind(), seq, err)
	}
	return res
}

// Advance moves the clock forward by d.
func (l *Log) Advance(d time.Duration) { l.Now = l.Now.Add(d) }

// Account returns the account with id, failing the test if there is none.
func (l *Log) Account(id string) *ledger.Account {
	l.t.Helper()
	a := l.State.Accounts[id]
	if a == nil {
		l.t.Fatalf("no account %s", id)
	}
	return a
}

// Job returns the job with id, failing the test if there is none.
func (l *Log) Job(id string) *ledger.Job {
	l.t.Helper()
	j := l.State.Jobs[id]
	if j == nil {
		l.t.Fatalf("no job %s", id)
	}
	return j
}

// Create applies an admin command creating account id with balance.
func (l *Log) Create(id string, balance ledger.Credits) {
	l.t.Helper()
	res := l.Apply(ledger.Admin{Account: id, ID: "create-" + id, Op: ledger.OpCreate, Balance: balance})
	if ev, ok := First[ledger.AccountEvent](res); !ok || ev.Type != ledger.EventCreated {
		l.t.Fatalf("create %s: %+v", id, res.Effects)
	}
}

// Submit applies a submission of a one-GPU job with cost and priority.
func (l *Log) Submit(account, id string, cost ledger.Credits, priority int) ledger.Result {
	l.t.Helper()
	return l.Apply(ledger.Submit{Account: account, ID: id, GPUs: 1, Cost: cost, Priority: priority,
		Command: []string{"sh", "-c", "true"}})
}

// Start dispatches the job's next attempt to host and reports it started on
// devices named after the attempt, failing the test unless both take effect.
func (l *Log) Start(id, host string) {
	l.t.Helper()
	j := l.Job(id)
	attempt := j.Attempt + 1
	if ev, _ := First[ledger.JobEvent](l.Apply(ledger.Dispatch{Job: id, Attempt: attempt, Host: host})); ev.Type != ledger.EventDispatched {
		l.t.Fatalf("dispatch %s: %+v", id, ev)
	}
	devs := make([]string, j.GPUs)
	for i := range devs {
		devs[i] = "GPU-" + host + "-" + string(rune('a'+i%26))
	}
	if ev, _ := First[ledger.JobEvent](l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: host, Job: id, Attempt: attempt, Devices: devs})); ev.Type != ledger.EventStarted {
		l.t.Fatalf("start %s: %+v", id, ev)
	}
}

// Done reports the job's current attempt done on its host with exitCode.
func (l *Log) Done(id string, exitCode int) ledger.Result {
	l.t.Helper()
	j := l.Job(id)
	return l.Apply(ledger.Report{Type: ledger.ReportDone, Host: j.Host(), Job: id, Attempt: j.Attempt, ExitCode: exitCode, Runtime: time.Minute})
}

// First returns the first effect of type T in res.
func First[T ledger.Effect](res ledger.Result) (T, bool) {
	for _, e := range res.Effects {
		if v, ok := e.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

// All returns every effect of type T in res, in order.
func All[T ledger.Effect](res ledger.Result) []T {
	var out []T
	for _, e := range res.Effects {
		if v, ok := e.(T); ok {
			out = append(out, v)
		}
	}
	return out
}
