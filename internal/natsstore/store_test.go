// Tests of the KV ledger view and the lease against a real embedded
// nats-server: compare-and-swap fencing, recovery of the state as of the
// checkpoint from key history, the lease's exclusion and expiry, and a
// contender that rides out the server's absence.
package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

func setup(t testing.TB, cfg natsbus.SetupConfig) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	_, js, kv := setupServer(t, cfg)
	return js, kv
}

// setupServer is setup that also returns the server, for a test to stop.
func setupServer(t testing.TB, cfg natsbus.SetupConfig) (*natstest.Server, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx := context.Background()
	if err := natsbus.Setup(ctx, js, subjects.Default, cfg); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, subjects.Default.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	return srv, js, kv
}

func account(t *testing.T, balance ledger.Credits, seq uint64) scheduler.Record {
	t.Helper()
	a := &ledger.Account{ID: "a", Balance: balance, Weight: 1, Seq: seq}
	data, err := ledger.MarshalAccount(a)
	if err != nil {
		t.Fatal(err)
	}
	return scheduler.Record{Key: subjects.AccountKey("a"), Seq: seq, Value: data}
}

func TestSecondWriterIsFenced(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s1, s2 := natsstore.New(js, kv), natsstore.New(js, kv)
	for _, s := range []*natsstore.Store{s1, s2} {
		if _, err := s.Load(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s1.Write(ctx, []scheduler.Record{account(t, 10, 1)}); err != nil {
		t.Fatalf("first writer: %v", err)
	}
	if err := s1.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	err := s2.Write(ctx, []scheduler.Record{account(t, 99, 1)})
	if !errors.Is(err, scheduler.ErrConflict) {
		t.Errorf("second writer: %v, want ErrConflict", err)
	}
	if err := s2.Checkpoint(ctx, 1); !errors.Is(err, scheduler.ErrConflict) {
		t.Errorf("second checkpoint: %v, want ErrConflict", err)
	}
	// A record whose stored version is already as new is not written again.
	if err := s1.Write(ctx, []scheduler.Record{account(t, 10, 1)}); err != nil {
		t.Errorf("rewrite of the same version: %v", err)
	}
	e, err := kv.Get(ctx, subjects.AccountKey("a"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := ledger.UnmarshalAccount(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if a.Balance != 10 {
		t.Errorf("stored balance %d, want 10", a.Balance)
	}
}

func TestLoadRewindsToCheckpoint(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []scheduler.Record{account(t, 10, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// A flush through seq 3 writes the account and creates a job, then
	// "crashes" before its checkpoint.
	j := &ledger.Job{ID: "j", Account: "a", GPUs: 1, Command: []string{"x"}, State: ledger.StateRejected, MaxAttempts: 1, Seq: 3}
	jd, err := ledger.MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []scheduler.Record{account(t, 20, 3), {Key: subjects.JobKey("j"), Seq: 3, Value: jd}}); err != nil {
		t.Fatal(err)
	}
	view, err := natsstore.New(js, kv).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if view.Checkpoint != 1 || view.Ahead != 3 {
		t.Errorf("checkpoint %d ahead %d, want 1 and 3", view.Checkpoint, view.Ahead)
	}
	if a := view.State.Accounts["a"]; a == nil || a.Balance != 10 || a.Seq != 1 {
		t.Errorf("account as of the checkpoint = %+v, want balance 10 at seq 1", a)
	}
	if _, ok := view.State.Jobs["j"]; ok {
		t.Error("a job created after the checkpoint is in the view")
	}
}

func TestLoadFailsWhenHistoryIsTooShort(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	shortenHistory(t, js, kv, 2)
	ctx := context.Background()
	twoVersionsPastCheckpoint(t, js, kv)
	_, err := natsstore.New(js, kv).Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "raise the bucket's history") {
		t.Errorf("Load = %v, want it to say the history is too short", err)
	}
}

// shortenHistory keeps only n versions of each key in kv's stream, as in a
// bucket someone changed by hand after Setup (which keeps at least
// scheduler.MinLedgerHistory).
func shortenHistory(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue, n int64) {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxMsgsPerSubject = n
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// twoVersionsPastCheckpoint writes the account at seq 1, checkpoints there,
// and writes it twice more: with a history of 2, its version at the
// checkpoint is gone.
func twoVersionsPastCheckpoint(t *testing.T, js jetstream.JetStream, kv jetstream.KeyValue) {
	t.Helper()
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Write(ctx, []scheduler.Record{account(t, 10, 1)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ctx, 1); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(2); seq <= 3; seq++ {
		if err := s.Write(ctx, []scheduler.Record{account(t, ledger.Credits(seq), seq)}); err != nil {
			t.Fatal(err)
		}
	}
}

// statusFails is a bucket whose status cannot be read.
type statusFails struct{ jetstream.KeyValue }

func (statusFails) Status(context.Context) (jetstream.KeyValueStatus, error) {
	return nil, errors.New("status unavailable")
}

// TestLoadFailsWhenStatusFails: a key with no version at or before the
// checkpoint either was created after it or lost its history; Load needs
// the bucket's history setting to tell, and fails if it cannot read it
// rather than leave the record out.
func TestLoadFailsWhenStatusFails(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	shortenHistory(t, js, kv, 2)
	ctx := context.Background()
	twoVersionsPastCheckpoint(t, js, kv)
	view, err := natsstore.New(js, statusFails{kv}).Load(ctx)
	if err == nil || !strings.Contains(err.Error(), "status unavailable") {
		t.Errorf("Load = %+v, %v; want the status error", view, err)
	}
}

func TestLeaseExcludesAndExpires(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	l1, err := natsstore.NewLease(js, kv, "one", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	l2, _ := natsstore.NewLease(js, kv, "two", time.Second)
	if err := l1.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	if holder, err := l1.Holder(ctx); err != nil || holder != "one" {
		t.Errorf("holder = %q, %v", holder, err)
	}
	// While one renews, two cannot acquire.
	short, cancel := context.WithTimeout(ctx, 2500*time.Millisecond)
	defer cancel()
	renewing := make(chan struct{})
	go func() {
		defer close(renewing)
		for short.Err() == nil {
			if err := l1.Renew(ctx); err != nil {
				t.Errorf("renew: %v", err)
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()
	if err := l2.Acquire(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("two acquired a held lease: %v", err)
	}
	<-renewing
	// When one stops renewing, the lease lapses and two takes it.
	lapse, cancel3 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel3()
	if err := l2.Acquire(lapse); err != nil {
		t.Fatalf("two never took the lapsed lease: %v", err)
	}
	if err := l1.Renew(ctx); !errors.Is(err, scheduler.ErrLeaseLost) {
		t.Errorf("deposed holder's renew = %v, want ErrLeaseLost", err)
	}
	// Release lets the next holder in at once.
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	acquired, cancel2 := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel2()
	if err := l1.Acquire(acquired); err != nil {
		t.Errorf("acquire after release: %v", err)
	}
}

// countingKV counts the lease's create attempts and their failures.
type countingKV struct {
	jetstream.KeyValue
	creates, failures atomic.Int32
}

func (kv *countingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv.creates.Add(1)
	rev, err := kv.KeyValue.Create(ctx, key, value, opts...)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		kv.failures.Add(1)
	}
	return rev, err
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAcquireRidesOutTheServersAbsence: a contender whose server goes away
// keeps trying, never returns an error for it, and takes the lease once the
// server is back and the old holder's lease has lapsed.
func TestAcquireRidesOutTheServersAbsence(t *testing.T) {
	t.Parallel()
	srv, js, kv := setupServer(t, natsbus.SetupConfig{})
	ctx := context.Background()
	old, _ := natsstore.NewLease(js, kv, "old", time.Second)
	if err := old.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	counted := &countingKV{KeyValue: kv}
	l, _ := natsstore.NewLease(js, counted, "new", time.Second)

	srv.Stop()
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	held, err := l.TryAcquire(short)
	cancel()
	if held || err == nil || errors.Is(err, scheduler.ErrMisconfigured) {
		t.Fatalf("TryAcquire with the server away = %v, %v; want a retryable error", held, err)
	}
	done := make(chan error, 1)
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() { done <- l.Acquire(actx) }()
	waitFor(t, 30*time.Second, "three failed tries to create the lease while the server is away", func() bool { return counted.failures.Load() >= 3 })
	select {
	case err := <-done:
		t.Fatalf("Acquire returned while the server was away: %v", err)
	default:
	}
	srv.Restart(t)
	if err := <-done; err != nil {
		t.Fatalf("Acquire after the server came back: %v", err)
	}
	if holder, err := l.Holder(ctx); err != nil || holder != "new" {
		t.Errorf("holder = %q, %v; want new", holder, err)
	}
	t.Logf("%d tries, %d of them failed", counted.creates.Load(), counted.failures.Load())
}

// TestLeaseMisconfigured: a bucket without per-key TTLs, or a connection
// closed for good, is a failure no retry can mend, and says so.
func TestLeaseMisconfigured(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := srv.JetStream(t)
	ctx := context.Background()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "nottl"})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := natsstore.NewLease(js, kv, "one", time.Second)
	if err := l.Acquire(ctx); !errors.Is(err, scheduler.ErrMisconfigured) || !strings.Contains(err.Error(), "TTL") {
		t.Errorf("Acquire on a bucket without TTLs = %v, want ErrMisconfigured naming the TTL", err)
	}
	nc.Close()
	if _, err := l.TryAcquire(ctx); !errors.Is(err, scheduler.ErrMisconfigured) {
		t.Errorf("TryAcquire on a closed connection = %v, want ErrMisconfigured", err)
	}
}

// TestLeaseRepairsAKeyNoSchedulerWrote: the lease key can be overwritten by
// a client outside gpuq (a server answer sent to a forged reply subject
// lands there as a value without a TTL). A contender must not wait on it
// forever: a value that is not a lease, or a lease that has outlived the
// TTL it names, is removed and the lease taken. A live lease, renewed
// within its TTL, is never removed.
func TestLeaseRepairsAKeyNoSchedulerWrote(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		value string
	}{
		{"a stream info answer", `{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"GPUQ_EVENTS"}}`},
		{"not JSON", `<<<<`},
		// Taken once the contender has seen it stand past its 1s TTL.
		{"a lease without its TTL", `{"v":1,"holder":"ghost","at":"2026-12-01T00:00:00Z","ttl":"1s"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			js, kv := setup(t, natsbus.SetupConfig{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := kv.Put(ctx, subjects.LeaderKey, []byte(tt.value)); err != nil {
				t.Fatal(err)
			}
			var logs strings.Builder
			l, _ := natsstore.NewLease(js, kv, "new", time.Second)
			l.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			if err := l.Acquire(ctx); err != nil {
				t.Fatalf("Acquire over %s: %v", tt.name, err)
			}
			if holder, err := l.Holder(ctx); err != nil || holder != "new" {
				t.Errorf("holder = %q, %v; want new", holder, err)
			}
			if !strings.Contains(logs.String(), "the leader lease key holds a value no scheduler wrote") {
				t.Errorf("the repair was not reported; logs:\n%s", logs.String())
			}
		})
	}
	t.Run("a live lease stays", func(t *testing.T) {
		t.Parallel()
		js, kv := setup(t, natsbus.SetupConfig{})
		ctx := context.Background()
		holder, _ := natsstore.NewLease(js, kv, "holder", time.Second)
		if err := holder.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
		other, _ := natsstore.NewLease(js, kv, "other", time.Second)
		for range 20 { // 5s of renewals every 250ms, past TTL plus margin
			if err := holder.Renew(ctx); err != nil {
				t.Fatalf("renew: %v", err)
			}
			if held, err := other.TryAcquire(ctx); held || err != nil {
				t.Fatalf("TryAcquire against a live lease = %v, %v", held, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
}

// TestWritesGiveUpBeforeTheCallersDeadline: a lease renewal and a
// checkpoint whose server is away (or whose answer a failover lost) end
// with an error of their own, within the lease's TTL and the write
// timeout, not when the caller's far-off deadline does. A leader that
// waited on the caller's deadline led nothing meanwhile: its lease lapsed
// while it answered no command (seen in TestDeployClusterConfig with a
// 120s test deadline).
func TestWritesGiveUpBeforeTheCallersDeadline(t *testing.T) {
	t.Parallel()
	srv, js, kv := setupServer(t, natsbus.SetupConfig{})
	ctx := context.Background()
	l, _ := natsstore.NewLease(js, kv, "one", time.Second)
	if err := l.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	store := natsstore.New(js, kv)
	if _, err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	far, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := l.Renew(far); err == nil || far.Err() != nil {
		t.Errorf("renew with the server away = %v, caller's context %v; want an error of its own while the caller's deadline is still far", err, far.Err())
	}
	if err := store.Checkpoint(far, 1); err == nil || far.Err() != nil {
		t.Errorf("checkpoint with the server away = %v, caller's context %v; want an error of its own while the caller's deadline is still far", err, far.Err())
	}
}

// TestWritesOverlapOnOtherKeys: the scheduler's flush stages write one
// batch's records while the batch before writes its own and checkpoints, on
// other keys. Each such write still chains its key's revisions, and a load
// afterwards finds every one. (Run with -race: the store's memory of
// revisions is shared by the overlapping calls.)
func TestWritesOverlapOnOtherKeys(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	s := natsstore.New(js, kv)
	if _, err := s.Load(ctx); err != nil {
		t.Fatal(err)
	}
	job := func(id string, seq uint64) scheduler.Record {
		j := &ledger.Job{ID: id, Account: "a", GPUs: 1, State: ledger.StateSucceeded, Seq: seq, Command: []string{"true"}}
		data, err := ledger.MarshalJob(j)
		if err != nil {
			t.Fatal(err)
		}
		return scheduler.Record{Key: subjects.JobKey(id), Seq: seq, Value: data}
	}
	const rounds = 20
	for i := range uint64(rounds) {
		seq := 2*i + 1
		errs := make(chan error, 2)
		go func() { // stage 2 of batch seq: its account record, then its checkpoint
			if err := s.Write(ctx, []scheduler.Record{account(t, ledger.Credits(seq), seq)}); err != nil {
				errs <- err
				return
			}
			errs <- s.Checkpoint(ctx, seq)
		}()
		go func() { // stage 1 of batch seq+1: its job records
			errs <- s.Write(ctx, []scheduler.Record{job(fmt.Sprintf("j%d-a", i), seq+1), job(fmt.Sprintf("j%d-b", i), seq+1)})
		}()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		}
	}
	view, err := natsstore.New(js, kv).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if view.Checkpoint != 2*rounds-1 {
		t.Errorf("checkpoint %d, want %d", view.Checkpoint, 2*rounds-1)
	}
	if a := view.State.Accounts["a"]; a == nil || a.Balance != 2*rounds-1 {
		t.Errorf("account a = %+v, want balance %d", a, 2*rounds-1)
	}
}
