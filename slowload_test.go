// Takeover of a ledger whose load outlasts the lease: a million jobs take
// a new leader seconds to load, more than a lease TTL. The seam is a store
// whose Load, after the real one, waits four lease TTLs (the harness's TTL is
// 1s), on a real server with a real standby. Properties: the loading
// scheduler keeps its lease through the load and then leads, and the standby
// never does; and a scheduler whose lease is taken while it loads abandons
// the load and writes nothing in that term (no fencing gap), then leads
// again once the lease is free.
package gpuq_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

// slowLoadStore is the ledger store with a Load that, once the real load is
// done, takes delay more, as a large ledger's does, unless its ctx ends
// first. It counts the writes made after each load.
type slowLoadStore struct {
	scheduler.Store
	delay   time.Duration
	loading chan struct{} // a value each time a load begins its delay

	mu        sync.Mutex
	loads     int
	writes    map[int]int // writes (Write, Checkpoint, Refuse) by the load that preceded them
	abandoned []error     // the causes of the loads cut short
}

func newSlowLoadStore(delay time.Duration) *slowLoadStore {
	return &slowLoadStore{delay: delay, loading: make(chan struct{}, 8), writes: map[int]int{}}
}

func (s *slowLoadStore) wrap(st scheduler.Store) scheduler.Store {
	s.Store = st
	return s
}

func (s *slowLoadStore) Load(ctx context.Context) (*scheduler.View, error) {
	s.mu.Lock()
	s.loads++
	s.mu.Unlock()
	view, err := s.Store.Load(ctx)
	if err != nil {
		return nil, err
	}
	notify(s.loading)
	select {
	case <-time.After(s.delay):
		return view, nil
	case <-ctx.Done():
		s.mu.Lock()
		s.abandoned = append(s.abandoned, context.Cause(ctx))
		s.mu.Unlock()
		return nil, ctx.Err()
	}
}

func (s *slowLoadStore) wrote() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes[s.loads]++
}

func (s *slowLoadStore) Write(ctx context.Context, recs []scheduler.Record) error {
	s.wrote()
	return s.Store.Write(ctx, recs)
}

func (s *slowLoadStore) Checkpoint(ctx context.Context, seq uint64) error {
	s.wrote()
	return s.Store.Checkpoint(ctx, seq)
}

func (s *slowLoadStore) Refuse(ctx context.Context, seq uint64, why string) error {
	s.wrote()
	return s.Store.Refuse(ctx, seq, why)
}

// state returns the loads so far, the writes after load n, and the causes
// of the loads cut short.
func (s *slowLoadStore) state(n int) (loads, writes int, abandoned []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loads, s.writes[n], append([]error(nil), s.abandoned...)
}

// slowLoad is four lease TTLs of the harness (1s).
const slowLoad = 4 * time.Second

func waitLoading(t *testing.T, s *slowLoadStore) {
	t.Helper()
	select {
	case <-s.loading:
	case <-time.After(20 * time.Second):
		t.Fatal("the scheduler did not load the ledger within 20s")
	}
}

func TestTakeoverWithASlowLoadKeepsTheLease(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	first := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 1000)
	c.submit("a", "before", 1, 1, 0)
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	slow := newSlowLoadStore(slowLoad)
	loader := c.startScheduler("loader", schedOpts{store: slow.wrap})
	waitLoading(t, slow) // it holds the lease, and its load takes four TTLs
	standby := c.startScheduler("standby", schedOpts{})
	loader.waitLeading(t, 2*slowLoad)
	c.submit("a", "after", 1, 1, 0) // answered by the loader, leading
	if n := standby.leading.Load(); n != 0 {
		t.Errorf("the standby led %d terms while the loader loaded: the loader's lease lapsed during its load", n)
	}
	if n := loader.ended.Load(); n != 0 {
		t.Errorf("the loader ended %d terms", n)
	}
	if _, _, abandoned := slow.state(0); len(abandoned) != 0 {
		t.Errorf("loads abandoned: %v", abandoned)
	}
}

func TestLeaseLostWhileLoadingWritesNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	first := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 1000)
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	slow := newSlowLoadStore(slowLoad)
	loader := c.startScheduler("loader", schedOpts{store: slow.wrap})
	waitLoading(t, slow)
	// A submission waits in the log: a term that led would fold it and
	// write its records and the checkpoint.
	accepted := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ev, err := c.c.Submit(ctx, ledger.Submit{Account: "a", ID: "waiting", GPUs: 1, Cost: 1, Command: []string{"true"}})
		if err == nil && ev.Type != ledger.EventAccepted {
			err = errors.New("not accepted: " + string(ev.Type))
		}
		accepted <- err
	}()
	// Another holder takes the lease while the loader loads, as one does
	// after the loader's lease lapsed.
	if err := c.ledger.Purge(c.ctx(), subjects.LeaderKey); err != nil {
		t.Fatal(err)
	}
	thief, err := natsstore.NewLease(c.js, c.ledger, "thief", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := thief.TryAcquire(c.ctx()); err != nil || !held {
		t.Fatalf("take the lease: %v, %v", held, err)
	}
	loader.waitLeft(t, 2*slowLoad) // before the load would have ended
	loads, writes, abandoned := slow.state(1)
	if loads != 1 || len(abandoned) != 1 || !errors.Is(abandoned[0], scheduler.ErrLeaseLost) {
		t.Fatalf("after the lease was taken: %d loads, abandoned %v; want the first abandoned for the lost lease", loads, abandoned)
	}
	if writes != 0 || loader.leading.Load() != 0 {
		t.Fatalf("the term that lost its lease while loading wrote %d times and led %d terms", writes, loader.leading.Load())
	}

	// The thief never renews: once its lease lapses the loader takes it,
	// loads again and answers the submission.
	loader.waitLeading(t, 4*slowLoad)
	select {
	case err := <-accepted:
		if err != nil {
			t.Fatalf("the waiting submission: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the waiting submission was not answered")
	}
	if _, writes, _ := slow.state(1); writes != 0 {
		t.Fatalf("%d writes after the abandoned load", writes)
	}
}
