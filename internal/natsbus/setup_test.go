// Tests of stream and bucket setup against a real embedded nats-server:
// setup is idempotent, every stream covers exactly its filters, changeable
// settings are brought back, and a setting that cannot change fails with a
// message that says what to do.
package natsbus_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/subjects"
)

func TestSetupIsIdempotent(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	for range 2 {
		if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
			t.Fatalf("Setup: %v", err)
		}
	}
	for _, want := range n.Streams() {
		s, err := js.Stream(ctx, want.Name)
		if err != nil {
			t.Fatalf("stream %s: %v", want.Name, err)
		}
		cfg := s.CachedInfo().Config
		if strings.Join(cfg.Subjects, ",") != strings.Join(want.Subjects, ",") || cfg.Storage != jetstream.FileStorage || cfg.Duplicates != 2*time.Minute {
			t.Errorf("%s: subjects %v storage %v duplicates %v", want.Name, cfg.Subjects, cfg.Storage, cfg.Duplicates)
		}
	}
	s, err := js.Stream(ctx, n.DispatchStream())
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedInfo().Config.Retention != jetstream.WorkQueuePolicy {
		t.Error("dispatch stream is not a work queue")
	}
	kv, err := js.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.History() != 5 || st.LimitMarkerTTL() != natsbus.LeaseMarkerTTL {
		t.Errorf("ledger bucket: history %d, marker ttl %v", st.History(), st.LimitMarkerTTL())
	}
}

func TestSetupRestoresChangeableSettings(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, n.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxAge = time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{EventsMaxAge: 48 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	s, err = js.Stream(ctx, n.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().Config.MaxAge; got != 48*time.Hour {
		t.Errorf("events max age = %v, want 48h", got)
	}
}

func TestSetupRefusesImmutableMismatch(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: n.CmdStream(), Subjects: []string{n.CmdFilter()}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{})
	if err == nil || !strings.Contains(err.Error(), "GPUQ_CMD exists with Memory storage but gpuq needs File storage") ||
		!strings.Contains(err.Error(), "another subject prefix") {
		t.Errorf("Setup over a memory stream = %v", err)
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 2}); err == nil || !strings.Contains(err.Error(), "must be 1 or 3") {
		t.Errorf("Setup with 2 replicas = %v", err)
	}
}
