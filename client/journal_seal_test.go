package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// newLiveJournal folds, at the time of day as the server's clock has it
// (so that each command's time is before its entries are stored, as with
// a scheduler), account vision's creation and 999 grants: the last one
// brings vision's journal to SealEvery entries and the fold seals it (entry
// 1001); then 50 grants more; then account nlp's creation and two grants.
func newLiveJournal(t *testing.T) *journalFixture {
	t.Helper()
	f := newJournalAt(t, 60*time.Second)
	f.apply(ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 10}, time.Now())
	for i := range ledger.SealEvery - 1 + 50 {
		f.apply(ledger.Admin{Account: "vision", ID: fmt.Sprintf("g%d", i), Op: ledger.OpGrant, Amount: 1}, time.Now())
	}
	f.apply(ledger.Admin{Account: "nlp", ID: "op-1", Op: ledger.OpCreate, Balance: 10}, time.Now())
	for i := range 2 {
		f.apply(ledger.Admin{Account: "nlp", ID: fmt.Sprintf("g%d", i), Op: ledger.OpGrant, Amount: 1}, time.Now())
	}
	if h := f.state.Accounts["vision"].Journal; h.Sealed != ledger.SealEvery+1 || h.N != ledger.SealEvery+51 {
		t.Fatalf("vision's journal head %+v, want sealed at %d and %d entries", h, ledger.SealEvery+1, ledger.SealEvery+51)
	}
	return f
}

// fromSeals reads the journal from the seals on, with no margin (one
// clock stamps commands and entries here), and audits it.
func (f *journalFixture) fromSeals() (client.Journal, string) {
	f.t.Helper()
	j, err := f.c.JournalFromSeals(f.ctx, f.state, f.state.Seq, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	_, errs := ledger.AuditJournal(f.state, f.state.Seq, j.Chained, j.Legacy)
	errs = append(errs, errors.New(strings.Join(j.Bad, "\n")))
	return j, strings.TrimSpace(errors.Join(errs...).Error())
}

// of returns the stored sequences and entries of account's journal, in the
// order stored.
func (f *journalFixture) of(account string) ([]uint64, []wire.JournalEntry) {
	f.t.Helper()
	seqs, es := f.stored()
	var s []uint64
	var e []wire.JournalEntry
	for i := range es {
		if es[i].Account == account {
			s, e = append(s, seqs[i]), append(e, es[i])
		}
	}
	return s, e
}

// TestJournalFromSealsReadsOnlySinceTheSeal: of 1054 entries, the read
// from seals takes vision's from its seal's command on (the grant that
// filled it, the seal and 50 more: 52) and nlp's whole journal (3, never
// sealed), and audits clean; the whole read posts 1054 and agrees.
func TestJournalFromSealsReadsOnlySinceTheSeal(t *testing.T) {
	t.Parallel()
	f := newLiveJournal(t)
	j, got := f.fromSeals()
	if got != "" {
		t.Fatalf("audit from seals of an untouched journal: %s", got)
	}
	if j.Read != 55 || j.Stored != 1054 || len(j.Whole) != 0 {
		t.Errorf("read %d of %d entries, whole %q; want 55 of 1054, none whole", j.Read, j.Stored, j.Whole)
	}
	// No consumer is left behind: a stream takes 1,000 by default.
	s, err := f.js.Stream(f.ctx, f.n.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(f.ctx); err != nil || info.State.Consumers != 0 {
		t.Errorf("after the read from seals the journal has consumers: %+v, %v", info.State, err)
	}
	if got := f.audit(); got != "" {
		t.Errorf("whole audit of an untouched journal: %s", got)
	}
}

func TestJournalFromSealsFindsTampering(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// tamper changes vision's journal, given its stored sequences
		// and entries (entry n at index n-1).
		tamper func(f *journalFixture, seqs []uint64, es []wire.JournalEntry)
		// want: what the audit from seals says (nil: clean); whole: what
		// a whole audit says.
		want, whole []string
	}{
		{"changed after the seal", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			e := es[1019]
			e.Amount, e.Balance = e.Amount+5, e.Balance+5
			f.put(e, true, "forged")
			f.remove(seqs[1019])
		}, []string{"account vision: entry 1020 (command", "was altered", "account vision read whole"},
			[]string{"account vision: entry 1020 (command", "was altered"}},
		{"deleted after the seal", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			f.remove(seqs[1029])
		}, []string{"account vision: entry 1030 is missing, before entry 1031", "removed"},
			[]string{"account vision: entry 1030 is missing, before entry 1031", "removed"}},
		{"the seal deleted", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			f.remove(seqs[ledger.SealEvery])
		}, []string{"account vision: entry 1001 is missing", "account vision read whole: account vision: no seal read at entry 1001"},
			[]string{"account vision: entry 1001 is missing"}},
		{"a seal forged after the seal", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			prev := es[1039]
			e := wire.JournalEntry{V: 1, Kind: ledger.EntrySeal, Seq: prev.Seq, Time: prev.Time, Account: "vision",
				Balance: prev.Balance + 500, Reserved: prev.Reserved, N: prev.N + 1, Prev: prev.Hash}
			f.put(e, true, "forged")
		}, []string{"account vision: entry 1041 (command", "claims position 1041", "inserted"},
			[]string{"claims position 1041", "inserted"}},
		// A changed copy is stored now, after the seal: the read from
		// the seal's time takes it, and the account is read whole.
		{"changed before the seal", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			e := es[499]
			e.Amount++
			f.put(e, false, "forged")
			f.remove(seqs[499])
		}, []string{"account vision read whole", "account vision: entry 500 (command", "does not match its own hash: altered"},
			[]string{"account vision: entry 500 (command", "does not match its own hash: altered"}},
		// An entry removed wholly before the newest seal is not looked
		// at from the seal; the whole audit finds it.
		{"deleted before the seal", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			f.remove(seqs[499])
		}, nil, []string{"account vision: entry 500 is missing, before entry 501", "removed"}},
		{"cut before the seal", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			s, err := f.js.Stream(f.ctx, f.n.JournalStream())
			if err != nil {
				f.t.Fatal(err)
			}
			if err := s.Purge(f.ctx, jetstream.WithPurgeSequence(seqs[900])); err != nil {
				f.t.Fatal(err)
			}
		}, nil, nil},
		{"an account with no ledger record", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			f.put(wire.JournalEntry{V: 1, Kind: ledger.EntryGrant, Seq: 1, Time: es[0].Time, Account: "ghost", OpID: "forged", Amount: 500, Balance: 500, N: 1},
				true, "forged")
		}, []string{"account ghost has journal entries but no ledger record"}, []string{"account ghost has journal entries but no ledger record"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newLiveJournal(t)
			seqs, es := f.of("vision")
			c.tamper(f, seqs, es)
			j, got := f.fromSeals()
			t.Logf("audit from seals (%d of %d read): %s\n%s", j.Read, j.Stored, strings.Join(j.Whole, "\n"), got)
			got = strings.TrimSpace(strings.Join(j.Whole, "\n") + "\n" + got)
			if c.want == nil && got != "" {
				t.Errorf("audit from seals: %s", got)
			}
			if c.want == nil && j.Read > 60 {
				t.Errorf("audit from seals read %d entries", j.Read)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("audit from seals says:\n%s\nwant it to say %q", got, w)
				}
			}
			whole := f.audit()
			if c.whole == nil && whole != "" {
				t.Errorf("whole audit: %s", whole)
			}
			for _, w := range c.whole {
				if !strings.Contains(whole, w) {
					t.Errorf("whole audit says:\n%s\nwant it to say %q", whole, w)
				}
			}
		})
	}
}
