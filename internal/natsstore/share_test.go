package natsstore_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

// A loaded job holds no strings of its own for its id and account: the id
// is a part of its key, the account one string for all the account's jobs.
// A takeover of a million pending jobs holds a million of each otherwise.
func TestLoadedJobsShareTheirStrings(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	st := ledger.New()
	st.Apply(ledger.Admin{Account: "vision", ID: "create", Op: ledger.OpCreate, Balance: 100}, 1, at)
	var recs []scheduler.Record
	for i, id := range []string{"j1", "j2"} {
		seq := uint64(i + 2)
		st.Apply(ledger.Submit{Account: "vision", ID: id, GPUs: 1, Cost: 1, Command: []string{"true"}, Walltime: time.Hour,
			MaxAttempts: 3}, seq, at)
		data, err := ledger.MarshalJob(st.Jobs[id])
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, scheduler.Record{Key: subjects.JobKey(id), Seq: seq, Value: data})
	}
	data, err := ledger.MarshalAccount(st.Accounts["vision"])
	if err != nil {
		t.Fatal(err)
	}
	recs = append(recs, scheduler.Record{Key: subjects.AccountKey("vision"), Seq: 3, Value: data})
	if err := s.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 3); err != nil {
		t.Fatal(err)
	}
	loader := natsstore.New(js, kv)
	view, err := loader.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	j1, j2 := view.State.Jobs["j1"], view.State.Jobs["j2"]
	if j1 == nil || j2 == nil {
		t.Fatalf("loaded %v", view.State.Jobs)
	}
	if j1.Account != "vision" || unsafe.StringData(j1.Account) != unsafe.StringData(j2.Account) {
		t.Errorf("the jobs of account vision hold accounts %q at %p and %q at %p, want one string", j1.Account,
			unsafe.StringData(j1.Account), j2.Account, unsafe.StringData(j2.Account))
	}
	for id, j := range view.State.Jobs {
		key, ok := natsstore.HeldKey(loader, subjects.JobKey(id))
		if !ok {
			t.Fatalf("the store holds no key of job %s", id)
		}
		if j.ID != id || unsafe.StringData(j.ID) != unsafe.StringData(key[len(key)-len(id):]) {
			t.Errorf("job %s holds a copy of its id, not a part of its key %q", id, key)
		}
	}
}
