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
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	// stubborn writes wait for the gate whatever their context: a write
	// whose acknowledgements are on their way completes as the term ends.
	stubborn bool
	// fail, if set, is what each write returns once through the gate.
	fail error
}

func (s *gateStore) Load(context.Context) (*scheduler.View, error) {
	return &scheduler.View{State: ledger.New()}, nil
}

func (s *gateStore) Write(ctx context.Context, recs []scheduler.Record) error {
	var top uint64
	keys := make([]string, 0, len(recs))
	for _, r := range recs {
		top = max(top, r.Seq)
		if r.Delete {
			keys = append(keys, "-"+r.Key) // a removal
		} else {
			keys = append(keys, r.Key)
		}
	}
	s.ops.add("write-begin %d %s", top, strings.Join(keys, ","))
	if s.gate != nil {
		done := ctx.Done()
		if s.stubborn {
			done = nil
		}
		select {
		case <-s.gate:
		case <-done:
			return ctx.Err()
		}
	}
	if s.fail != nil {
		s.ops.add("write-failed %d %s", top, strings.Join(keys, ","))
		return s.fail
	}
	s.ops.add("write-end %d %s", top, strings.Join(keys, ","))
	return nil
}

func (s *gateStore) Checkpoint(_ context.Context, seq uint64) error {
	s.ops.add("checkpoint %d", seq)
	return nil
}

func (s *gateStore) Refuse(_ context.Context, seq uint64, _ string) error {
	s.ops.add("refuse %d", seq)
	return nil
}

// opPublisher records each publish of effects (messages whose id names a
// command's sequence), by the highest sequence among them, once it is
// stored. When gate is set, each publish of effects waits for a value on it
// first, whatever its context (its acknowledgements on their way).
type opPublisher struct {
	ops  *opLog
	gate chan struct{}
}

func (p *opPublisher) Publish(_ context.Context, msgs []wire.Message) (int, error) {
	var top uint64
	for _, m := range msgs {
		var seq uint64
		if _, err := fmt.Sscanf(m.MsgID, "%d.", &seq); err == nil {
			top = max(top, seq)
		}
	}
	if top > 0 {
		if p.gate != nil {
			<-p.gate
		}
		p.ops.add("effects %d", top)
	}
	return len(msgs), nil
}

// openGates lets every write and publish waiting on a gate through, one at
// a time, until none waits: the bubble is then idle.
func openGates(store *gateStore, pub *opPublisher) {
	for {
		synctest.Wait()
		select {
		case store.gate <- struct{}{}:
			continue
		default:
		}
		select {
		case pub.gate <- struct{}{}:
			continue
		default:
		}
		return
	}
}

// checkFlushes checks the order of the flusher's calls in ops (see
// flushViolations) and reports each violation as an error.
func checkFlushes(t *testing.T, ops []string) (checkpoints []uint64) {
	t.Helper()
	checkpoints, bad := flushViolations(ops)
	for _, b := range bad {
		t.Error(b)
	}
	return checkpoints
}

// flushViolations returns the checkpoints in ops, and how the order of the
// flusher's calls in ops breaks the rules: checkpoints rise; each is
// preceded, since the one before, by its own batch's effects; no batch's
// effects are sent before the checkpoint of the batch before; no key is
// written more than scheduler.MinLedgerHistory-1 times past the checkpoint
// (a load could not rewind it); and a removal (written "-key") is never
// past the checkpoint beside another write of its key (a load walks a key's
// history back only as far as its last removal). A checkpoint confirms
// only the writes at or below it: a later batch's write begun before it
// (stage 1 beside stage 2) is still past the checkpoint after it.
func flushViolations(ops []string) (checkpoints []uint64, bad []string) {
	type write struct {
		top     uint64 // the top sequence of the batch's write
		removal bool
	}
	var effects []uint64            // since the last checkpoint
	written := map[string][]write{} // key → its writes past the checkpoint
	for _, op := range ops {
		f := strings.Fields(op)
		var seq uint64
		if _, err := fmt.Sscan(f[1], &seq); err != nil {
			bad = append(bad, fmt.Sprintf("op %q: %v", op, err))
			continue
		}
		switch f[0] {
		case "checkpoint":
			if n := len(checkpoints); n > 0 && seq <= checkpoints[n-1] {
				bad = append(bad, fmt.Sprintf("checkpoint %d after checkpoint %d", seq, checkpoints[n-1]))
			}
			if len(effects) != 1 || effects[0] != seq {
				bad = append(bad, fmt.Sprintf("checkpoint %d after effects %v since the last one, want its own alone", seq, effects))
			}
			checkpoints, effects = append(checkpoints, seq), nil
			for k, ws := range written {
				ws = slices.DeleteFunc(ws, func(w write) bool { return w.top <= seq })
				if len(ws) == 0 {
					delete(written, k)
				} else {
					written[k] = ws
				}
			}
		case "effects":
			effects = append(effects, seq)
		case "write-begin":
			if len(f) < 3 {
				continue
			}
			for _, k := range strings.Split(f[2], ",") {
				key, removal := strings.CutPrefix(k, "-")
				ws := written[key]
				switch {
				case len(ws) > 0 && (removal || slices.ContainsFunc(ws, func(w write) bool { return w.removal })):
					bad = append(bad, fmt.Sprintf("%s written past the checkpoint beside a removal (%q)", key, op))
				case len(ws) >= scheduler.MinLedgerHistory-1:
					bad = append(bad, fmt.Sprintf("%s written %d times past the checkpoint (%q)", key, len(ws)+1, op))
				}
				written[key] = append(ws, write{top: seq, removal: removal})
			}
		}
	}
	return checkpoints, bad
}

// TestFlushViolationsKeepLaterWrites: a write of the next batch begun
// before the checkpoint of the one before stays past that checkpoint, so a
// third write of its key before the next checkpoint is a third version past
// it. The checker once cleared every write at each checkpoint, and passed
// such an order. A removal beside any other write past the checkpoint is a
// violation too.
func TestFlushViolationsKeepLaterWrites(t *testing.T) {
	t.Parallel()
	ok := []string{
		"write-begin 1 account.a", "write-end 1 account.a",
		"write-begin 3 job.j1,account.a", // batch 3 in stage 1 while batch 1 is in stage 2
		"effects 1", "checkpoint 1",
		"write-end 3 job.j1,account.a",
		"effects 3", "checkpoint 3",
		"write-begin 5 job.j1", "effects 5", "checkpoint 5",
		"write-begin 7 -job.j1", "effects 7", "checkpoint 7",
	}
	// A checkpoint confirms the writes at or below it, though a later
	// batch wrote the same key before it: a write after it is the second
	// past it, not the third (the checker once counted the key's writes
	// since it was last clear of them, and flagged this order).
	ok = append(ok,
		"write-begin 9 account.a", "write-end 9 account.a",
		"write-begin 11 account.a", "effects 9", "checkpoint 9", "write-end 11 account.a",
		"write-begin 12 account.a", "effects 11", "checkpoint 11", "write-end 12 account.a",
		"effects 12", "checkpoint 12")
	if cps, bad := flushViolations(ok); len(bad) > 0 || fmt.Sprint(cps) != "[1 3 5 7 9 11 12]" {
		t.Errorf("a good order: checkpoints %v, violations %q; want [1 3 5 7 9 11 12] and none", cps, bad)
	}
	thrice := []string{
		"write-begin 1 job.j1", "write-end 1 job.j1",
		"write-begin 3 job.j1",
		"write-begin 4 job.j1", // job.j1 again before checkpoint 1: with 1 and 3, three versions past checkpoint 0
		"effects 1", "checkpoint 1", "effects 3", "checkpoint 3",
	}
	if _, bad := flushViolations(thrice); len(bad) != 1 || !strings.Contains(bad[0], "job.j1 written 3 times") {
		t.Errorf("job.j1 written at 1, 3 and 4 before any checkpoint: violations %q, want job.j1 written 3 times", bad)
	}
	removed := []string{
		"write-begin 1 job.j1", "write-end 1 job.j1",
		"write-begin 3 -job.j1", // removed while its write at 1 is past the checkpoint
		"effects 1", "checkpoint 1", "effects 3", "checkpoint 3",
		"write-begin 5 -job.j2", "write-end 5 -job.j2",
		"write-begin 7 job.j2", // put again while its removal at 5 is past the checkpoint
		"effects 5", "checkpoint 5", "effects 7", "checkpoint 7",
	}
	if _, bad := flushViolations(removed); len(bad) != 2 || !strings.Contains(bad[0], "job.j1 written past the checkpoint beside a removal") ||
		!strings.Contains(bad[1], "job.j2 written past the checkpoint beside a removal") {
		t.Errorf("removals beside writes past the checkpoint: violations %q, want one for job.j1 and one for job.j2", bad)
	}
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
		if got := ops.all(); len(got) != 1 || got[0] != "write-begin 1 account.a" {
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
		// Stage 1 was busy with the first batch all along: the four go
		// out together once it is free.
		openGates(store, &opPublisher{})
		got := ops.all()
		if cps := checkFlushes(t, got); fmt.Sprint(cps) != "[1 5]" {
			t.Errorf("checkpoints %v, want [1 5]\n%s", cps, strings.Join(got, "\n"))
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
		// batch full, and the third is not read until the write ends
		// (stage 1 is free then).
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
			t.Fatal("a third command was read into a batch of MaxBatch 2 while stage 1 was busy")
		default:
		}
		store.gate <- struct{}{}
		synctest.Wait()
		select {
		case <-sent[2]:
		default:
			cancel()
			t.Fatal("the third command was not read once stage 1 was free")
		}
		openGates(store, &opPublisher{})
		got := ops.all()
		if cps := checkFlushes(t, got); fmt.Sprint(cps) != "[1 3 4]" {
			t.Errorf("checkpoints %v, want [1 3 4]\n%s", cps, strings.Join(got, "\n"))
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
		want := []string{"write-begin 1 account.a", "write-end 1 account.a"}
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

// pipelineRun is a service over a gateStore and an opPublisher, each gated,
// with its Run under way; submit feeds it command seq (2 onwards: the
// account was created at 1).
type pipelineRun struct {
	ops   *opLog
	store *gateStore
	pub   *opPublisher
	log   *chanLog
	done  chan error
}

func startPipeline(t *testing.T, ctx context.Context, hooks scheduler.Hooks) *pipelineRun {
	t.Helper()
	ops := &opLog{}
	r := &pipelineRun{ops: ops, store: &gateStore{ops: ops, gate: make(chan struct{}), stubborn: true},
		pub: &opPublisher{ops: ops, gate: make(chan struct{})}, log: &chanLog{c: make(chan scheduler.LogEntry)}, done: make(chan error, 1)}
	svc, err := scheduler.New(scheduler.Config{Store: r.store, Lease: &fakeLease{}, CommandLog: r.log,
		Publisher: r.pub, Hosts: fakeHosts{}, Logger: slog.New(&logRecords{}), Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- svc.Run(ctx) }()
	admin, err := wire.EncodeAdmin(subjects.Default, ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: 1000})
	r.log.c <- logEntry(t, 1, admin, err)
	synctest.Wait()
	return r
}

func (r *pipelineRun) submit(t *testing.T, seq uint64) {
	t.Helper()
	m, err := wire.EncodeSubmit(subjects.Default, ledger.Submit{Account: "a", ID: fmt.Sprintf("j%d", seq), GPUs: 1, Cost: 1,
		Command: []string{"true"}, Walltime: time.Hour})
	r.log.c <- logEntry(t, seq, m, err)
	synctest.Wait()
}

// TestRecordsAreWrittenWhileTheBatchBeforeSendsItsEffects: while a batch's
// effects wait for their acknowledgements, the next batch's records are
// written, the account's too, though the batch in flight also wrote it (a
// second version past the checkpoint, which a load can rewind).
func TestRecordsAreWrittenWhileTheBatchBeforeSendsItsEffects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		r := startPipeline(t, ctx, scheduler.Hooks{})
		r.store.gate <- struct{}{} // batch 1's records; its effects wait
		r.submit(t, 2)
		r.store.gate <- struct{}{} // batch 2's records
		synctest.Wait()
		want := []string{"write-begin 1 account.a", "write-end 1 account.a", "write-begin 2 account.a,job.j2", "write-end 2 account.a,job.j2"}
		if got := r.ops.all(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("while batch 1's effects wait:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		openGates(r.store, r.pub)
		got := r.ops.all()
		if cps := checkFlushes(t, got); fmt.Sprint(cps) != "[1 2]" {
			t.Errorf("checkpoints %v, want [1 2]\n%s", cps, strings.Join(got, "\n"))
		}
		if i, j := slices.Index(got, "write-end 2 account.a,job.j2"), slices.Index(got, "effects 2"); i < 0 || j < i {
			t.Errorf("batch 2's effects before its records:\n%s", strings.Join(got, "\n"))
		}
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}

// TestAFailedBatchStopsTheOneBesideIt: when one of the two batches in flight
// fails, the other writes nothing more, though the write or publish it had
// under way completes: no record, effect or checkpoint of it lands past the
// failure, as none would after a crash there. (The fakes finish what was
// under way whatever the term's context, as acknowledgements already on
// their way do.)
func TestAFailedBatchStopsTheOneBesideIt(t *testing.T) {
	crash := errors.New("crash")
	for _, tc := range []struct {
		name string
		// hooks fail a batch at seq; run drives the service to the
		// failure, and returns the ops logged by then.
		hooks func(fail *atomic.Bool) scheduler.Hooks
		run   func(t *testing.T, r *pipelineRun, fail *atomic.Bool)
		want  []string // ops at the failure
	}{{
		// Batch 1 fails after its effects, as batch 2's records are
		// written.
		name: "the earlier fails",
		hooks: func(fail *atomic.Bool) scheduler.Hooks {
			return scheduler.Hooks{AfterEffects: func(seq uint64) error {
				if fail.Load() {
					return crash
				}
				return nil
			}}
		},
		run: func(t *testing.T, r *pipelineRun, fail *atomic.Bool) {
			r.store.gate <- struct{}{} // batch 1's records; its effects wait
			r.submit(t, 2)             // batch 2's records begin, and wait
			fail.Store(true)
			r.pub.gate <- struct{}{} // batch 1's effects: then it fails
			synctest.Wait()
		},
		want: []string{"write-begin 1 account.a", "write-end 1 account.a", "write-begin 2 account.a,job.j2", "effects 1"},
	}, {
		// Batch 2 is cut in its records, as batch 1's effects are sent.
		name: "the later fails",
		hooks: func(fail *atomic.Bool) scheduler.Hooks {
			return scheduler.Hooks{CutPersist: func(seq uint64, n int) int {
				if fail.Load() {
					return 0
				}
				return n
			}}
		},
		run: func(t *testing.T, r *pipelineRun, fail *atomic.Bool) {
			r.store.gate <- struct{}{} // batch 1's records; its effects wait
			fail.Store(true)
			r.submit(t, 2) // batch 2 is cut before its first record
		},
		want: []string{"write-begin 1 account.a", "write-end 1 account.a"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var fail atomic.Bool
				r := startPipeline(t, context.Background(), tc.hooks(&fail))
				tc.run(t, r, &fail)
				if got := r.ops.all(); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
					t.Errorf("at the failure:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
				}
				// What was under way completes; nothing follows it.
				var err error
				for waiting := true; waiting; {
					select {
					case err = <-r.done:
						waiting = false
					case r.store.gate <- struct{}{}:
					case r.pub.gate <- struct{}{}:
					}
				}
				if !errors.Is(err, scheduler.ErrStopped) {
					t.Errorf("Run = %v, want ErrStopped", err)
				}
				got := r.ops.all()
				for _, op := range got[len(tc.want):] {
					if op != "write-end 2 account.a,job.j2" && op != "effects 1" {
						t.Errorf("written past the failure: %q (all: %q)", op, got)
					}
				}
			})
		})
	}
}

// TestNoRefusalOnceTheLeaseMayHaveLapsed: a term whose write is refused for
// its size ends, and the command is to be refused by the next term; but if
// the lease may have lapsed by then (the scheduler's clock past the TTL of
// its last renewal), the refusal is not recorded: a standby may lead, and
// the next term meets the command again.
func TestNoRefusalOnceTheLeaseMayHaveLapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ops := &opLog{}
		store := &gateStore{ops: ops, gate: make(chan struct{}),
			fail: &scheduler.TooLargeError{What: "account.a", Seq: 1, Err: scheduler.ErrTooLarge}}
		log := &chanLog{c: make(chan scheduler.LogEntry)}
		var skew atomic.Int64
		svc, err := scheduler.New(scheduler.Config{Store: store, Lease: &fakeLease{}, CommandLog: log,
			Publisher: &opPublisher{ops: ops}, Hosts: fakeHosts{}, Logger: slog.New(&logRecords{}),
			NowFunc: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		admin, err := wire.EncodeAdmin(subjects.Default, ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: 1000})
		log.c <- logEntry(t, 1, admin, err)
		synctest.Wait()
		skew.Store(int64(time.Minute)) // the renewals' TTL long past, by the scheduler's clock
		store.gate <- struct{}{}       // the write is refused for its size
		synctest.Wait()
		want := []string{"write-begin 1 account.a", "write-failed 1 account.a"}
		if got := ops.all(); strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("calls once the lease may have lapsed:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	})
}
