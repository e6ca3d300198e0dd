// Tests of the journal's own stream on a real embedded nats-server: a fresh
// setup keeps the journal with no age limit and refuses new entries rather
// than drop old ones; an installation laid out as before (journal subjects
// in the events stream, with entries in it) is migrated: the events stream
// gives up the subjects, the journal stream takes them, and the old entries
// stay readable where they are.
package natsbus_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/subjects"
)

func TestSetupKeepsTheJournal(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(ctx, t, js, n.JournalStream())
	if cfg.MaxAge != 0 || cfg.MaxBytes != -1 || cfg.MaxMsgs != -1 || cfg.Discard != jetstream.DiscardNew ||
		!slices.Equal(cfg.Subjects, []string{n.JournalAll()}) {
		t.Errorf("journal stream: max age %v, max bytes %d, max msgs %d, discard %v, subjects %v; want kept forever, discard new, %s",
			cfg.MaxAge, cfg.MaxBytes, cfg.MaxMsgs, cfg.Discard, cfg.Subjects, n.JournalAll())
	}
	if ev := streamConfig(ctx, t, js, n.EventsStream()); slices.Contains(ev.Subjects, n.JournalAll()) {
		t.Errorf("events stream still holds %s: %v", n.JournalAll(), ev.Subjects)
	}
	// An operator's limits are applied, and taken back when left out.
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{JournalMaxAge: 400 * 24 * time.Hour, JournalMaxBytes: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if cfg := streamConfig(ctx, t, js, n.JournalStream()); cfg.MaxAge != 400*24*time.Hour || cfg.MaxBytes != 1<<30 {
		t.Errorf("journal stream with limits: max age %v, max bytes %d", cfg.MaxAge, cfg.MaxBytes)
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	if cfg := streamConfig(ctx, t, js, n.JournalStream()); cfg.MaxAge != 0 || cfg.MaxBytes != -1 {
		t.Errorf("journal stream with limits left out: max age %v, max bytes %d", cfg.MaxAge, cfg.MaxBytes)
	}
}

func TestSetupMovesTheJournalOutOfTheEventsStream(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	// Today's layout: the journal's subjects in the events stream.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.EventsStream(),
		Subjects: []string{n.Prefix() + ".event.>", n.JournalAll()}, MaxAge: 30 * 24 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, n.Journal("vision"), []byte(`{"v":1,"kind":"grant"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, n.AccountEvent("vision"), []byte(`{"v":1,"type":"created"}`)); err != nil {
		t.Fatal(err)
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatalf("Setup over the old layout: %v", err)
	}
	if ev := streamConfig(ctx, t, js, n.EventsStream()); !slices.Equal(ev.Subjects, n.EventFilters()) {
		t.Errorf("events stream subjects %v, want %v", ev.Subjects, n.EventFilters())
	}
	ack, err := js.Publish(ctx, n.Journal("vision"), []byte(`{"v":1,"kind":"reserve"}`))
	if err != nil || ack.Stream != n.JournalStream() {
		t.Fatalf("a new journal entry: %+v, %v; want it in %s", ack, err, n.JournalStream())
	}
	// The old entry is still where it was, and a reader can still ask for
	// the journal's subjects there.
	cons, err := js.OrderedConsumer(ctx, n.EventsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{n.JournalAll()}})
	if err != nil {
		t.Fatalf("read the old journal entries: %v", err)
	}
	m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatalf("read the old journal entry: %v", err)
	}
	if string(m.Data()) != `{"v":1,"kind":"grant"}` {
		t.Errorf("old journal entry = %s", m.Data())
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Errorf("Setup again after the move: %v", err)
	}
}

func streamConfig(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}
