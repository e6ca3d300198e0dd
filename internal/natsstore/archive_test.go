// Tests of archived job keys against a real embedded nats-server: a delete
// record removes the key with a compare-and-swap, leaving a marker with the
// name of the archive; a load whose checkpoint is past the archive treats the key
// as absent, one whose checkpoint is below it puts the record back; the id
// can be written again; a delete nobody made through an archive leaves the
// key absent, as before.
package natsstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// doneJob is the record of a finished job j1 of account a, last changed at
// seq.
func doneJob(t *testing.T, seq uint64) (*ledger.Job, []byte) {
	t.Helper()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	j := &ledger.Job{ID: "j1", Account: "a", GPUs: 1, Cost: 5, Charged: 5, Command: []string{"true"}, Walltime: time.Hour,
		MaxAttempts: 3, State: ledger.StateSucceeded, Attempt: 1, SubmitSeq: 1, SubmittedAt: at, Seq: seq, JobOutcome: &ledger.JobOutcome{Host: "h1", EndedAt: at}}
	data, err := ledger.MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	return j, data
}

func TestArchiveDeletesTheKeyAndLoadRewindsPastIt(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	_, final := doneJob(t, 2)
	key := subjects.JobKey("j1")
	if err := s.Write(ctx, []scheduler.Record{account(t, 5, 2), {Key: key, Seq: 2, Value: final}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// The archive at 9 is written, its history first as a flush does; the
	// flush stops before its checkpoint.
	publishHistory(t, js, 9, final)
	if err := s.Write(ctx, []scheduler.Record{{Key: key, Seq: 9, Value: final, Delete: true}}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("get after the delete: %v, want key not found", err)
	}
	if hist, err := kv.History(ctx, key); err != nil || len(hist) != 1 {
		t.Errorf("history after the delete: %d versions (%v), want only the marker", len(hist), err)
	}

	reader := natsstore.New(js, kv)
	view, err := reader.Load(ctx)
	if err != nil {
		t.Fatalf("load below the archive: %v", err)
	}
	if j := view.State.Jobs["j1"]; j == nil || j.Seq != 2 || view.Ahead != 9 {
		t.Fatalf("load below the archive: job %+v, ahead %d; want the record at 2 back, ahead 9", j, view.Ahead)
	}
	// The new term applies the archive again: the stored marker already
	// carries it, so nothing is written.
	if err := reader.Write(ctx, []scheduler.Record{{Key: key, Seq: 9, Value: final, Delete: true}}); err != nil {
		t.Fatalf("the archive again: %v", err)
	}
	if err := reader.Checkpoint(ctx, 9); err != nil {
		t.Fatal(err)
	}
	view, err = natsstore.New(js, kv).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := view.State.Jobs["j1"]; ok {
		t.Fatal("load past the archive still has the job")
	}
	// The id is free: a new job under it is written over the marker.
	if err := reader.Write(ctx, []scheduler.Record{{Key: key, Seq: 12, Value: mustJob(t, 12)}}); err != nil {
		t.Fatalf("a new job under the archived id: %v", err)
	}
	if e, err := kv.Get(ctx, key); err != nil || e.Operation() != jetstream.KeyValuePut {
		t.Errorf("the new job's key: %v", err)
	}
}

// publishHistory puts the final record of an archive at seq in the history
// stream, as the scheduler's flush does before it deletes the key.
func publishHistory(t *testing.T, js jetstream.JetStream, seq uint64, record []byte) {
	t.Helper()
	j, err := ledger.UnmarshalJob(record)
	if err != nil {
		t.Fatal(err)
	}
	msg, err := wire.EncodeEffect(subjects.Default, seq, time.Date(2026, 12, 9, 9, 0, 0, 0, time.UTC), 0, ledger.ArchivedJob{Job: j})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(msg.Subject)
	m.Data = msg.Data
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish the history: %v", err)
	}
}

// The marker an archive leaves is small: it names the archive and the
// account, not the record, which a load past the checkpoint finds in the
// history stream. Without that record the load says so and names the key.
func TestArchiveMarkerIsSmallAndLoadReadsTheHistory(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	j, final := doneJob(t, 2)
	j.Command = make([]string, 2000) // a large record
	for i := range j.Command {
		j.Command[i] = "--flag-that-takes-room"
	}
	final, err := ledger.MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	key := subjects.JobKey("j1")
	if err := s.Write(ctx, []scheduler.Record{account(t, 5, 2), {Key: key, Seq: 2, Value: final}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// No history yet: a load below the archive cannot put the record back.
	if err := s.Write(ctx, []scheduler.Record{{Key: key, Seq: 9, Value: final, Delete: true}}); err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	marker, err := str.GetLastMsgForSubject(ctx, subjects.KVSubject(kv.Bucket(), key))
	if err != nil {
		t.Fatal(err)
	}
	if len(marker.Data) > 100 || len(final) < 40000 {
		t.Errorf("the marker of a %d-byte record holds %d bytes (%s), want at most 100", len(final), len(marker.Data), marker.Data)
	}
	if _, err := natsstore.New(js, kv).Load(ctx); err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "not in GPUQ_HISTORY") {
		t.Fatalf("load below the archive without its history: %v, want an error naming %s and the history", err, key)
	}
	publishHistory(t, js, 9, final)
	view, err := natsstore.New(js, kv).Load(ctx)
	if err != nil {
		t.Fatalf("load below the archive: %v", err)
	}
	if got := view.State.Jobs["j1"]; got == nil || got.Seq != 2 || len(got.Command) != 2000 {
		t.Fatalf("load below the archive: job %+v, want the record at 2 back from the history", got)
	}
	// A history record of another archive is not taken for this one.
	publishHistory(t, js, 7, final)
	if _, err := natsstore.New(js, kv).Load(ctx); err == nil || !strings.Contains(err.Error(), "archive at 7, not 9") {
		t.Fatalf("load with the history of another archive: %v", err)
	}
}

func mustJob(t *testing.T, seq uint64) []byte {
	t.Helper()
	_, data := doneJob(t, seq)
	return data
}

// A delete is fenced like any write: a store whose revision is stale is
// refused.
func TestArchiveDeleteIsFenced(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s1, s2 := natsstore.New(js, kv), natsstore.New(js, kv)
	_, final := doneJob(t, 2)
	key := subjects.JobKey("j1")
	for _, s := range []*natsstore.Store{s1, s2} {
		if _, err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s1.Write(ctx, []scheduler.Record{{Key: key, Seq: 2, Value: final}}); err != nil {
		t.Fatal(err)
	}
	if err := s2.Write(ctx, []scheduler.Record{{Key: key, Seq: 9, Value: final, Delete: true}}); !errors.Is(err, scheduler.ErrConflict) {
		t.Errorf("a stale store's delete: %v, want ErrConflict", err)
	}
	if _, err := kv.Get(ctx, key); err != nil {
		t.Errorf("the key after a fenced delete: %v", err)
	}
}

// A key someone removed without an archive (nats kv del) is absent, as it
// was before archives existed.
func TestForeignDeleteIsAbsent(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	_, final := doneJob(t, 2)
	if err := s.Write(ctx, []scheduler.Record{account(t, 5, 2), {Key: subjects.JobKey("j1"), Seq: 2, Value: final}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, subjects.JobKey("j1")); err != nil {
		t.Fatal(err)
	}
	view, err := natsstore.New(js, kv).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := view.State.Jobs["j1"]; ok || view.Ahead != 2 {
		t.Errorf("after a foreign delete: job present %v, ahead %d", ok, view.Ahead)
	}
}
