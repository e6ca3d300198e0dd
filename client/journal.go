package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Journal is the journal entries a read ([Client.Journal],
// [Client.JournalFromSeals]) found, as [ledger.AuditJournal] takes them.
type Journal struct {
	// Chained are the entries of the journal stream, in the order stored.
	Chained []ledger.StoredEntry
	// Legacy are the entries a version before the journal stream left in
	// the events stream, in the order stored. They carry no chain.
	Legacy []ledger.StoredEntry
	// Bad says why each message that is not a journal entry was left out.
	Bad []string
	// Read is how many messages were read from the journal stream, and
	// Stored how many it held (set by [Client.JournalFromSeals] only).
	// Whole names the accounts whose journal a read from the seals read
	// whole after all, with why.
	Read, Stored uint64
	Whole        []string
}

// SealMargin is how long before the command time of an account's newest
// seal a read from the seals starts reading the account's journal, and how
// long before a usage report's Since its read of the journal starts. A
// journal entry is published after its command is stored, so it is stored
// later; but it is stamped by the clock of the server that leads the
// journal stream, which may run behind the one that stamped the command.
const SealMargin = 10 * time.Minute

// Journal reads every journal entry kept in the journal stream stored at or
// after from (zero: all of them) and, where an older version left them, in
// the events stream (always whole). A message whose de-duplication id was
// already read (a re-sent effect) is read once; a message that is not an
// entry, or an entry on another account's subject, is left out and named in
// the result's Bad. With a zero from, the result is what
// [ledger.AuditJournal] checks in full ([Client.Audit] with Full). It needs
// an admin's rights; the error is for a read that failed.
func (c *Client) Journal(ctx context.Context, from time.Time) (Journal, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	var j Journal
	var err error
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.n.JournalAll()}}
	if !from.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	if j.Chained, j.Read, err = c.readEntries(ctx, c.n.JournalStream(), cfg, &j.Bad, false); err != nil {
		return j, err
	}
	legacy := jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.n.JournalAll()}}
	if j.Legacy, _, err = c.readEntries(ctx, c.n.EventsStream(), legacy, &j.Bad, false); err != nil {
		return j, err
	}
	return j, nil
}

// readEntries reads the journal entries an ordered consumer of stream made
// with cfg delivers, up to the last one stored when it was made, and how
// many messages it read. With drop, the consumer is one the server drops
// after a few seconds unused, and it is deleted once read (a stream takes
// at most 1,000 consumers by default, and an ordered consumer left alone
// lingers for minutes).
func (c *Client) readEntries(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig, bad *[]string, drop bool) ([]ledger.StoredEntry, uint64, error) {
	cfg.NamePrefix = ConsumerName()
	if drop {
		cfg.InactiveThreshold = 10 * time.Second
	}
	cons, err := c.js.OrderedConsumer(ctx, stream, cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the journal in %s: %w", stream, err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("read the journal in %s: %w", stream, err)
	}
	var out []ledger.StoredEntry
	var read uint64
	seen := map[string]bool{}
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 1000)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, read, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			var at uint64
			if md, err := m.Metadata(); err == nil {
				at = md.Sequence.Stream
			}
			id := m.Headers().Get(subjects.MsgIDHeader)
			if id != "" && seen[id] {
				continue
			}
			seen[id] = true
			e, err := wire.DecodeJournalEntry(m.Data())
			if err != nil {
				*bad = append(*bad, fmt.Sprintf("%s message %d (id %q): %v", stream, at, id, err))
				continue
			}
			if m.Subject() != c.n.Journal(e.Account) {
				*bad = append(*bad, fmt.Sprintf("%s message %d (id %q): an entry of account %s on %s", stream, at, id, e.Account, m.Subject()))
				continue
			}
			out = append(out, ledger.StoredEntry{Entry: e.Ledger(), Msg: at})
		}
		read += uint64(got)
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, read, err
		}
		if got == 0 {
			return nil, read, fmt.Errorf("the journal in %s stopped with %d entries unread", stream, remaining)
		}
		remaining -= uint64(got)
	}
	if drop {
		// An ordered consumer is made again, under a new name, if its
		// messages come out of order: delete the one it ended as.
		if name := cons.CachedInfo().Name; name != "" {
			if err := c.js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, read, fmt.Errorf("delete consumer %s of %s once read: %w", name, stream, err)
			}
		}
	}
	return out, read, nil
}

// JournalFromSeals reads the journal as [Client.Journal] does, but of each
// account of s (the ledger as of command checkpoint, as [Client.Snapshot]
// reads it) with a journal chain only from about its newest seal on: one
// ordered consumer per account, filtered to its subject and started at the
// time of the seal's command less margin (the server finds the first
// message at or after a time without reading those before). Margin is
// [SealMargin] where the journal stream and the command stream are stamped
// by different servers' clocks, and 0 (a negative margin counts as 0) where
// one clock stamps both. It takes time in proportion to the journal since
// the seals, not to the whole stream; the result's Stored is how many
// messages the journal stream holds.
//
// What is read of an account must pass [ledger.CheckFromSeal]: it reaches
// back to the seal the ledger's journal head names, and the chain verifies
// from there to the head. Else the account's journal is read again from
// the stream's start, and Whole says so and why, so that tampering with
// what is read is reported as a whole read reports it. Tampering wholly
// before an account's newest seal is not looked at; a full read checks it.
//
// A journal subject of the stream that no chained account of s owns (an
// account with no ledger record, or one with no chain) is read whole, so
// that entries inserted there are reported. Reads run a few at a time.
// Legacy entries in the events stream, kept no longer than events, are read
// whole. Each consumer is deleted once read, which under deploy/ needs the
// admin's $JS.API.CONSUMER.DELETE.GPUQ_JOURNAL.*.
func (c *Client) JournalFromSeals(ctx context.Context, s *ledger.State, checkpoint uint64, margin time.Duration) (Journal, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	margin = max(margin, 0)
	var j Journal
	stream := c.n.JournalStream()
	subjectCounts := map[string]uint64{}
	str, err := c.js.Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return j, fmt.Errorf("read the journal in %s: %w", stream, err)
	default:
		info, err := str.Info(ctx, jetstream.WithSubjectFilter(c.n.JournalAll()))
		if err != nil {
			return j, fmt.Errorf("read the journal in %s: %w", stream, err)
		}
		j.Stored = info.State.Msgs
		subjectCounts = info.State.Subjects
	}
	var reads []accountRead
	owned := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(s.Accounts)) {
		if head := s.Accounts[id].Journal; head.N > 0 {
			reads = append(reads, accountRead{account: id, subject: c.n.Journal(id), head: head, fromSeal: true})
			owned[c.n.Journal(id)] = true
		}
	}
	for _, subject := range slices.Sorted(maps.Keys(subjectCounts)) {
		if !owned[subject] {
			reads = append(reads, accountRead{subject: subject})
		}
	}
	// A few at a time: each costs round trips more than messages.
	var wg sync.WaitGroup
	sem := make(chan struct{}, parallelReads)
	for i := range reads {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			reads[i].run(ctx, c, stream, checkpoint, margin)
		}()
	}
	wg.Wait()
	for _, r := range reads {
		j.Read += r.read
		if r.err != nil {
			return j, r.err
		}
		if r.whole != "" {
			j.Whole = append(j.Whole, r.whole)
		}
		j.Chained = append(j.Chained, r.entries...)
		j.Bad = append(j.Bad, r.bad...)
	}
	legacy := jetstream.OrderedConsumerConfig{FilterSubjects: []string{c.n.JournalAll()}}
	if j.Legacy, _, err = c.readEntries(ctx, c.n.EventsStream(), legacy, &j.Bad, false); err != nil {
		return j, err
	}
	return j, nil
}

// parallelReads is how many journal reads [Client.JournalFromSeals] keeps in
// flight. (One consumer filtering many subjects is no cheaper: the server
// checks its filters against each other and the stream's subject tree.)
const parallelReads = 8

// accountRead is one read of [Client.JournalFromSeals]: of a chained
// account's subject from its newest seal (fromSeal), else of a subject
// whole.
type accountRead struct {
	account  string
	subject  string
	head     ledger.JournalHead
	fromSeal bool

	entries []ledger.StoredEntry
	bad     []string
	read    uint64
	whole   string // why a read from the seal was done again whole
	err     error
}

func (r *accountRead) run(ctx context.Context, c *Client, stream string, checkpoint uint64, margin time.Duration) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.subject}}
	if r.fromSeal && !r.head.SealedAt.IsZero() {
		start := r.head.SealedAt.Add(-margin)
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &start
	}
	var k uint64
	r.entries, k, r.err = c.readEntries(ctx, stream, cfg, &r.bad, true)
	r.read += k
	if r.err != nil || !r.fromSeal {
		return
	}
	why := ledger.CheckFromSeal(r.account, r.entries, r.head, checkpoint)
	if why == nil {
		return
	}
	r.whole = fmt.Sprintf("account %s read whole: %s", r.account, strings.Split(why.Error(), "\n")[0])
	r.bad = nil
	r.entries, k, r.err = c.readEntries(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.subject}}, &r.bad, true)
	r.read += k
}
