// Tests of the journal's hash chain in the pure fold: every entry is
// chained and hashed, a replay of the log gives the same chain, an account
// an older version left without a chain opens it with a seal of what it
// held, and seals come every SealInterval of command time.
package ledger_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

func entriesOf(res ledger.Result) []ledger.StoredEntry {
	var out []ledger.StoredEntry
	for _, e := range res.Effects {
		if e, ok := e.(ledger.Entry); ok {
			out = append(out, ledger.StoredEntry{Entry: e})
		}
	}
	return out
}

func TestJournalChainsAndSeals(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	cmds := []ledger.Command{ledger.Admin{Account: "a", ID: "op-1", Op: ledger.OpCreate, Balance: 1000}}
	for i := range 10 {
		id := string(rune('a'+i)) + "-job"
		cmds = append(cmds, ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 5, Command: []string{"true"}},
			ledger.Cancel{Account: "a", Job: id})
	}
	fold := func() (*ledger.State, []ledger.StoredEntry) {
		s := ledger.New()
		var all []ledger.StoredEntry
		for i, c := range cmds {
			all = append(all, entriesOf(s.Apply(c, uint64(i+1), at.Add(time.Duration(i)*6*time.Hour)))...)
		}
		return s, all
	}
	s, all := fold()
	s2, all2 := fold()
	if s.Accounts["a"].Journal != s2.Accounts["a"].Journal || len(all) != len(all2) {
		t.Fatalf("two folds of one log: heads %+v and %+v", s.Accounts["a"].Journal, s2.Accounts["a"].Journal)
	}
	seals := 0
	for i, e := range all {
		if e.N != uint64(i+1) || e.Hash != ledger.EntryHash(e.Entry) || (i > 0 && e.Prev != all[i-1].Hash) {
			t.Errorf("entry %d: %+v is not chained to the one before", i, e.Entry)
		}
		if e.Kind == ledger.EntrySeal {
			seals++
		}
	}
	if seals != 5 { // 21 commands 6h apart over 5 days: a seal by the first command a day after the last
		t.Errorf("%d seals in five days, want 5", seals)
	}
	if _, errs := ledger.AuditJournal(s, s.Seq, all, nil); len(errs) > 0 {
		t.Errorf("audit of the fold's own journal: %v", errs)
	}
	// Replaying any command again changes nothing and emits nothing.
	for i, c := range cmds {
		if res := s.Apply(c, uint64(i+1), at); !res.Skipped || len(res.Effects) > 0 {
			t.Errorf("replay of command %d: %+v", i+1, res)
		}
	}
}

func TestJournalOpensOldAccountsWithASeal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s := ledger.New()
	s.Apply(ledger.Admin{Account: "a", ID: "op-1", Op: ledger.OpCreate, Balance: 1000}, 1, at)
	s.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 5, Command: []string{"true"}}, 2, at)
	// As an older version left it: no chain.
	s.Accounts["a"].Journal = ledger.JournalHead{}
	res := s.Apply(ledger.Cancel{Account: "a", Job: "j"}, 3, at.Add(time.Minute))
	es := entriesOf(res)
	if len(es) != 2 || es[0].Kind != ledger.EntrySeal || es[0].N != 1 || es[0].Balance != 1000 || es[0].Reserved != 5 ||
		es[1].Kind != ledger.EntrySettle || es[1].N != 2 || es[1].Prev != es[0].Hash {
		t.Fatalf("first entries of an old account: %+v", es)
	}
	// The seal carries the reservation made before it: the settle is covered.
	if _, errs := ledger.AuditJournal(s, s.Seq, es, nil); len(errs) > 0 {
		t.Errorf("audit from the opening seal: %v", errs)
	}
}

// TestAuditAnIDReusedOnAnotherAccount: an archived job's id is free again
// for any account. The audit posts one account's chain at a time, so it
// must tell b's settled j1 from a's new j1; keyed by id alone it saw a's
// reservation of j1 and then b's older one as j1 "reserved a second time".
func TestAuditAnIDReusedOnAnotherAccount(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	s := ledger.New()
	var all []ledger.StoredEntry
	seq := uint64(0)
	apply := func(c ledger.Command) ledger.Result {
		seq++
		at = at.Add(time.Hour)
		res := s.Apply(c, seq, at)
		all = append(all, entriesOf(res)...)
		return res
	}
	apply(ledger.Admin{Account: "a", ID: "op-a", Op: ledger.OpCreate, Balance: 100})
	apply(ledger.Admin{Account: "b", ID: "op-b", Op: ledger.OpCreate, Balance: 100})
	apply(ledger.Submit{Account: "b", ID: "j1", GPUs: 1, Cost: 10, Command: []string{"true"}})
	apply(ledger.Cancel{Account: "b", Job: "j1"})
	ended := s.Jobs["j1"]
	if ended == nil || !ended.State.Terminal() {
		t.Fatalf("b's j1: %+v", ended)
	}
	at = at.Add(8 * 24 * time.Hour)
	apply(ledger.Archive{Job: "j1", Seq: ended.Seq, Retention: 7 * 24 * time.Hour})
	if _, ok := s.Jobs["j1"]; ok {
		t.Fatal("j1 was not archived")
	}
	apply(ledger.Submit{Account: "a", ID: "j1", GPUs: 1, Cost: 20, Command: []string{"true"}})
	if j := s.Jobs["j1"]; j == nil || j.Account != "a" {
		t.Fatalf("a's j1: %+v", j)
	}
	if _, errs := ledger.AuditJournal(s, s.Seq, all, nil); len(errs) > 0 {
		t.Errorf("audit: %v", errs)
	}
}
