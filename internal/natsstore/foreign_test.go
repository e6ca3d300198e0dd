package natsstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

// streamInfo is what a server answer sent to a forged reply subject puts
// at a key: a JSON document that is not a gpuq record.
const streamInfo = `{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"GPUQ_CMD"},"state":{"messages":3}}`

// TestForeignValuesAreReportedAndRepaired puts values gpuq did not write at
// the checkpoint, an account and a job key, as a reply-subject injection
// does: Load names each key instead of loading a wrong ledger, and Repair
// puts back the newest value gpuq wrote from the key's history.
func TestForeignValuesAreReportedAndRepaired(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	j := &ledger.Job{ID: "j", Account: "a", GPUs: 1, Cost: 0, Command: []string{"x"}, State: ledger.StateRejected, MaxAttempts: 1, Seq: 1}
	jdata, err := ledger.MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []scheduler.Record{account(t, 10, 1), {Key: subjects.JobKey("j"), Seq: 1, Value: jdata}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	other := strings.Replace(string(jdata), `"id":"j"`, `"id":"k"`, 1) // a gpuq record, of another job
	for key, v := range map[string]string{subjects.CheckpointKey: streamInfo, subjects.AccountKey("a"): streamInfo, subjects.JobKey("j"): other} {
		if _, err := kv.Put(ctx, key, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	reader := natsstore.New(js, kv)
	repaired := map[string]bool{}
	for range 4 {
		_, err := reader.Load(ctx)
		if err == nil {
			break
		}
		var fe *natsstore.ForeignValueError
		if !errors.As(err, &fe) || !errors.Is(err, scheduler.ErrForeignValue) || !strings.Contains(err.Error(), fe.Key) {
			t.Fatalf("Load = %v, want a foreign value error naming the key", err)
		}
		did, err := s.Repair(ctx, err)
		if err != nil {
			t.Fatalf("Repair %s: %v", fe.Key, err)
		}
		t.Log(did)
		repaired[fe.Key] = true
	}
	if len(repaired) != 3 {
		t.Errorf("repaired %v, want the checkpoint, account.a and job.j", repaired)
	}
	view, err := reader.Load(ctx)
	if err != nil {
		t.Fatalf("Load after the repairs: %v", err)
	}
	if view.Checkpoint != 1 || view.State.Accounts["a"].Balance != 10 || view.State.Jobs["j"] == nil {
		t.Errorf("repaired view: checkpoint %d, accounts %v, jobs %v", view.Checkpoint, view.State.Accounts, view.State.Jobs)
	}

	// A key that never held a gpuq value cannot be repaired, and Repair
	// says so.
	if _, err := kv.Put(ctx, subjects.JobKey("x"), []byte(streamInfo)); err != nil {
		t.Fatal(err)
	}
	_, err = reader.Load(ctx)
	if !errors.Is(err, scheduler.ErrForeignValue) || !strings.Contains(err.Error(), "job.x") {
		t.Fatalf("Load = %v, want job.x reported", err)
	}
	if _, rerr := s.Repair(ctx, err); rerr == nil || !strings.Contains(rerr.Error(), "holds no value gpuq wrote") || !strings.Contains(rerr.Error(), "job.x") {
		t.Errorf("Repair of a key with no gpuq value = %v", rerr)
	}
}
