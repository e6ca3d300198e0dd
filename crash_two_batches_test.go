package gpuq_test

// A crash with two batches in the flush pipeline at once: the later
// batch's records written in stage 1 while the earlier one, its records
// written too, has sent neither its effects nor its checkpoint. Keys then
// hold versions past the checkpoint from two batches, the account's one of
// each: a load must walk its history back two versions. A new scheduler on
// the same server must fold to the same ledger: every job run once,
// charged once, nothing reserved, and the audit whole.

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

// wroteStore reports the top sequence of each write that succeeded.
type wroteStore struct {
	scheduler.Store
	wrote chan uint64
}

func (s *wroteStore) Write(ctx context.Context, recs []scheduler.Record) error {
	if err := s.Store.Write(ctx, recs); err != nil {
		return err
	}
	var top uint64
	for _, r := range recs {
		top = max(top, r.Seq)
	}
	select {
	case s.wrote <- top:
	default: // nobody needs to hear of this one
	}
	return nil
}

func TestCrashWithTwoBatchesInFlight(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	// No host until the restart: the first scheduler dispatches nothing,
	// so the batch after j1's holds the records of j2 and j3 and the
	// account's, which j1's batch wrote too.
	w := c.worker("h1")
	stop := errors.New("crash")
	store := &wroteStore{wrote: make(chan uint64, 64)}
	held := make(chan uint64, 1)  // the batch held in stage 2, its records written
	crashed := make(chan bool, 1) // whether the next batch's stage 1 wrote first
	var target atomic.Uint64      // the sequence j1 will have: armed before it is published
	hooks := scheduler.Hooks{AfterPersist: func(seq uint64) error {
		if tg := target.Load(); tg == 0 || seq < tg {
			return nil
		}
		held <- seq
		// Hold stage 2 until stage 1 has written the next batch's
		// records, then crash: neither batch's effects or checkpoint.
		deadline := time.After(20 * time.Second)
		for {
			select {
			case top := <-store.wrote:
				if top > seq {
					crashed <- true
					return stop
				}
			case <-deadline:
				crashed <- false
				return stop
			}
		}
	}}
	first := c.startScheduler("first", schedOpts{hooks: hooks, store: func(s scheduler.Store) scheduler.Store {
		store.Store = s
		return store
	}})
	c.createAccount("a", 1000)
	submit := func(id string) uint64 {
		msg, err := wire.EncodeSubmit(c.n, ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 20, Command: []string{"x"}})
		if err != nil {
			t.Fatal(err)
		}
		return c.publishRaw(msg.Subject, msg.MsgID, msg.Data).Sequence
	}
	info, err := c.js.Stream(c.ctx(), c.n.CmdStream())
	if err != nil {
		t.Fatal(err)
	}
	si, err := info.Info(c.ctx())
	if err != nil {
		t.Fatal(err)
	}
	target.Store(si.State.LastSeq + 1)
	if seq := submit("j1"); seq != target.Load() {
		t.Fatalf("j1 stored at %d, want %d", seq, target.Load())
	}
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("the batch of j1 never reached stage 2")
	}
	// Folded while j1's batch is held in stage 2: the next batch.
	submit("j2")
	submit("j3")
	select {
	case ok := <-crashed:
		if !ok {
			t.Fatal("the next batch's records were never written in stage 1 while j1's batch was held in stage 2")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the crash point was never reached")
	}
	if err := first.wait(t, 20*time.Second); !errors.Is(err, scheduler.ErrStopped) {
		t.Fatalf("first scheduler returned %v, want ErrStopped", err)
	}

	c.registerHost("h1", 4)
	c.startScheduler("second", schedOpts{})
	seen := map[string]int{}
	for range 3 {
		d := w.next().(ledger.DispatchOrder)
		seen[d.Job]++
		w.start(d)
		w.finish(d, 0)
	}
	w.none(300 * time.Millisecond)
	st := c.waitSettled("j1", "j2", "j3")
	for _, id := range []string{"j1", "j2", "j3"} {
		if seen[id] != 1 {
			t.Errorf("%s dispatched %d times, want once", id, seen[id])
		}
		if j := st.Jobs[id]; j.State != ledger.StateSucceeded || j.Attempt != 1 || j.Charged != 20 {
			t.Errorf("%s: %s after %d attempts, charged %d; want succeeded after 1, charged 20", id, j.State, j.Attempt, j.Charged)
		}
		if got := c.jobEventTypes("a", id); !slices.Equal(got, []string{"accepted", "dispatched", "started", "succeeded"}) {
			t.Errorf("%s events = %v", id, got)
		}
	}
	if a := st.Accounts["a"]; a.Balance != 1000-3*20 || a.Reserved != 0 {
		t.Errorf("account: balance %d reserved %d; want %d, 0", a.Balance, a.Reserved, 1000-3*20)
	}
	c.audit()
}
