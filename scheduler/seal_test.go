package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

// TestQuietAccountsStayAuditable runs a scheduler core for twelve days on a
// fake clock over two accounts: one runs a job every hour, the other is
// created, granted credits once and then left alone. The journal is kept
// for three days only (--journal-max-age 72h): every hour, entries older
// than that are dropped, and the audit runs on what is left, as gpuq audit
// would. The quiet account journals nothing of its own after day 0, so only
// the core's seal decisions keep a seal of it in the journal; without them
// the audit would find its chain cut with no seal to start from.
func TestQuietAccountsStayAuditable(t *testing.T) {
	l := ledgertest.NewLog(t)
	core := scheduler.NewCore(scheduler.CoreConfig{JobRetention: 24 * time.Hour})
	host := wire.Heartbeat{Host: "h1"}
	for i := range 8 {
		host.Devices = append(host.Devices, wire.Device{UUID: fmt.Sprintf("GPU-h1-%d", i), Healthy: true})
	}
	var journal []ledger.StoredEntry
	keep := func(res ledger.Result) {
		for _, e := range res.Effects {
			if e, ok := e.(ledger.Entry); ok {
				journal = append(journal, ledger.StoredEntry{Entry: e, Msg: uint64(len(journal) + 1)})
			}
		}
	}
	for _, c := range []ledger.Command{
		ledger.Admin{Account: "busy", ID: "create-busy", Op: ledger.OpCreate, Balance: 1_000_000},
		ledger.Admin{Account: "quiet", ID: "create-quiet", Op: ledger.OpCreate, Balance: 500},
		ledger.Admin{Account: "quiet", ID: "grant-1", Op: ledger.OpGrant, Amount: 250},
	} {
		keep(l.Apply(c))
	}
	apply := func(c ledger.Command) {
		res := l.Apply(c)
		core.Observe(l.State, c, res)
		keep(res)
	}
	const maxAge = 72 * time.Hour
	seals := map[string]int{}
	for hour := range 12 * 24 {
		core.SetHost(host, l.Now)
		id := fmt.Sprintf("job-%04d", hour)
		apply(ledger.Submit{Account: "busy", ID: id, GPUs: 1, Cost: 3, Command: []string{"true"}})
		for range 3 {
			for _, c := range core.Decide(l.State, l.Now) {
				if s, ok := c.(ledger.Seal); ok {
					seals[s.Account]++
				}
				apply(c)
			}
		}
		if j := l.State.Jobs[id]; j != nil && j.State == ledger.StateDispatched {
			apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: id, Attempt: 1, Devices: []string{"GPU-h1-0"}})
			apply(ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: id, Attempt: 1, Runtime: time.Minute})
		}
		l.Advance(time.Hour)
		cut := 0
		for cut < len(journal) && l.Now.Sub(journal[cut].Time) > maxAge {
			cut++
		}
		journal = journal[cut:]
		if _, errs := ledger.AuditJournal(l.State, l.Seq, journal, nil); len(errs) > 0 {
			t.Fatalf("hour %d: the audit of the %d entries kept: %v", hour, len(journal), errs)
		}
	}
	// About one seal decision a day for the quiet account; the busy one is
	// sealed by its own commands (a seal every 1,000 entries or 24 hours).
	if seals["quiet"] < 10 || seals["quiet"] > 13 {
		t.Errorf("%d seal decisions for the quiet account in 12 days, want about one a day", seals["quiet"])
	}
	if q := l.State.Accounts["quiet"]; q.Balance != 750 || q.Journal.Sealed == 0 || l.Now.Sub(q.Journal.SealedAt) > 25*time.Hour {
		t.Errorf("quiet account %+v: want its 750 credits and a seal less than a day old", q)
	}
}

// The fold re-checks a seal decision: an account sealed since, one sealed
// less than a day ago and an unknown one change nothing and say why; a due
// one gets a seal stating its balance, once.
func TestSealDecisionIsChecked(t *testing.T) {
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	a := l.State.Accounts["a"]
	early := l.Apply(ledger.Seal{Account: "a", After: a.Journal.Sealed})
	if ev := accountEvent(early); ev == nil || ev.Type != ledger.EventIgnored || ev.Reason != ledger.ReasonNotDue {
		t.Errorf("a seal decision an hour after creation: %+v, want ignored, not due", early.Effects)
	}
	l.Advance(25 * time.Hour)
	stale := l.Apply(ledger.Seal{Account: "a", After: a.Journal.Sealed + 7})
	if ev := accountEvent(stale); ev == nil || ev.Type != ledger.EventIgnored || ev.Reason != ledger.ReasonNotDue {
		t.Errorf("a seal decision about another seal: %+v, want ignored, not due", stale.Effects)
	}
	if unknown := l.Apply(ledger.Seal{Account: "nobody"}); len(unknown.Effects) != 1 {
		t.Errorf("a seal decision for an unknown account: %+v", unknown.Effects)
	} else if ev, ok := unknown.Effects[0].(ledger.InvalidEvent); !ok || ev.Reason != ledger.ReasonUnknownAccount {
		t.Errorf("a seal decision for an unknown account: %+v, want invalid, unknown_account", unknown.Effects)
	}
	n := a.Journal.N
	d := ledger.Seal{Account: "a", After: a.Journal.Sealed}
	due := l.Apply(d)
	var seal *ledger.Entry
	for _, e := range due.Effects {
		if e, ok := e.(ledger.Entry); ok && e.Kind == ledger.EntrySeal {
			seal = &e
		}
	}
	if seal == nil || seal.Balance != 100 || seal.N != n+1 || a.Journal.Sealed != n+1 {
		t.Fatalf("a due seal decision: %+v, journal %+v; want a seal of 100 credits at %d", due.Effects, a.Journal, n+1)
	}
	if again := l.Apply(d); accountEvent(again) == nil || a.Journal.N != n+1 {
		t.Errorf("the same decision again: %+v, journal %+v; want it ignored", again.Effects, a.Journal)
	}
}

func accountEvent(res ledger.Result) *ledger.AccountEvent {
	for _, e := range res.Effects {
		if e, ok := e.(ledger.AccountEvent); ok {
			return &e
		}
	}
	return nil
}
