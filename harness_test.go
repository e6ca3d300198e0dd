package gpuq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestMain serves the nats-server of a child process when this binary is
// one (natstest.StartChild, -bench.child), and runs the tests otherwise.
func TestMain(m *testing.M) {
	if natstest.ServeChild() {
		return
	}
	os.Exit(m.Run())
}

// cluster is one embedded nats-server with gpuq's streams and buckets, and
// the helpers a test needs to play pipeline, admin and worker against the
// real scheduler.
type cluster struct {
	t      testing.TB
	srv    *natstest.Server
	nc     *nats.Conn
	js     jetstream.JetStream
	n      subjects.Names
	c      *client.Client
	ledger jetstream.KeyValue
	hosts  jetstream.KeyValue
}

func newCluster(t testing.TB) *cluster {
	t.Helper()
	return newClusterOn(t, natstest.Start(t), natsbus.SetupConfig{})
}

// sched is a running scheduler service.
type sched struct {
	name    string
	nc      *nats.Conn // its own connection; closing it cuts the scheduler off as a kill would
	cancel  context.CancelFunc
	done    chan error
	leading atomic.Int32 // terms begun
	ended   atomic.Int32 // terms ended: the service stepped down or stopped
	// began and left get a value each time a term begins or ends, while
	// they have room, for waitLeading and waitLeft.
	began, left chan struct{}
	log         *followLog
}

type schedOpts struct {
	hooks scheduler.Hooks
	core  scheduler.CoreConfig
	facts scheduler.FactStore // in place of the facts bucket
	// store, if set, wraps the ledger store (a slow load, a count of
	// writes).
	store func(scheduler.Store) scheduler.Store
	// tune, if set, changes the service's config last (benchmarks restore
	// production timings with it).
	tune func(*scheduler.Config)
}

// startScheduler runs a scheduler service with test timings until stopped or
// the test ends.
func (c *cluster) startScheduler(name string, o schedOpts) *sched {
	c.t.Helper()
	nc, js := c.srv.JetStream(c.t)
	ctx := context.Background()
	lkv, err := js.KeyValue(ctx, c.n.LedgerBucket())
	if err != nil {
		c.t.Fatal(err)
	}
	hkv, err := js.KeyValue(ctx, c.n.HostsBucket())
	if err != nil {
		c.t.Fatal(err)
	}
	fkv, err := js.KeyValue(ctx, c.n.FactsBucket())
	if err != nil {
		c.t.Fatal(err)
	}
	lease, err := natsstore.NewLease(js, lkv, name, time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	var facts scheduler.FactStore = natsbus.NewFacts(fkv)
	if o.facts != nil {
		facts = o.facts
	}
	var store scheduler.Store = natsstore.New(js, lkv)
	if o.store != nil {
		store = o.store(store)
	}
	s := &sched{name: name, nc: nc, done: make(chan error, 1), began: make(chan struct{}, 16), left: make(chan struct{}, 16),
		log: &followLog{CommandLog: natsbus.NewCommandLog(js, c.n)}}
	hooks := o.hooks
	prev := hooks.Leading
	hooks.Leading = func() {
		s.leading.Add(1)
		notify(s.began)
		if prev != nil {
			prev()
		}
	}
	if o.core.UnplaceableAfter == 0 {
		o.core.UnplaceableAfter = -1
	}
	if o.core.Retry.Initial == 0 {
		o.core.Retry.Initial = 100 * time.Millisecond
	}
	log := slog.New(slog.NewTextHandler(tOutput{c.t, name}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := scheduler.Config{
		Store: store, CommandLog: s.log,
		Lease:     &watchedLease{Lease: lease, released: func() { s.ended.Add(1); notify(s.left) }},
		Publisher: natsbus.NewPublisher(js), Hosts: natsbus.NewHosts(hkv, log),
		Names: c.n, Core: o.core, Logger: log, DecideInterval: 20 * time.Millisecond,
		StepDownWait: 50 * time.Millisecond, Hooks: hooks, Facts: facts, Name: name, FactInterval: 20 * time.Millisecond,
	}
	if o.tune != nil {
		o.tune(&cfg)
	}
	svc, err := scheduler.New(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	go func() { s.done <- svc.Run(ctx) }()
	c.t.Cleanup(func() {
		if err := s.stop(c.t); err != nil {
			c.t.Errorf("scheduler %s: %v", s.name, err)
		}
	})
	return s
}

// stop cancels the scheduler and waits for Run to return.
func (s *sched) stop(t testing.TB) error {
	t.Helper()
	s.cancel()
	return s.wait(t, 10*time.Second)
}

// wait waits up to d for Run to return and returns its error; once Run has
// returned, wait returns nil at once.
func (s *sched) wait(t testing.TB, d time.Duration) error {
	t.Helper()
	select {
	case err, ok := <-s.done:
		if ok {
			close(s.done)
			return err
		}
		return nil
	case <-time.After(d):
		t.Fatalf("scheduler %s did not stop within %v", s.name, d)
	}
	return nil
}

// waitLeading waits up to d for the scheduler to begin a term not waited
// for yet.
func (s *sched) waitLeading(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-s.began:
	case <-time.After(d):
		t.Fatalf("scheduler %s did not lead within %v", s.name, d)
	}
}

// waitLeft waits up to d for the scheduler to end a term not waited for
// yet, giving the lease up.
func (s *sched) waitLeft(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-s.left:
	case <-time.After(d):
		t.Fatalf("scheduler %s did not step down within %v", s.name, d)
	}
}

// notify sends on ch unless it is full.
func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// followLog is the command log, remembering the scheduler's latest follower
// so a test can see how many entries it has received and not yet folded.
type followLog struct {
	scheduler.CommandLog
	mu  sync.Mutex
	fol scheduler.Follower
}

func (l *followLog) Follow(ctx context.Context, after uint64) (scheduler.Follower, error) {
	f, err := l.CommandLog.Follow(ctx, after)
	if err == nil {
		l.mu.Lock()
		l.fol = f
		l.mu.Unlock()
	}
	return f, err
}

// buffered is how many entries the latest follower holds unread.
func (l *followLog) buffered() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fol == nil {
		return 0
	}
	return len(l.fol.C())
}

// watchedLease is the leader lease, calling released when the service gives
// it up at the end of a term. The service releases the lease whenever a
// term ends, on stepping down or on stopping, except when a test hook
// stopped it as a crash would.
type watchedLease struct {
	scheduler.Lease
	released func()
}

func (l *watchedLease) Release(ctx context.Context) error {
	l.released() // first, so no standby can lead before the count moves
	return l.Lease.Release(ctx)
}

// tOutput sends a scheduler's logs to the test's output, tagged with its name.
type tOutput struct {
	t    testing.TB
	name string
}

func (o tOutput) Write(p []byte) (int, error) {
	o.t.Logf("[%s] %s", o.name, strings.TrimSpace(string(p)))
	return len(p), nil
}

func (c *cluster) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	c.t.Cleanup(cancel)
	return ctx
}

// createAccount creates an account through an admin command.
func (c *cluster) createAccount(id string, balance ledger.Credits) {
	c.t.Helper()
	c.createAccountWith(c.c, id, balance)
}

// createAccountWith creates account id with balance through cl.
func (c *cluster) createAccountWith(cl *client.Client, id string, balance ledger.Credits) {
	c.t.Helper()
	ev, err := cl.Admin(c.ctx(), ledger.Admin{Account: id, ID: "create-" + id, Op: ledger.OpCreate, Balance: balance})
	if err != nil || ev.Type != ledger.EventCreated {
		c.t.Fatalf("create account %s: %+v, %v", id, ev, err)
	}
}

// createAccountAlone creates account id as createAccount does, through a
// client on a connection of its own that it closes after: the client keeps
// a follower of the account's events for a while after a call (so that the
// next call reuses it), and a benchmark measures the scheduler and its
// server, not a reader of every event of the account.
func (c *cluster) createAccountAlone(id string, balance ledger.Credits) {
	c.t.Helper()
	nc := c.srv.Connect(c.t)
	defer nc.Close()
	cl, err := client.New(nc, client.WithTimeout(20*time.Second))
	if err != nil {
		c.t.Fatal(err)
	}
	c.createAccountWith(cl, id, balance)
}

// registerHost writes a heartbeat for host with gpus healthy simulated GPUs,
// as a worker does.
func (c *cluster) registerHost(host string, gpus int) {
	c.t.Helper()
	h := wire.Heartbeat{Host: host, Simulated: true, Time: time.Now()}
	for i := range gpus {
		h.Devices = append(h.Devices, wire.Device{UUID: fmt.Sprintf("GPU-%s-%d", host, i), Model: "simulated", Healthy: true})
	}
	data, err := wire.EncodeHeartbeat(h)
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.hosts.Put(c.ctx(), host, data); err != nil {
		c.t.Fatal(err)
	}
}

// orderReader reads the orders of one host, as its worker's durable consumer does.
type orderReader struct {
	c    *cluster
	host string
	cons jetstream.Consumer
}

func (c *cluster) worker(host string) *orderReader {
	c.t.Helper()
	cons, err := c.js.CreateOrUpdateConsumer(c.ctx(), c.n.DispatchStream(), jetstream.ConsumerConfig{
		Durable: natsbus.ConsumerName(host), FilterSubject: c.n.Dispatch(host), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: 30 * time.Second, MaxDeliver: -1, MaxAckPending: 100,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return &orderReader{c: c, host: host, cons: cons}
}

// next waits for the host's next order and acks it.
func (w *orderReader) next() ledger.Effect {
	w.c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		batch, err := w.cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			w.c.t.Fatal(err)
		}
		for m := range batch.Messages() {
			o, _, err := wire.DecodeOrder(w.host, m.Data())
			if err != nil {
				w.c.t.Fatalf("order for %s: %v", w.host, err)
			}
			if err := m.Ack(); err != nil {
				w.c.t.Fatal(err)
			}
			return o
		}
	}
	w.c.t.Fatalf("no order for %s within 15s", w.host)
	return nil
}

// none checks that no order arrives for the host within d.
func (w *orderReader) none(d time.Duration) {
	w.c.t.Helper()
	batch, err := w.cons.Fetch(1, jetstream.FetchMaxWait(d))
	if err != nil {
		w.c.t.Fatal(err)
	}
	for m := range batch.Messages() {
		w.c.t.Fatalf("unexpected order for %s: %s", w.host, m.Data())
	}
}

// nextDispatch waits for the next order and fails unless it dispatches job.
func (w *orderReader) nextDispatch(job string) ledger.DispatchOrder {
	w.c.t.Helper()
	o := w.next()
	d, ok := o.(ledger.DispatchOrder)
	if !ok || d.Job != job {
		w.c.t.Fatalf("%s got order %+v, want a dispatch of %s", w.host, o, job)
	}
	return d
}

// report publishes a worker report, as the worker does.
func (c *cluster) report(r ledger.Report) {
	c.t.Helper()
	msg, err := wire.EncodeReport(c.n, r)
	if err != nil {
		c.t.Fatal(err)
	}
	c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
}

// start reports a dispatch started on devices named after the host.
func (w *orderReader) start(d ledger.DispatchOrder) {
	devs := make([]string, d.GPUs)
	for i := range devs {
		devs[i] = fmt.Sprintf("GPU-%s-%d", w.host, i)
	}
	w.c.report(ledger.Report{Type: ledger.ReportStarted, Host: w.host, Job: d.Job, Attempt: d.Attempt, Devices: devs})
}

// finish reports a dispatch done with exit code.
func (w *orderReader) finish(d ledger.DispatchOrder, code int) {
	w.c.report(ledger.Report{Type: ledger.ReportDone, Host: w.host, Job: d.Job, Attempt: d.Attempt, ExitCode: code, Runtime: time.Second})
}

// publishRaw publishes bytes on a subject, with msgID unless it is empty.
func (c *cluster) publishRaw(subject, msgID string, data []byte) *jetstream.PubAck {
	c.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = data
	if msgID != "" {
		m.Header.Set(subjects.MsgIDHeader, msgID)
	}
	ack, err := c.js.PublishMsg(c.ctx(), m)
	if err != nil {
		c.t.Fatalf("publish %s: %v", subject, err)
	}
	return ack
}

// submit submits a job through the client and fails unless it is accepted.
func (c *cluster) submit(account, id string, gpus int, cost ledger.Credits, priority int) wire.JobEvent {
	c.t.Helper()
	ev, err := c.c.Submit(c.ctx(), ledger.Submit{Account: account, ID: id, GPUs: gpus, Cost: cost, Priority: priority,
		Command: []string{"sh", "-c", "exit 0"}})
	if err != nil || ev.Type != ledger.EventAccepted {
		c.t.Fatalf("submit %s: %+v, %v", id, ev, err)
	}
	return ev
}

// waitFinal waits for the job's final event.
func (c *cluster) waitFinal(account, job string, fromSeq uint64) wire.JobEvent {
	c.t.Helper()
	ev, err := c.c.Watch(c.ctx(), account, job, fromSeq, nil)
	if err != nil {
		c.t.Fatalf("wait for %s: %v", job, err)
	}
	return ev
}

// waitEvent waits for an event of job with type typ at or after fromSeq.
func (c *cluster) waitEvent(account, job string, fromSeq uint64, typ ledger.EventType) wire.JobEvent {
	c.t.Helper()
	errFound := errors.New("found")
	var got wire.JobEvent
	_, err := c.c.Watch(c.ctx(), account, job, fromSeq, func(ev wire.JobEvent) error {
		if ev.Type == typ {
			got = ev
			return errFound
		}
		return nil
	})
	if !errors.Is(err, errFound) {
		c.t.Fatalf("wait for %s event of %s: %v", typ, job, err)
	}
	return got
}

// events returns every event and journal entry stored on subjects matching
// filter, de-duplicated by message id as a reader must.
func (c *cluster) events(filter string) []jetstream.Msg {
	c.t.Helper()
	ctx := c.ctx()
	stream := c.n.EventsStream()
	if strings.HasPrefix(filter, c.n.Prefix()+".journal.") {
		stream = c.n.JournalStream()
	}
	cons, err := c.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []jetstream.Msg
	seen := map[string]bool{}
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 500)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			c.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			if id := m.Headers().Get(subjects.MsgIDHeader); !seen[id] {
				seen[id] = true
				out = append(out, m)
			}
		}
		if n == 0 {
			c.t.Fatalf("events %s: %d more expected, none came", filter, remaining)
		}
		remaining -= uint64(n)
	}
	return out
}

// jobEventTypes lists the types of a job's events in order.
func (c *cluster) jobEventTypes(account, job string) []string {
	c.t.Helper()
	var types []string
	for _, m := range c.events(c.n.JobEvent(account, job)) {
		ev, err := wire.DecodeJobEvent(m.Data())
		if err != nil {
			c.t.Fatal(err)
		}
		types = append(types, string(ev.Type))
	}
	return types
}

// audit loads the stored ledger as of its checkpoint, checks its
// invariants, recomputes every balance from the journal entries up to the
// checkpoint and compares. (Entries past the checkpoint belong to a flush
// still in progress.) It fails the test on any difference, and returns the
// state.
func (c *cluster) audit() *ledger.State {
	c.t.Helper()
	view, err := natsstore.New(c.js, c.ledger).Load(c.ctx())
	if err != nil {
		c.t.Fatalf("load the ledger: %v", err)
	}
	// Just after a cluster's nodes come back, the server the client is on
	// may for a moment have no JetStream API to answer (no responders):
	// read again then, for a while, as a user would.
	var j client.Journal
	for deadline := time.Now().Add(15 * time.Second); ; {
		var err error
		if j, err = c.c.Journal(c.ctx(), time.Time{}); err == nil {
			break
		} else if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			c.t.Fatalf("read the journal: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, bad := range j.Bad {
		c.t.Errorf("journal: %s", bad)
	}
	if _, errs := ledger.AuditJournal(view.State, view.Checkpoint, j.Chained, j.Legacy); len(errs) > 0 {
		c.t.Errorf("audit: %v", errors.Join(errs...))
	}
	return view.State
}

// waitSettled waits until the stored ledger shows every job of the test in a
// final state, and returns it.
func (c *cluster) waitSettled(jobs ...string) *ledger.State {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		view, err := natsstore.New(c.js, c.ledger).Load(c.ctx())
		if err != nil {
			c.t.Fatal(err)
		}
		done := true
		for _, id := range jobs {
			if j := view.State.Jobs[id]; j == nil || !j.State.Terminal() {
				done = false
			}
		}
		if done {
			return view.State
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("jobs %v not settled in the stored ledger within 20s", jobs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCheckpoint returns a hook that records checkpoints and a function
// that waits until one reaches seq.
func waitCheckpoint() (func(uint64), func(t testing.TB, seq uint64)) {
	var mu sync.Mutex
	var last uint64
	cond := sync.NewCond(&mu)
	hook := func(seq uint64) {
		mu.Lock()
		last = max(last, seq)
		mu.Unlock()
		cond.Broadcast()
	}
	wait := func(t testing.TB, seq uint64) {
		t.Helper()
		timer := time.AfterFunc(30*time.Second, func() { cond.Broadcast() })
		defer timer.Stop()
		deadline := time.Now().Add(30 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		for last < seq {
			if time.Now().After(deadline) {
				t.Fatalf("checkpoint stayed at %d, want %d", last, seq)
			}
			cond.Wait()
		}
	}
	return hook, wait
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
