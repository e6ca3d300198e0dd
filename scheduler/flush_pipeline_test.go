// Tests of the flush pipeline: the service goroutine folds while a flush is
// written, and the flusher keeps each flush's order. Small fakes of the
// seams inside a testing/synctest bubble record every write, publish and
// checkpoint in one list; a store whose writes wait for the test shows what
// the fold does meanwhile. The properties: while a batch's records are
// being written, the commands that arrive are folded (nothing waits on the
// write to be read) and go out together in the next batch; each batch's
// effects are sent only after its records are written, and its checkpoint
// only after both; checkpoints only rise; and no effect of a later batch is
// sent before the checkpoint of an earlier one.
package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// opLog is the order of the flusher's calls, shared by the fakes.
type opLog struct {
	mu  sync.Mutex
	ops []string
}

func (l *opLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ops = append(l.ops, fmt.Sprintf(format, args...))
}

func (l *opLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ops...)
}

// gateStore records writes and checkpoints; each write waits for a value on
// gate when gate is set.
type gateStore struct {
	ops  *opLog
	gate chan struct{}
}

func (s *gateStore) Load(context.Context) (*scheduler.View, error) {
	return &scheduler.View{State: ledger.New()}, nil
}

func (s *gateStore) Write(ctx context.Context, recs []scheduler.Record) error {
	var top uint64
	keys := make([]string, 0, len(recs))
	for _, r := range recs {
		top = max(top, r.Seq)
		keys = append(keys, r.Key)
	}
	s.ops.add("write-begin %d", top)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.ops.add("write-end %d %s", top, strings.Join(keys, ","))
	return nil
}

func (s *gateStore) Checkpoint(_ context.Context, seq uint64) error {
	s.ops.add("checkpoint %d", seq)
	return nil
}

func (s *gateStore) Refuse(context.Context, uint64, string) error { return nil }

// opPublisher records each publish of effects (messages whose id names a
// command's sequence), by the highest sequence among them.
type opPublisher struct{ ops *opLog }

func (p *opPublisher) Publish(_ context.Context, msgs []wire.Message) (int, error) {
	var top uint64
	for _, m := range msgs {
		var seq uint64
		if _, err := fmt.Sscanf(m.MsgID, "%d.", &seq); err == nil {
			top = max(top, seq)
		}
	}
	if top > 0 {
		p.ops.add("effects %d", top)
	}
	return len(msgs), nil
}

// chanLog is a command log whose single follower delivers what the test
// sends on c, unbuffered.
type chanLog struct{ c chan scheduler.LogEntry }

func (l *chanLog) Follow(context.Context, uint64) (scheduler.Follower, error) {
	return &fakeFollower{c: l.c}, nil
}
func (l *chanLog) Trim(context.Context, uint64) error { return nil }

func logEntry(t *testing.T, seq uint64, m wire.Message, err error) scheduler.LogEntry {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return scheduler.LogEntry{Seq: seq, Time: time.Now(), Subject: m.Subject, Data: m.Data}
}

func TestFoldGoesOnWhileABatchIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops := &opLog{}
		store := &gateStore{ops: ops, gate: make(chan struct{})}
		log := &chanLog{c: make(chan scheduler.LogEntry)}
		svc, err := scheduler.New(scheduler.Config{Store: store, Lease: &fakeLease{}, CommandLog: log,
			Publisher: &opPublisher{ops: ops}, Hosts: fakeHosts{}, Logger: slog.New(&logRecords{})})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		n := subjects.Default
		admin, err := wire.EncodeAdmin(n, ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: 1000})
		log.c <- logEntry(t, 1, admin, err)
		synctest.Wait()
		if got := ops.all(); len(got) != 1 || got[0] != "write-begin 1" {
			t.Fatalf("after the first command: %q, want its batch's write begun", got)
		}
		// The first batch's write waits; the next commands are read and
		// folded all the same (each send would block otherwise).
		for i := 2; i <= 5; i++ {
			m, err := wire.EncodeSubmit(n, ledger.Submit{Account: "a", ID: fmt.Sprintf("j%d", i), GPUs: 1, Cost: 1,
				Command: []string{"true"}, Walltime: time.Hour})
			sent := make(chan struct{})
			go func() { log.c <- logEntry(t, uint64(i), m, err); close(sent) }()
			synctest.Wait()
			select {
			case <-sent:
			default:
				cancel()
				t.Fatalf("command %d was not read while the first batch's write waited", i)
			}
		}
		store.gate <- struct{}{} // the first batch's write
		synctest.Wait()
		store.gate <- struct{}{} // the second's
		synctest.Wait()
		want := []string{
			"write-begin 1", "write-end 1 account.a", "effects 1", "checkpoint 1",
			"write-begin 5", "write-end 5 account.a,job.j2,job.j3,job.j4,job.j5", "effects 5", "checkpoint 5",
		}
		if got := ops.all(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("flusher calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

func TestFoldWaitsForTheFlusherPastMaxBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops := &opLog{}
		store := &gateStore{ops: ops, gate: make(chan struct{})}
		log := &chanLog{c: make(chan scheduler.LogEntry)}
		svc, err := scheduler.New(scheduler.Config{Store: store, Lease: &fakeLease{}, CommandLog: log,
			Publisher: &opPublisher{ops: ops}, Hosts: fakeHosts{}, Logger: slog.New(&logRecords{}), MaxBatch: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		n := subjects.Default
		admin, err := wire.EncodeAdmin(n, ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: 1000})
		log.c <- logEntry(t, 1, admin, err)
		synctest.Wait()
		// The first batch's write waits: two more commands make the next
		// batch full, and the third is not read until the write ends.
		var sent [3]chan struct{}
		for i := range sent {
			m, err := wire.EncodeSubmit(n, ledger.Submit{Account: "a", ID: fmt.Sprintf("j%d", i), GPUs: 1, Cost: 1,
				Command: []string{"true"}, Walltime: time.Hour})
			sent[i] = make(chan struct{})
			go func() { log.c <- logEntry(t, uint64(i+2), m, err); close(sent[i]) }()
			synctest.Wait()
		}
		select {
		case <-sent[1]:
		default:
			cancel()
			t.Fatal("the second command after the first batch was not read while its write waited")
		}
		select {
		case <-sent[2]:
			cancel()
			t.Fatal("a third command was read into a batch of MaxBatch 2 while the flusher was busy")
		default:
		}
		store.gate <- struct{}{}
		synctest.Wait()
		select {
		case <-sent[2]:
		default:
			cancel()
			t.Fatal("the third command was not read once the flusher was free")
		}
		store.gate <- struct{}{}
		synctest.Wait()
		store.gate <- struct{}{}
		synctest.Wait()
		if got := ops.all(); got[len(got)-1] != "checkpoint 4" {
			t.Errorf("flusher calls end %q, want checkpoint 4: %q", got[len(got)-1], got)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// stuckLease is granted at once, and each renewal after the first waits
// until release is closed: Run's goroutine held up in a renewal whose answer
// is late.
type stuckLease struct {
	mu      sync.Mutex
	renews  int
	release chan struct{}
}

func (l *stuckLease) TryAcquire(context.Context) (bool, error) { return true, nil }
func (l *stuckLease) Release(context.Context) error            { return nil }
func (l *stuckLease) TTL() time.Duration                       { return time.Second }
func (l *stuckLease) Renew(ctx context.Context) error {
	l.mu.Lock()
	l.renews++
	first := l.renews == 1
	l.mu.Unlock()
	if first {
		return nil
	}
	select {
	case <-l.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestNoWriteOnceTheLeaseMayHaveLapsed: while Run's goroutine waits on a
// renewal past the lease's TTL, the flusher, whose write of the records
// was in flight, sends no effects and writes no checkpoint: a standby may
// hold the lease by then.
func TestNoWriteOnceTheLeaseMayHaveLapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops := &opLog{}
		store := &gateStore{ops: ops, gate: make(chan struct{})}
		log := &chanLog{c: make(chan scheduler.LogEntry)}
		lease := &stuckLease{release: make(chan struct{})}
		svc, err := scheduler.New(scheduler.Config{Store: store, Lease: lease, CommandLog: log,
			Publisher: &opPublisher{ops: ops}, Hosts: fakeHosts{}, Logger: slog.New(&logRecords{})})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		admin, err := wire.EncodeAdmin(subjects.Default, ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: 1000})
		log.c <- logEntry(t, 1, admin, err)
		synctest.Wait()
		time.Sleep(3 * time.Second) // virtual: renewals are due, and the second waits
		store.gate <- struct{}{}    // the write ends, the lease's TTL long past
		synctest.Wait()
		want := []string{"write-begin 1", "write-end 1 account.a"}
		if got := ops.all(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("flusher calls while the lease may have lapsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		close(lease.release)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}
