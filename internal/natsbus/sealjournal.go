package natsbus

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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
// that entries inserted there are reported. Legacy entries in the events
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
	whole := func(subject string) ([]ledger.StoredEntry, []string, error) {
		var bad []string
		es, k, err := readDropping(ctx, js, n, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}, &bad)
		j.Read += k
		return es, bad, err
	}
	owned := map[string]bool{}
	for _, id := range slices.Sorted(maps.Keys(s.Accounts)) {
		head := s.Accounts[id].Journal
		if head.N == 0 {
			continue
		}
		subject := n.Journal(id)
		owned[subject] = true
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}}
		if !head.SealedAt.IsZero() {
			start := head.SealedAt.Add(-margin)
			cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
			cfg.OptStartTime = &start
		}
		var bad []string
		es, k, err := readDropping(ctx, js, n, stream, cfg, &bad)
		j.Read += k
		if err != nil {
			return j, err
		}
		if why := ledger.CheckFromSeal(id, es, head, checkpoint); why != nil {
			j.Whole = append(j.Whole, fmt.Sprintf("account %s read whole: %s", id, strings.Split(why.Error(), "\n")[0]))
			if es, bad, err = whole(subject); err != nil {
				return j, err
			}
		}
		j.Chained = append(j.Chained, es...)
		j.Bad = append(j.Bad, bad...)
	}
	for _, subject := range slices.Sorted(maps.Keys(subjectCounts)) {
		if owned[subject] {
			continue
		}
		es, bad, err := whole(subject)
		if err != nil {
			return j, err
		}
		j.Chained = append(j.Chained, es...)
		j.Bad = append(j.Bad, bad...)
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
