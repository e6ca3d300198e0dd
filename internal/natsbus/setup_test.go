// Tests of stream and bucket setup against a real embedded nats-server and
// a real 3-node cluster: setup is idempotent, every stream covers exactly
// its filters, changeable settings are brought back, a setting that cannot
// change fails with a message that says what to do, and replication is
// adopted or raised but never lowered.
package natsbus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/scheduler"
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
	st := ledgerStatus(t, js, n)
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

// TestSetupRefusesAShortLedgerHistory: a flush can leave a version of a
// record past the checkpoint for each batch in flight, so a ledger bucket
// keeping fewer than scheduler.MinLedgerHistory could not be rewound after
// a crash; Setup says so before creating it, and creates one keeping that
// many.
func TestSetupRefusesAShortLedgerHistory(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{LedgerHistory: scheduler.MinLedgerHistory - 1})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("LedgerHistory %d is too short", scheduler.MinLedgerHistory-1)) ||
		!strings.Contains(err.Error(), fmt.Sprintf("keep at least %d", scheduler.MinLedgerHistory)) {
		t.Errorf("Setup with a ledger history of %d = %v, want it refused", scheduler.MinLedgerHistory-1, err)
	}
	if _, err := js.KeyValue(ctx, n.LedgerBucket()); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("after the refusal, the ledger bucket: %v, want none", err)
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{LedgerHistory: scheduler.MinLedgerHistory}); err != nil {
		t.Fatal(err)
	}
	if st := ledgerStatus(t, js, n); st.History() != scheduler.MinLedgerHistory {
		t.Errorf("ledger bucket history = %d, want %d", st.History(), scheduler.MinLedgerHistory)
	}
}

// ledgerStatus returns the status of n's ledger bucket.
func ledgerStatus(t *testing.T, js jetstream.JetStream, n subjects.Names) jetstream.KeyValueStatus {
	t.Helper()
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// replication returns the replicas of every stream and bucket, by name.
func replication(t *testing.T, js jetstream.JetStream, n subjects.Names) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, s := range n.Streams() {
		got[s.Name] = streamReplicas(t, js, s.Name)
	}
	for _, b := range []string{n.LedgerBucket(), n.HostsBucket(), n.FactsBucket()} {
		got[b] = streamReplicas(t, js, "KV_"+b)
	}
	return got
}

func streamReplicas(t *testing.T, js jetstream.JetStream, name string) int {
	t.Helper()
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config.Replicas
}

// wantReplication fails unless every stream and bucket has r replicas.
func wantReplication(t *testing.T, js jetstream.JetStream, n subjects.Names, r int, when string) {
	t.Helper()
	got := replication(t, js, n)
	if want := len(n.Streams()) + 3; len(got) != want {
		t.Fatalf("%s: %d streams and buckets, want %d: %v", when, len(got), want, got)
	}
	for name, have := range got {
		if have != r {
			t.Errorf("%s: %s has %d replicas, want %d", when, name, have, r)
		}
	}
}

// setupLogger logs to the test's output and to buf.
func setupLogger(t *testing.T, buf *bytes.Buffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), buf), nil))
}

func TestSetupNeverLowersReplication(t *testing.T) {
	t.Parallel()
	_, js := natstest.StartCluster(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	var logs bytes.Buffer
	log := setupLogger(t, &logs)
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 3, Logger: log}); err != nil {
		t.Fatalf("Setup with 3 replicas: %v", err)
	}
	wantReplication(t, js, n, 3, "created with 3")

	// The next scheduler, started without --replicas, adopts 3.
	logs.Reset()
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Logger: log}); err != nil {
		t.Fatalf("Setup adopting: %v", err)
	}
	wantReplication(t, js, n, 3, "after Setup with Replicas 0")
	if out := logs.String(); !strings.Contains(out, "replicas=3 chosen=adopted") ||
		!strings.Contains(out, "streams=GPUQ_CMD,GPUQ_DISPATCH,GPUQ_EVENTS,GPUQ_JOURNAL,GPUQ_LOGS") || !strings.Contains(out, "buckets=gpuq_ledger,gpuq_hosts") {
		t.Errorf("Setup adopting logged:\n%s", out)
	}

	// An explicit 1 is refused, saying what it found, and lowers nothing.
	err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 1, Logger: log})
	var re *natsbus.ReplicasError
	if !errors.As(err, &re) || re.Kind != "stream" || re.Name != n.CmdStream() || re.Have != 3 || re.Want != 1 {
		t.Fatalf("Setup with 1 over 3 = %v, want a ReplicasError for stream %s", err, n.CmdStream())
	}
	if msg := err.Error(); !strings.Contains(msg, "stream GPUQ_CMD has 3 replicas; Replicas 1 would lower it") ||
		!strings.Contains(msg, "leave Replicas at 0 to keep 3") {
		t.Errorf("refusal = %q", msg)
	}
	if natsbus.Transient(err) {
		t.Error("the refusal counts as transient; a daemon would retry it forever")
	}
	wantReplication(t, js, n, 3, "after the refused Setup with 1")
}

func TestSetupRaisesReplicationToOneFactor(t *testing.T) {
	t.Parallel()
	_, js := natstest.StartCluster(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	var logs bytes.Buffer
	log := setupLogger(t, &logs)
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Logger: log}); err != nil {
		t.Fatalf("Setup on a fresh cluster: %v", err)
	}
	wantReplication(t, js, n, 1, "a fresh setup with Replicas 0")
	if !strings.Contains(logs.String(), "replicas=1 chosen=default") {
		t.Errorf("fresh Setup logged:\n%s", logs.String())
	}

	logs.Reset()
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 3, Logger: log}); err != nil {
		t.Fatalf("Setup raising to 3: %v", err)
	}
	wantReplication(t, js, n, 3, "after raising to 3")
	if out := logs.String(); strings.Count(out, "raised replication") != len(n.Streams())+3 ||
		!strings.Contains(out, "stream=GPUQ_CMD from=1 replicas=3") || !strings.Contains(out, "bucket=gpuq_hosts from=1 replicas=3") {
		t.Errorf("raising logged:\n%s", out)
	}

	// A mix, as the old Setup left when it failed halfway through lowering,
	// is evened out to the highest factor: no stream or bucket is left
	// behind.
	for _, name := range []string{n.LogsStream(), "KV_" + n.HostsBucket()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.Replicas = 1
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatalf("lower %s by hand: %v", name, err)
		}
	}
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Logger: log}); err != nil {
		t.Fatalf("Setup over a mix: %v", err)
	}
	wantReplication(t, js, n, 3, "after Setup over a mix of 1 and 3")
	kv, err := js.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The hosts bucket keeps its own settings: no markers, no rollups.
	if cfg := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config; st.LimitMarkerTTL() != 0 || st.History() != 1 || cfg.AllowRollup || !cfg.AllowMsgTTL {
		t.Errorf("hosts bucket after raising: marker ttl %v, history %d, rollups %v, message TTLs %v", st.LimitMarkerTTL(), st.History(), cfg.AllowRollup, cfg.AllowMsgTTL)
	}
}

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.DeadlineExceeded, true},
		{nats.ErrNoResponders, true},
		{jetstream.ErrJetStreamNotEnabled, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{&jetstream.APIError{Code: 500, ErrorCode: 10074, Description: "replicas > 1 not supported in non-clustered mode"}, false},
		{&natsbus.ReplicasError{Kind: "stream", Name: "GPUQ_CMD", Have: 3, Want: 1}, false},
		{errors.New("GPUQ_CMD exists with Memory storage"), false},
		{context.Canceled, false},
	} {
		if got := natsbus.Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestHostsBucketRefusesRollups: every worker may write to the hosts bucket,
// so a rollup header on one host's key must not wipe the others' heartbeats
// (a "Nats-Rollup: all" publish purges the whole stream where rollups are
// allowed). Puts with a TTL and deletes, which workers do, still work, also
// after Setup runs again.
func TestHostsBucketRefusesRollups(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	for range 2 {
		if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
			t.Fatalf("Setup: %v", err)
		}
	}
	kv, err := js.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"gpu-host-1", "gpu-host-2"} {
		if _, err := kv.Create(ctx, h, []byte(`{}`), jetstream.KeyTTL(time.Minute)); err != nil {
			t.Fatalf("put %s with a TTL: %v", h, err)
		}
	}
	for _, roll := range []string{"all", "sub"} {
		m := nats.NewMsg("$KV." + n.HostsBucket() + ".gpu-host-1")
		m.Data = []byte(`{}`)
		m.Header.Set("Nats-Rollup", roll)
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Errorf("a rollup %q on a host's key was stored", roll)
		}
	}
	if _, err := kv.Get(ctx, "gpu-host-2"); err != nil {
		t.Errorf("another host's heartbeat after the rollups: %v", err)
	}
	if err := kv.Delete(ctx, "gpu-host-1"); err != nil {
		t.Errorf("a worker deletes its key: %v", err)
	}
	if _, err := kv.Get(ctx, "gpu-host-1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the deleted key: %v", err)
	}
}
