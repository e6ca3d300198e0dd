package natsbus

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
)

// SealMargin is the margin gpuq audit gives [ReadJournalFromSeals]: how
// long before the command time of an account's newest seal it starts
// reading the account's journal. The
// seal is published after its command is stored, so it is stored later;
// but it is stamped by the clock of the server that leads the journal
// stream, which may run behind the one that stamped the command. A read
// that still misses the seal is done again from the start (see there).
const SealMargin = 10 * time.Minute

// ReadJournalFromSeals reads the journal as [ReadJournal] does, but of each
// account of s (the ledger as of command checkpoint) with a journal chain
// only from about its newest seal on: one ordered consumer per account,
// filtered to its subject and started at the time of the seal's command
// less margin ([SealMargin]; 0 where the journal stream and the command
// stream are stamped by one clock) (the server finds the first message at or after a
// time without reading those before). It takes time in proportion to the
// journal since the seals, not to the whole stream.
//
// What is read of an account must pass [ledger.CheckFromSeal]: it reaches
// back to the seal the ledger's journal head names, and the chain verifies
// from there to the head. Else the account's journal is read again from
// the stream's start, and Whole says so and why, so that tampering with
// what is read is reported as a whole read reports it. Tampering wholly
// before an account's newest seal is not looked at; [ReadJournal] is the
// read that checks it.
//
// Each consumer is deleted once read (a stream takes at most 1,000 by
// default, and an ordered consumer left alone lingers for minutes), which
// under deploy/ needs the admin's $JS.API.CONSUMER.DELETE.GPUQ_JOURNAL.*.
//
// A journal subject of the stream that no chained account of s owns (an
// account with no ledger record, or one with no chain) is read whole, so
// that entries inserted there are reported. Reads run a few at a time. Legacy entries in the events
// stream, kept no longer than events, are read whole.
func ReadJournalFromSeals(ctx context.Context, js jetstream.JetStream, n subjects.Names, s *ledger.State, checkpoint uint64, margin time.Duration) (Journal, error) {
	var j Journal
	stream := n.JournalStream()
	subjectCounts := map[string]uint64{}
	str, err := js.Stream(ctx, stream)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return j, fmt.Errorf("read the journal in %s: %w", stream, err)
	default:
		info, err := str.Info(ctx, jetstream.WithSubjectFilter(n.JournalAll()))
		if err != nil {
			return j, fmt.Errorf("read the journal in %s: %w", stream, err)
		}
		j.Stored = info.State.Msgs
		subjectCounts = info.State.Subjects
	}
	// One read per chained account of s (from its seal), then one per
	// subject that no chained account owns (whole).
	var reads []accountRead
	owned := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(s.Accounts)) {
		if head := s.Accounts[id].Journal; head.N > 0 {
			reads = append(reads, accountRead{account: id, subjects: []string{n.Journal(id)}, head: head, fromSeal: true})
			owned[n.Journal(id)] = true
		}
	}
	for _, subject := range slices.Sorted(maps.Keys(subjectCounts)) {
		if !owned[subject] {
			reads = append(reads, accountRead{subjects: []string{subject}})
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
			reads[i].run(ctx, js, n, stream, checkpoint, margin)
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
	if j.Legacy, err = readEntries(ctx, js, n, n.EventsStream(), &j.Bad); err != nil {
		return j, err
	}
	return j, nil
}

// readDropping reads as [readWith] does with an ordered consumer that the
// server drops after a few seconds unused, and deletes it once read.
func readDropping(ctx context.Context, js jetstream.JetStream, n subjects.Names, stream string, cfg jetstream.OrderedConsumerConfig, bad *[]string) ([]ledger.StoredEntry, uint64, error) {
	cfg.InactiveThreshold = 10 * time.Second
	var name string
	es, read, err := readWith(ctx, js, n, stream, cfg, bad, &name)
	if err != nil {
		return nil, read, err
	}
	if name != "" {
		if err := js.DeleteConsumer(ctx, stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, read, fmt.Errorf("delete consumer %s of %s once read: %w", name, stream, err)
		}
	}
	return es, read, nil
}

// parallelReads is how many journal reads [ReadJournalFromSeals] keeps in
// flight. (One consumer filtering many subjects is no cheaper: the server
// checks its filters against each other and the stream's subject tree.)
const parallelReads = 8

// accountRead is one read of [ReadJournalFromSeals]: of a chained
// account's subject from its newest seal (fromSeal), else of a subject
// whole.
type accountRead struct {
	account  string
	subjects []string
	head     ledger.JournalHead
	fromSeal bool

	entries []ledger.StoredEntry
	bad     []string
	read    uint64
	whole   string // why a read from the seal was done again whole
	err     error
}

func (r *accountRead) run(ctx context.Context, js jetstream.JetStream, n subjects.Names, stream string, checkpoint uint64, margin time.Duration) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: r.subjects}
	if r.fromSeal && !r.head.SealedAt.IsZero() {
		start := r.head.SealedAt.Add(-margin)
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &start
	}
	var k uint64
	r.entries, k, r.err = readDropping(ctx, js, n, stream, cfg, &r.bad)
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
	r.entries, k, r.err = readDropping(ctx, js, n, stream, jetstream.OrderedConsumerConfig{FilterSubjects: r.subjects}, &r.bad)
	r.read += k
}
