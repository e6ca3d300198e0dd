// Tamper tests of the journal on a real embedded nats-server. The fold runs
// in-process over a few days of commands (so that it seals), its journal
// entries are published to GPUQ_JOURNAL as the scheduler publishes them,
// and then one entry is changed, deleted, reordered or inserted through the
// stream's own API (publish a copy, delete the original by sequence). The
// audit (Client.Journal then ledger.AuditJournal) must name the account, the
// position and the command, and say what was done. A cut of the journal up
// to a seal must still audit clean, and still catch tampering after it.
package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

type journalFixture struct {
	t     testing.TB
	ctx   context.Context
	js    jetstream.JetStream
	c     *client.Client // reads the journal, as gpuq audit does
	n     subjects.Names
	state *ledger.State
	seq   uint64
	async bool // publish without waiting for each ack (the benchmark's bulk load)
}

// newJournal folds three days of work for account vision (a job a few
// hours, each reserved and settled) and publishes every journal entry.
func newJournal(t *testing.T) *journalFixture {
	t.Helper()
	f := newJournalAt(t, 60*time.Second)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	f.apply(ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 100000}, at)
	for i := range 18 {
		at = at.Add(4 * time.Hour)
		job := fmt.Sprintf("j%d", i)
		f.apply(ledger.Submit{Account: "vision", ID: job, GPUs: 1, Cost: 10, Command: []string{"true"}}, at)
		f.apply(ledger.Cancel{Account: "vision", Job: job}, at.Add(time.Minute))
	}
	return f
}

// newJournalAt starts a server with gpuq's streams and an empty ledger;
// the fixture's calls must end within timeout.
func newJournalAt(t testing.TB, timeout time.Duration) *journalFixture {
	t.Helper()
	nc, js := natstest.Start(t).JetStream(t)
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	f := &journalFixture{t: t, ctx: ctx, js: js, c: c, n: subjects.Default, state: ledger.New()}
	if err := natsbus.Setup(ctx, js, f.n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *journalFixture) apply(c ledger.Command, at time.Time) {
	f.t.Helper()
	f.seq++
	res := f.state.Apply(c, f.seq, at)
	for i, e := range res.Effects {
		if _, ok := e.(ledger.Entry); !ok {
			continue
		}
		msg, err := wire.EncodeEffect(f.n, f.seq, at, i, e)
		if err != nil {
			f.t.Fatal(err)
		}
		f.publish(msg.Subject, msg.Data, msg.MsgID)
	}
}

func (f *journalFixture) publish(subject string, data []byte, id string) {
	f.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(subjects.MsgIDHeader, id)
	var err error
	if f.async {
		_, err = f.js.PublishMsgAsync(m)
	} else {
		_, err = f.js.PublishMsg(f.ctx, m)
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

// stored returns the journal's messages: stream sequence and entry.
func (f *journalFixture) stored() ([]uint64, []wire.JournalEntry) {
	f.t.Helper()
	j, err := f.c.Journal(f.ctx, time.Time{})
	if err != nil {
		f.t.Fatal(err)
	}
	var seqs []uint64
	var es []wire.JournalEntry
	for _, e := range j.Chained {
		seqs = append(seqs, e.Msg)
		es = append(es, wireEntry(e.Entry))
	}
	return seqs, es
}

func wireEntry(e ledger.Entry) wire.JournalEntry {
	return wire.JournalEntry{V: 1, Kind: e.Kind, Seq: e.Seq, Time: e.Time, Account: e.Account, Job: e.Job, OpID: e.OpID,
		Amount: e.Amount, Reservation: e.Reservation, Released: e.Released, Balance: e.Balance, Reserved: e.Reserved, Reason: e.Reason,
		N: e.N, Prev: e.Prev, Hash: e.Hash}
}

// put publishes e (re-hashed if rehash) as a new message.
func (f *journalFixture) put(e wire.JournalEntry, rehash bool, id string) {
	f.t.Helper()
	if rehash {
		e.Hash = ledger.EntryHash(e.Ledger())
	}
	data, err := json.Marshal(e)
	if err != nil {
		f.t.Fatal(err)
	}
	f.publish(f.n.Journal(e.Account), data, id)
}

func (f *journalFixture) remove(seq uint64) {
	f.t.Helper()
	s, err := f.js.Stream(f.ctx, f.n.JournalStream())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := s.DeleteMsg(f.ctx, seq); err != nil {
		f.t.Fatal(err)
	}
}

// audit returns the differences the audit finds.
func (f *journalFixture) audit() string {
	f.t.Helper()
	j, err := f.c.Journal(f.ctx, time.Time{})
	if err != nil {
		f.t.Fatal(err)
	}
	_, errs := ledger.AuditJournal(f.state, f.state.Seq, j.Chained, j.Legacy)
	errs = append(errs, errors.New(strings.Join(j.Bad, "\n")))
	return strings.TrimSpace(errors.Join(errs...).Error())
}

func TestJournalAuditNamesTampering(t *testing.T) {
	t.Parallel()
	const k = 10 // the position tampered with
	cases := []struct {
		name   string
		tamper func(f *journalFixture, seqs []uint64, es []wire.JournalEntry)
		want   []string
	}{
		{"clean", func(*journalFixture, []uint64, []wire.JournalEntry) {}, nil},
		{"changed", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			e := es[k-1]
			e.Amount, e.Balance = e.Amount+5, e.Balance+5 // and re-hashed, as a forger would
			f.put(e, true, "forged")
			f.remove(seqs[k-1])
		}, []string{fmt.Sprintf("account vision: entry %d (command", k), "was altered"}},
		{"changed, hash kept", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			e := es[k-1]
			e.Amount++
			f.put(e, false, "forged")
			f.remove(seqs[k-1])
		}, []string{fmt.Sprintf("account vision: entry %d (command", k), "does not match its own hash: altered"}},
		{"deleted", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			f.remove(seqs[k-1])
		}, []string{fmt.Sprintf("account vision: entry %d is missing, before entry %d (command", k, k+1), "removed"}},
		{"reordered", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			a, b := es[k-1], es[k]
			b.N, b.Prev = a.N, a.Prev
			b.Hash = ledger.EntryHash(b.Ledger())
			a.N, a.Prev = b.N+1, b.Hash
			f.remove(seqs[k-1])
			f.remove(seqs[k])
			f.put(b, false, "moved-b")
			f.put(a, true, "moved-a")
		}, []string{fmt.Sprintf("account vision: entry %d (command", k+1), "of a later command: reordered"}},
		{"inserted", func(f *journalFixture, seqs []uint64, es []wire.JournalEntry) {
			prev := es[k-1]
			e := wire.JournalEntry{V: 1, Kind: ledger.EntryGrant, Seq: prev.Seq, Time: prev.Time, Account: "vision", OpID: "forged",
				Amount: 500, Balance: prev.Balance + 500, Reserved: prev.Reserved, N: prev.N + 1, Prev: prev.Hash}
			f.put(e, true, "forged")
		}, []string{fmt.Sprintf("account vision: entry %d (command", k+1), fmt.Sprintf("claims position %d", k+1), "inserted"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newJournal(t)
			seqs, es := f.stored()
			if len(es) < k+2 {
				t.Fatalf("only %d entries", len(es))
			}
			c.tamper(f, seqs, es)
			got := f.audit()
			t.Logf("audit: %s", got)
			if c.want == nil && got != "" {
				t.Fatalf("audit of an untouched journal: %s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("audit says:\n%s\nwant it to say %q", got, w)
				}
			}
		})
	}
}

func TestJournalAuditStartsFromASeal(t *testing.T) {
	t.Parallel()
	f := newJournal(t)
	seqs, es := f.stored()
	seal := -1
	for i, e := range es {
		if e.Kind == ledger.EntrySeal {
			seal = i
		}
	}
	if seal < 0 || seal == len(es)-1 {
		t.Fatalf("the fold sealed no account before its last entry over three days: %v", es)
	}
	s, err := f.js.Stream(f.ctx, f.n.JournalStream())
	if err != nil {
		t.Fatal(err)
	}
	// Cut the journal up to (not including) the newest seal.
	if err := s.Purge(f.ctx, jetstream.WithPurgeSequence(seqs[seal])); err != nil {
		t.Fatal(err)
	}
	if after, _ := f.stored(); len(after) != len(es)-seal {
		t.Fatalf("after the cut %d entries are kept, want %d", len(after), len(es)-seal)
	}
	if got := f.audit(); got != "" {
		t.Fatalf("audit of a journal cut at a seal: %s", got)
	}
	// Tampering after the seal is still caught.
	e := es[seal+1] // a settle of a cancelled job: charge it one credit
	e.Amount, e.Released = e.Amount+1, e.Released-1
	f.put(e, true, "forged")
	f.remove(seqs[seal+1])
	if got := f.audit(); !strings.Contains(got, fmt.Sprintf("account vision: entry %d (command %d", e.N, e.Seq)) || !strings.Contains(got, "altered") {
		t.Errorf("audit after tampering past the seal: %s", got)
	}
	// A cut past the seal leaves none to start from: not auditable, and
	// the audit says so.
	if err := s.Purge(f.ctx, jetstream.WithPurgeSequence(seqs[seal]+1)); err != nil {
		t.Fatal(err)
	}
	if got := f.audit(); !strings.Contains(got, "no seal is kept at or after it") {
		t.Errorf("audit of a journal cut past its seal: %s", got)
	}
}
