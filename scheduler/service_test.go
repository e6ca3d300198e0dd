// Tests of Service.Run through outages, with small fakes of its seams (no
// NATS) inside testing/synctest bubbles, so every backoff and wait passes in
// virtual time and nothing is timed by the wall clock. The properties: Run
// keeps contending while the lease cannot be reached and logs that once; a
// term that fails (the view not loaded, the lease not renewed, the follower
// stuck) steps down and contends again; a gap in the log ends Run only when
// it is found at the same place term after term; a misconfigured lease ends
// it at once, explained.
package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

var errTimeout = errors.New("context deadline exceeded")

// fakeLease answers TryAcquire from a script: each entry is an error to
// return, nil to be granted the lease, or errHeld for "another holds it".
// Past the script it grants the lease. Renew fails while renewFails is set.
type fakeLease struct {
	mu         sync.Mutex
	script     []error
	tries      int
	releases   int
	renewFails bool
	// failRenewals fails that many renewals (then renewals pass);
	// renewals counts those that passed.
	failRenewals int
	renewals     int
}

var errHeld = errors.New("held by another")

func (l *fakeLease) TryAcquire(context.Context) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tries++
	if len(l.script) == 0 {
		return true, nil
	}
	err := l.script[0]
	l.script = l.script[1:]
	switch {
	case errors.Is(err, errHeld):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

func (l *fakeLease) Renew(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.renewFails {
		return errTimeout
	}
	if l.failRenewals > 0 {
		l.failRenewals--
		return errTimeout
	}
	l.renewals++
	return nil
}

func (l *fakeLease) Release(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releases++
	return nil
}

func (l *fakeLease) TTL() time.Duration { return time.Second }

// fakeStore loads the state view after failing loadFails times.
type fakeStore struct {
	mu        sync.Mutex
	loadFails int
	loads     int
	view      func() *scheduler.View
	// delay is how long each load takes, unless its ctx ends first;
	// abandoned are the causes of the loads cut short.
	delay     time.Duration
	abandoned []error
}

func (s *fakeStore) Load(ctx context.Context) (*scheduler.View, error) {
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			s.mu.Lock()
			s.abandoned = append(s.abandoned, context.Cause(ctx))
			s.mu.Unlock()
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loads++
	if s.loads <= s.loadFails {
		return nil, errTimeout
	}
	if s.view != nil {
		return s.view(), nil
	}
	return &scheduler.View{State: ledger.New()}, nil
}

func (s *fakeStore) Write(context.Context, []scheduler.Record) error { return nil }
func (s *fakeStore) Checkpoint(context.Context, uint64) error        { return nil }
func (s *fakeStore) Refuse(context.Context, uint64, string) error    { return nil }

// fakeLog gives each follower the entries entries(term, after) returns.
type fakeLog struct {
	mu      sync.Mutex
	terms   int
	entries func(term int, after uint64) []scheduler.LogEntry
}

type fakeFollower struct{ c chan scheduler.LogEntry }

func (f *fakeFollower) C() <-chan scheduler.LogEntry { return f.c }
func (f *fakeFollower) Err() error                   { return nil }
func (f *fakeFollower) Stop()                        {}

func (l *fakeLog) Follow(_ context.Context, after uint64) (scheduler.Follower, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.terms++
	f := &fakeFollower{c: make(chan scheduler.LogEntry, 16)}
	if l.entries != nil {
		for _, e := range l.entries(l.terms, after) {
			f.c <- e
		}
	}
	return f, nil
}

func (l *fakeLog) Trim(context.Context, uint64) error { return nil }

// fakePublisher stores what it is given, after failing its first fails
// calls.
type fakePublisher struct {
	mu    sync.Mutex
	fails int
	calls int
	msgs  []wire.Message
	// dups makes every message one the server already had.
	dups bool
}

func (p *fakePublisher) Publish(_ context.Context, msgs []wire.Message) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if p.calls <= p.fails {
		return 0, errTimeout
	}
	p.msgs = append(p.msgs, msgs...)
	if p.dups {
		return 0, nil
	}
	return len(msgs), nil
}

// fakeHosts reports the given heartbeats and then nothing until ctx ends.
type fakeHosts struct{ hosts []wire.Heartbeat }

func (h fakeHosts) Watch(ctx context.Context) (<-chan scheduler.HostUpdate, error) {
	c := make(chan scheduler.HostUpdate, len(h.hosts))
	for i := range h.hosts {
		c <- scheduler.HostUpdate{Name: h.hosts[i].Host, Host: &h.hosts[i]}
	}
	return c, nil
}

// logRecords keeps every message logged, by level.
type logRecords struct {
	mu   sync.Mutex
	msgs []string // "LEVEL message"
}

func (r *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecords) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Level.String()+" "+rec.Message)
	return nil
}
func (r *logRecords) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecords) WithGroup(string) slog.Handler      { return r }

// all returns every record logged so far.
func (r *logRecords) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}

// count is how many records were "LEVEL message".
func (r *logRecords) count(levelAndMsg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if m == levelAndMsg {
			n++
		}
	}
	return n
}

type service struct {
	lease  *fakeLease
	store  *fakeStore
	log    *fakeLog
	pub    *fakePublisher
	hosts  fakeHosts
	logs   *logRecords
	leads  chan struct{}
	done   chan error
	cancel context.CancelFunc
}

// runService starts Run over s's fakes; it must be called inside a bubble.
func runService(t *testing.T, s *service) {
	t.Helper()
	if s.lease == nil {
		s.lease = &fakeLease{}
	}
	if s.store == nil {
		s.store = &fakeStore{}
	}
	if s.log == nil {
		s.log = &fakeLog{}
	}
	if s.pub == nil {
		s.pub = &fakePublisher{}
	}
	s.logs = &logRecords{}
	s.leads, s.done = make(chan struct{}, 100), make(chan error, 1)
	svc, err := scheduler.New(scheduler.Config{Store: s.store, Lease: s.lease, CommandLog: s.log, Publisher: s.pub, Hosts: s.hosts,
		Logger: slog.New(s.logs), StepDownWait: 100 * time.Millisecond,
		Hooks: scheduler.Hooks{Leading: func() { s.leads <- struct{}{} }}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go func() { s.done <- svc.Run(ctx) }()
}

// waitLead waits for Run to begin a term. The deadline is in the bubble's
// virtual time: it only turns a regression that never leads into a failure
// rather than a test that runs forever.
func (s *service) waitLead(t *testing.T) {
	t.Helper()
	select {
	case <-s.leads:
	case <-time.After(time.Hour):
		s.cancel() // so Run ends and the bubble can
		t.Fatalf("no term began within an hour of virtual time; logs: %v", s.logs.all())
	}
}

// returned waits for Run to return by itself and returns its error.
func (s *service) returned(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(time.Hour):
		s.cancel()
		t.Fatalf("Run did not return within an hour of virtual time; logs: %v", s.logs.all())
	}
	return nil
}

// stop cancels Run and returns what it returned.
func (s *service) stop() error {
	s.cancel()
	return <-s.done
}

// stillRunning fails the test if Run has returned.
func (s *service) stillRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.done:
		t.Fatalf("Run returned %v", err)
	default:
	}
}

func TestRunRidesOutAnUnreachableLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Unreachable for a long while, then held by another, then ours.
		var script []error
		for range 40 {
			script = append(script, errTimeout)
		}
		script = append(script, errHeld, errHeld, errTimeout, errTimeout)
		s := &service{lease: &fakeLease{script: script}}
		start := time.Now()
		runService(t, s)
		s.waitLead(t)
		t.Logf("led after %v of virtual time and %d tries", time.Since(start), s.lease.tries)
		if got := s.logs.count("WARN cannot reach the lease; retrying"); got != 2 {
			t.Errorf("logged 'cannot reach the lease' %d times, want once per spell (2): %v", got, s.logs.all())
		}
		if got := s.logs.count("INFO lease reachable again"); got != 2 {
			t.Errorf("logged 'lease reachable again' %d times, want 2", got)
		}
		if got := s.logs.count("INFO another scheduler leads; standing by"); got != 1 {
			t.Errorf("logged 'standing by' %d times, want 1", got)
		}
		if got := s.logs.count("INFO leading"); got != 1 {
			t.Errorf("logged 'leading' %d times, want 1", got)
		}
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v after ctx ended, want nil", err)
		}
	})
}

func TestRunStopsOnAMisconfiguredLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := errors.Join(scheduler.ErrMisconfigured, errors.New("per-message TTL is disabled"))
		s := &service{lease: &fakeLease{script: []error{errTimeout, bad}}}
		runService(t, s)
		err := s.returned(t)
		if !errors.Is(err, scheduler.ErrMisconfigured) || !strings.Contains(err.Error(), "TTL is disabled") {
			t.Errorf("Run = %v, want the misconfiguration explained", err)
		}
		if got := s.logs.count("ERROR cannot contend for the leader lease; stopping"); got != 1 {
			t.Errorf("logged the stop %d times: %v", got, s.logs.all())
		}
	})
}

// TestFailedTermsStepDownAndContendAgain: terms whose view cannot be loaded
// (the store timing out while the server is away), or whose lease cannot be
// renewed, end; Run contends again and leads once they can, logging the
// first failure, not each one.
func TestFailedTermsStepDownAndContendAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &service{store: &fakeStore{loadFails: 6}}
		runService(t, s)
		s.waitLead(t)
		s.stillRunning(t)
		if s.store.loads != 7 || s.lease.releases != 6 {
			t.Errorf("%d loads, %d releases; want 7 loads, the lease released after each of the 6 failed", s.store.loads, s.lease.releases)
		}
		if got := s.logs.count("WARN stepped down; contending again"); got != 1 {
			t.Errorf("logged 'stepped down' %d times, want once: %v", got, s.logs.all())
		}
		if got := s.logs.count("DEBUG stepped down again"); got != 5 {
			t.Errorf("logged 'stepped down again' %d times at debug, want 5", got)
		}
		// The lease cannot be renewed for a while: terms end, and once it
		// can, one leads steadily.
		releases := func() int {
			s.lease.mu.Lock()
			defer s.lease.mu.Unlock()
			return s.lease.releases
		}
		setRenewFails := func(v bool) {
			s.lease.mu.Lock()
			s.lease.renewFails = v
			s.lease.mu.Unlock()
		}
		setRenewFails(true)
		time.Sleep(5 * time.Second) // virtual: renewals fall due and fail
		if got := releases(); got <= 6 {
			t.Fatalf("%d releases: no term ended while its lease could not be renewed", got)
		}
		setRenewFails(false)
		time.Sleep(20 * time.Second) // past the longest wait between terms
		for len(s.leads) > 0 {
			s.waitLead(t)
		}
		steady := releases()
		time.Sleep(10 * time.Second)
		if got := releases(); got != steady || len(s.leads) != 0 {
			t.Errorf("terms still ending once the lease renews: %d releases, then %d", steady, got)
		}
		s.stillRunning(t)
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// TestLogGap: a gap found once is retried by a new term, which may find the
// log whole; a gap found at the same place term after term ends Run with
// ErrLogGap, and the log says which entries are missing.
func TestLogGap(t *testing.T) {
	gapEntry := func(after uint64) []scheduler.LogEntry {
		return []scheduler.LogEntry{{Seq: after + 3, Time: time.Now(), Subject: "gpuq.cmd.sched.admit", Data: []byte("{}")}}
	}
	synctest.Test(t, func(t *testing.T) {
		once := &fakeLog{entries: func(term int, after uint64) []scheduler.LogEntry {
			if term == 1 {
				return gapEntry(after)
			}
			return nil
		}}
		s := &service{log: once}
		runService(t, s)
		s.waitLead(t)
		s.waitLead(t)
		time.Sleep(5 * time.Second)
		s.stillRunning(t)
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := &service{log: &fakeLog{entries: func(int, uint64) []scheduler.LogEntry { return gapEntry(0) }}}
		runService(t, s)
		err := s.returned(t)
		if !errors.Is(err, scheduler.ErrLogGap) || !strings.Contains(err.Error(), "entries 1 to 2 are missing") {
			t.Errorf("Run = %v, want ErrLogGap naming entries 1 to 2", err)
		}
		if s.log.terms != 3 {
			t.Errorf("gave up after %d terms, want 3", s.log.terms)
		}
		if got := s.logs.count("ERROR the command log has lost entries the ledger has not applied; no scheduler can fold past them, so this one stops (restore the entries, or rebuild the ledger from a log that has them)"); got != 1 {
			t.Errorf("logged the gap %d times at error: %v", got, s.logs.all())
		}
	})
}

// pendingJobView is a ledger with one pending job, and hosts with room for
// it: the first decision round dispatches it.
func pendingJobView() *scheduler.View {
	st := ledger.New()
	st.Apply(ledger.Admin{Account: "a", ID: "c", Op: ledger.OpCreate, Balance: 10}, 1, time.Now())
	st.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: 1, Command: []string{"x"}}, 2, time.Now())
	return &scheduler.View{State: st, Checkpoint: 2}
}

var oneGPU = fakeHosts{hosts: []wire.Heartbeat{{Host: "h", Devices: []wire.Device{{UUID: "g", Healthy: true}}}}}

// TestPublishFailuresAreLoggedOnce: a leader whose decisions cannot be
// published keeps deciding, and says so once, and once when it can again.
func TestPublishFailuresAreLoggedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &service{store: &fakeStore{view: pendingJobView}, hosts: oneGPU, pub: &fakePublisher{fails: 5}}
		runService(t, s)
		s.waitLead(t)
		time.Sleep(10 * time.Second) // virtual: decision rounds every DecideInterval
		s.pub.mu.Lock()
		calls, stored := s.pub.calls, len(s.pub.msgs)
		s.pub.mu.Unlock()
		if calls <= 5 || stored == 0 {
			t.Fatalf("%d publishes, %d messages stored; want the dispatch stored after 5 failures", calls, stored)
		}
		if got := s.logs.count("WARN cannot publish decisions; deciding again later"); got != 1 {
			t.Errorf("logged the publish failure %d times at warn, want once: %v", got, s.logs.all())
		}
		if got := s.logs.count("INFO publishing decisions again"); got != 1 {
			t.Errorf("logged the recovery %d times, want once", got)
		}
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// TestDuplicateDecisionsAreNoStall: decisions the log already had (the
// server answers them as duplicates) bring nothing back through the
// follower, so a term that hears nothing after them is not stuck and keeps
// leading.
func TestDuplicateDecisionsAreNoStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &service{store: &fakeStore{view: pendingJobView}, hosts: oneGPU, pub: &fakePublisher{dups: true}}
		runService(t, s)
		s.waitLead(t)
		time.Sleep(45 * time.Second) // three times the 15s a stuck follower is given
		synctest.Wait()
		s.stillRunning(t)
		if s.log.terms != 1 {
			t.Errorf("followed the log %d times, want the one term to go on", s.log.terms)
		}
		s.pub.mu.Lock()
		n := len(s.pub.msgs)
		s.pub.mu.Unlock()
		if n == 0 {
			t.Error("no decision was published")
		}
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// TestStuckFollowerEndsTheTerm: a term that stored decisions on the log and
// then hears nothing from its follower takes it for stuck, steps down, and
// a new term follows the log afresh.
func TestStuckFollowerEndsTheTerm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &service{store: &fakeStore{view: pendingJobView}, hosts: oneGPU}
		runService(t, s)
		s.waitLead(t)
		s.waitLead(t) // the first term stored its dispatch; nothing came back
		s.stillRunning(t)
		if s.log.terms < 2 {
			t.Errorf("followed the log %d times, want a new follower for the new term", s.log.terms)
		}
		s.pub.mu.Lock()
		n := len(s.pub.msgs)
		s.pub.mu.Unlock()
		if n == 0 {
			t.Error("no decision was published")
		}
		if err := s.stop(); err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}
