package natsstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

// TestLoadWhileWritingMissesNoKey: a reader loads the ledger while the
// scheduler keeps rewriting its records. The watch that serves the initial
// values may mark them all delivered before a key whose value was just
// replaced (the server skips the replaced value, and counts its successor
// as not pending yet); a load must still hold every key.
func TestLoadWhileWritingMissesNoKey(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const accounts = 40
	rec := func(i int, seq uint64) scheduler.Record {
		a := &ledger.Account{ID: fmt.Sprintf("a%d", i), Balance: ledger.Credits(seq), Weight: 1, Seq: seq}
		data, err := ledger.MarshalAccount(a)
		if err != nil {
			t.Fatal(err)
		}
		return scheduler.Record{Key: subjects.AccountKey(a.ID), Seq: seq, Value: data}
	}
	w := natsstore.New(js, kv)
	if _, err := w.Load(ctx); err != nil {
		t.Fatal(err)
	}
	var recs []scheduler.Record
	for i := range accounts {
		recs = append(recs, rec(i, 1))
	}
	if err := w.Write(ctx, recs); err != nil {
		t.Fatal(err)
	}
	if err := w.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	writing := make(chan error, 1)
	go func() {
		for seq := uint64(2); ctx.Err() == nil; seq++ {
			if err := w.Write(ctx, []scheduler.Record{rec(int(seq)%accounts, seq)}); err != nil {
				writing <- err
				return
			}
			if err := w.Checkpoint(ctx, seq); err != nil {
				writing <- err
				return
			}
		}
		writing <- nil
	}()
	for n := range 150 {
		view, err := natsstore.New(js, kv).Load(ctx)
		if err != nil {
			t.Fatalf("load %d: %v", n, err)
		}
		if got := len(view.State.Accounts); got != accounts {
			t.Fatalf("load %d holds %d of the %d accounts", n, got, accounts)
		}
	}
	cancel()
	if err := <-writing; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// TestLoadAfterTheLeaseMarkerAgedOut: when no scheduler runs, the lease
// expires, its delete marker is removed a second later, and the stream's
// last sequence names a message that no longer exists. A load (gpuq audit,
// gpuq jobs with no scheduler up) must not wait for it.
func TestLoadAfterTheLeaseMarkerAgedOut(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := natsstore.New(js, kv)
	if _, err := w.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, []scheduler.Record{account(t, 10, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, subjects.LeaderKey, []byte(`{"v":1,"holder":"x","ttl":"1s"}`), jetstream.KeyTTL(time.Second)); err != nil {
		t.Fatal(err)
	}
	// Wait until the lease and its marker are gone: the stream then ends
	// in a removed message.
	str, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := str.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last, err := str.GetLastMsgForSubject(ctx, subjects.KVSubject(kv.Bucket(), ">"))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.LastSeq > last.Sequence {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the lease's marker never aged out (last sequence %d)", info.State.LastSeq)
		case <-time.After(100 * time.Millisecond):
		}
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second) // under the load's own 10s idle bound
	defer lcancel()
	view, err := natsstore.New(js, kv).Load(lctx)
	if err != nil {
		t.Fatalf("load after the lease's marker aged out: %v", err)
	}
	if view.Checkpoint != 1 || view.State.Accounts["a"] == nil {
		t.Errorf("view: checkpoint %d, accounts %v", view.Checkpoint, view.State.Accounts)
	}
}
