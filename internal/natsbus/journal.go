package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Journal is every journal entry a server keeps, as [ledger.AuditJournal]
// takes them.
type Journal struct {
	// Chained are the entries of the journal stream, in the order stored.
	Chained []ledger.StoredEntry
	// Legacy are the entries a version before the journal stream left in
	// the events stream, in the order stored. They carry no chain.
	Legacy []ledger.StoredEntry
	// Bad says why each message that is not a journal entry was left out.
	Bad []string
	// Read is how many messages were read from the journal stream, and
	// Stored how many it held (0 if not asked: [ReadJournal] reads them
	// all). Whole names the accounts whose journal [ReadJournalFromSeals]
	// read whole, with why.
	Read, Stored uint64
	Whole        []string
}

// ReadJournal reads every journal entry kept in the journal stream and,
// where an older version left them, in the events stream. A message whose
// de-duplication id was already read (a re-sent effect) is read once.
func ReadJournal(ctx context.Context, js jetstream.JetStream, n subjects.Names) (Journal, error) {
	var j Journal
	var err error
	if j.Chained, j.Read, err = readWith(ctx, js, n, n.JournalStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.JournalAll()}}, &j.Bad, nil); err != nil {
		return j, err
	}
	if j.Legacy, err = readEntries(ctx, js, n, n.EventsStream(), &j.Bad); err != nil {
		return j, err
	}
	return j, nil
}

func readEntries(ctx context.Context, js jetstream.JetStream, n subjects.Names, stream string, bad *[]string) ([]ledger.StoredEntry, error) {
	out, _, err := readWith(ctx, js, n, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.JournalAll()}}, bad, nil)
	return out, err
}

// readWith reads the journal entries an ordered consumer of stream made
// with cfg delivers, up to the last one stored when it was made, and how
// many messages it read. Unless name is nil it is set to the consumer's
// name on the server as it ends (an ordered consumer is made again, under
// a new name, if its messages come out of order).
func readWith(ctx context.Context, js jetstream.JetStream, n subjects.Names, stream string, cfg jetstream.OrderedConsumerConfig, bad *[]string, name *string) ([]ledger.StoredEntry, uint64, error) {
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
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
			e, err := wire.DecodeEntry(m.Data())
			if err != nil {
				*bad = append(*bad, fmt.Sprintf("%s message %d (id %q): %v", stream, at, id, err))
				continue
			}
			if m.Subject() != n.Journal(e.Account) {
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
	if name != nil {
		*name = cons.CachedInfo().Name
	}
	return out, read, nil
}
