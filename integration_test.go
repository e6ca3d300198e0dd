// End-to-end tests of the scheduler on a real embedded nats-server with file
// storage. Each test plays pipeline (the client package), admin and worker
// (writing host heartbeats, reading the host's dispatch consumer and
// publishing reports as the worker daemon does) against the real scheduler
// service, then checks events, balances and the journal: every test ends
// with an audit that recomputes each balance from the journal and compares
// it with the stored ledger.
package gpuq_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/metrics"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestSubmitRunSettle(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("vision", 1000)
	c.registerHost("h1", 8)
	w := c.worker("h1")

	acc := c.submit("vision", "train-42", 2, 120, 5)
	if acc.Balance != 1000 || acc.Available != 880 {
		t.Errorf("accepted: balance %d, available %d; want 1000, 880", acc.Balance, acc.Available)
	}
	d := w.nextDispatch("train-42")
	if d.Attempt != 1 || d.GPUs != 2 || !slices.Equal(d.Command, []string{"sh", "-c", "exit 0"}) {
		t.Errorf("dispatch = %+v", d)
	}
	w.start(d)
	w.finish(d, 0)
	final := c.waitFinal("vision", "train-42", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Charged != 120 || final.Balance != 880 {
		t.Errorf("final = %+v, want succeeded charging 120 to 880", final)
	}
	if got, want := c.jobEventTypes("vision", "train-42"), []string{"accepted", "dispatched", "started", "succeeded"}; !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	var kinds []string
	for _, m := range c.events(c.n.Journal("vision")) {
		e, err := wire.DecodeJournalEntry(m.Data())
		if err != nil {
			t.Fatalf("journal entry: %v", err)
		}
		kinds = append(kinds, string(e.Kind))
	}
	if want := []string{"grant", "reserve", "settle"}; !slices.Equal(kinds, want) {
		t.Errorf("journal = %v, want %v", kinds, want)
	}
	st := c.waitSettled("train-42")
	if a := st.Accounts["vision"]; a.Balance != 880 || a.Reserved != 0 {
		t.Errorf("stored account = balance %d reserved %d", a.Balance, a.Reserved)
	}
	j, err := c.c.Job(c.ctx(), "train-42")
	if err != nil || j.State != ledger.StateSucceeded || len(j.Devices()) != 2 {
		t.Errorf("client.Job = %+v, %v", j, err)
	}
	c.audit()
}

func TestInsufficientCredits(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	c.submit("a", "big", 1, 80, 0)
	_, err := c.c.Submit(c.ctx(), ledger.Submit{Account: "a", ID: "bigger", GPUs: 1, Cost: 30, Command: []string{"x"}})
	var rej *client.RejectedError
	if !errors.As(err, &rej) || rej.Reason != ledger.ReasonInsufficientCredits || !strings.Contains(rej.Message, "20 available") {
		t.Fatalf("Submit = %v, want insufficient_credits naming 20 available", err)
	}
	acct, err := c.c.Account(c.ctx(), "a")
	if err != nil || acct.Balance != 100 || acct.Reserved != 80 {
		t.Errorf("account = %+v, %v", acct, err)
	}
	c.audit()
}

func TestPriorityOrder(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	// Queue first, then offer one GPU: the jobs must start highest priority
	// first, then oldest.
	c.submit("a", "low", 1, 1, 1)
	c.submit("a", "high1", 1, 1, 5)
	c.submit("a", "high2", 1, 1, 5)
	c.registerHost("h1", 1)
	w := c.worker("h1")
	var order []string
	for range 3 {
		o := w.next()
		d := o.(ledger.DispatchOrder)
		order = append(order, d.Job)
		w.none(100 * time.Millisecond) // one GPU: nothing else until this ends
		w.start(d)
		w.finish(d, 0)
	}
	if want := []string{"high1", "high2", "low"}; !slices.Equal(order, want) {
		t.Errorf("dispatch order = %v, want %v", order, want)
	}
	c.waitSettled("low", "high1", "high2")
	c.audit()
}

func TestCancelPendingAndRunning(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)

	// Pending: no host yet.
	c.submit("a", "waiting", 1, 10, 0)
	ev, err := c.c.Cancel(c.ctx(), "a", "waiting")
	if err != nil || ev.Type != ledger.EventCancelled || ev.Available != 100 {
		t.Fatalf("cancel pending = %+v, %v", ev, err)
	}
	// Each call is its own command (its id ends in a nonce of the call),
	// so cancelling again reaches the fold, which ignores it.
	again, err := c.c.Cancel(c.ctx(), "a", "waiting")
	if err != nil || again.Seq == ev.Seq || again.Type != ledger.EventIgnored || again.Reason != ledger.ReasonAlreadyTerminal {
		t.Errorf("second cancel = %+v, %v; want ignored, already_terminal", again, err)
	}
	// So does a cancel published by hand past the window.
	msg, err := wire.EncodeCancel(c.n, ledger.Cancel{Account: "a", Job: "waiting"})
	if err != nil {
		t.Fatal(err)
	}
	late := c.publishRaw(msg.Subject, "late-"+msg.MsgID, msg.Data)
	if ev := c.waitEvent("a", "waiting", late.Sequence, ledger.EventIgnored); ev.Reason != ledger.ReasonAlreadyTerminal {
		t.Errorf("late cancel = %+v", ev)
	}

	// Running: the cancel goes to the host; the worker reports and the
	// reservation is released.
	c.registerHost("h1", 2)
	w := c.worker("h1")
	acc := c.submit("a", "running", 2, 30, 0)
	d := w.nextDispatch("running")
	w.start(d)
	c.waitEvent("a", "running", acc.Seq, ledger.EventStarted)
	ev, err = c.c.Cancel(c.ctx(), "a", "running")
	if err != nil || ev.Type != ledger.EventCancelRequested || ev.Available != 70 {
		t.Fatalf("cancel running = %+v, %v", ev, err)
	}
	if o, ok := w.next().(ledger.CancelOrder); !ok || o.Job != "running" || o.Attempt != 1 {
		t.Fatalf("cancel order = %+v", o)
	}
	w.finish(d, 143)
	final := c.waitFinal("a", "running", acc.Seq)
	if final.Type != ledger.EventCancelled || final.Available != 100 || final.Balance != 100 {
		t.Errorf("final = %+v", final)
	}
	c.audit()
}

func TestSubmissionPublishedTwice(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	s := ledger.Submit{Account: "a", ID: "twice", GPUs: 1, Cost: 40, Command: []string{"x"}}
	msg, err := wire.EncodeSubmit(c.n, s)
	if err != nil {
		t.Fatal(err)
	}
	first := c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
	second := c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
	if !second.Duplicate || second.Sequence != first.Sequence {
		t.Errorf("retried publish: %+v after %+v, want a duplicate of it", second, first)
	}
	// The same submission again past the duplicate window (a new message
	// id stands in for the window having passed): the fold ignores it.
	third := c.publishRaw(msg.Subject, "later-retry", msg.Data)
	ev := c.waitEvent("a", "twice", third.Sequence, ledger.EventIgnored)
	if ev.Reason != ledger.ReasonDuplicate {
		t.Errorf("late duplicate = %+v", ev)
	}
	// Through the client, the same id and terms are judged by the fold
	// again: the existing job, unchanged.
	if ev, err := c.c.Submit(c.ctx(), s); err != nil || ev.Type != ledger.EventIgnored || ev.Reason != ledger.ReasonDuplicate ||
		ev.State != ledger.StatePending || ev.Seq <= third.Sequence {
		t.Errorf("client resubmit = %+v, %v; want an ignored duplicate naming the pending job", ev, err)
	}
	acct, err := c.c.Account(c.ctx(), "a")
	if err != nil {
		t.Fatalf("read the account: %v", err)
	}
	if acct.Reserved != 40 {
		t.Errorf("reserved %d after three publishes, want 40", acct.Reserved)
	}
	if got := c.jobEventTypes("a", "twice"); !slices.Equal(got, []string{"accepted", "ignored", "ignored"}) {
		t.Errorf("events = %v", got)
	}
	c.audit()
}

func TestReportsReplayedOrMisaddressed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	c.registerHost("h1", 1)
	w := c.worker("h1")
	acc := c.submit("a", "j", 1, 25, 0)
	d := w.nextDispatch("j")
	w.start(d)

	// A report from a host the job was not sent to.
	wrong := ledger.Report{Type: ledger.ReportDone, Host: "h2", Job: "j", Attempt: 1, ExitCode: 0}
	c.report(wrong)
	if ev := c.waitEvent("a", "j", acc.Seq, ledger.EventIgnored); ev.Reason != ledger.ReasonWrongHost {
		t.Errorf("wrong host report = %+v", ev)
	}
	// The real completion, retried within the window and again after it.
	w.finish(d, 0)
	w.finish(d, 0)
	msg, err := wire.EncodeReport(c.n, ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "j", Attempt: 1, Runtime: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	late := c.publishRaw(msg.Subject, "late-"+msg.MsgID, msg.Data)
	if ev := c.waitEvent("a", "j", late.Sequence, ledger.EventIgnored); ev.Reason != ledger.ReasonBadState {
		t.Errorf("replayed completion = %+v", ev)
	}
	acct, err := c.c.Account(c.ctx(), "a")
	if err != nil {
		t.Fatalf("read the account: %v", err)
	}
	if acct.Balance != 75 || acct.Reserved != 0 {
		t.Errorf("account after replays: balance %d reserved %d, want 75, 0", acct.Balance, acct.Reserved)
	}
	c.audit()
}

func TestUnplaceable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	c.registerHost("h1", 8)
	acc := c.submit("a", "wide", 16, 50, 0)
	final := c.waitFinal("a", "wide", acc.Seq)
	if final.Type != ledger.EventFailed || final.Reason != ledger.ReasonUnplaceable || final.Available != 100 {
		t.Errorf("final = %+v, want failed/unplaceable with the reservation released", final)
	}
	if !strings.Contains(final.Message, "needs 16 GPUs; the largest live host has 8") {
		t.Errorf("message %q", final.Message)
	}
	c.audit()
}

func TestMalformedCommands(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	type bad struct {
		subject, body string
		event         string // the subject the rejection appears on
		reason        ledger.Reason
		says          string
	}
	cases := []bad{
		{c.n.Submit("a"), `this is not json`, c.n.InvalidEvent("a"), ledger.ReasonInvalid, "not a JSON object"},
		{c.n.Submit("a"), `{"v":2,"id":"x"}`, c.n.InvalidEvent("a"), ledger.ReasonInvalid, "unsupported version 2"},
		{c.n.Submit("a"), `{"v":1,"id":"x","gpus":1,"cost":1e99,"command":["x"]}`, c.n.InvalidEvent("a"), ledger.ReasonInvalid, "is not an integer"},
		{c.n.Submit("a"), `{"v":1,"id":"x","gpus":1,"cost":123456789012345678901234567890,"command":["x"]}`, c.n.InvalidEvent("a"), ledger.ReasonInvalid, "out of range"},
		{c.n.Submit("a"), `{"v":1,"id":"x","account":"b","gpus":1,"cost":1,"command":["x"]}`, c.n.InvalidEvent("a"), ledger.ReasonAccountMismatch, `names account "b"`},
		{"gpuq.cmd.submit.a:b", `{"v":1}`, c.n.UnaddressedEvent(), ledger.ReasonInvalid, `account "a:b"`},
		{c.n.Report("h1"), `{"v":1,"job":"ghost","attempt":1,"type":"done","exit_code":0}`, c.n.UnaddressedEvent(), ledger.ReasonUnknownJob, "unknown job ghost"},
	}
	var seqs []uint64
	for _, b := range cases {
		seqs = append(seqs, c.publishRaw(b.subject, "", []byte(b.body)).Sequence)
	}
	// The loop goes on: a good submission after them is accepted.
	c.submit("a", "good", 1, 1, 0)
	for i, b := range cases {
		var found bool
		for _, m := range c.events(b.event) {
			ev, err := wire.DecodeInvalidEvent(m.Data())
			if err != nil || ev.Seq != seqs[i] {
				continue
			}
			found = true
			if ev.Reason != b.reason || !strings.Contains(ev.Message, b.says) {
				t.Errorf("%s %s: rejected with %s %q, want %s saying %q", b.subject, b.body, ev.Reason, ev.Message, b.reason, b.says)
			}
		}
		if !found {
			t.Errorf("%s %s: no rejection on %s", b.subject, b.body, b.event)
		}
	}
	if acct, err := c.c.Account(c.ctx(), "a"); err != nil || acct.Reserved != 1 || acct.Balance != 100 {
		t.Errorf("account moved: %+v, %v", acct, err)
	}
	c.audit()
}

// TestRestartAtEachPoint stops the scheduler, as a crash would, at each
// point of a flush — after the records are written and before the effects
// are sent, after the effects and before the checkpoint, and with only some
// of a batch's records written — then starts a new scheduler on the same
// server. Every job must run once and be charged once.
func TestRestartAtEachPoint(t *testing.T) {
	t.Parallel()
	stop := errors.New("crash")
	// Each point stops the first flush whose last sequence reaches the
	// armed target.
	points := map[string]func(at func(seq uint64) bool) scheduler.Hooks{
		"after persist": func(at func(uint64) bool) scheduler.Hooks {
			return scheduler.Hooks{AfterPersist: func(seq uint64) error {
				if at(seq) {
					return stop
				}
				return nil
			}}
		},
		"after effects": func(at func(uint64) bool) scheduler.Hooks {
			return scheduler.Hooks{AfterEffects: func(seq uint64) error {
				if at(seq) {
					return stop
				}
				return nil
			}}
		},
		"mid batch": func(at func(uint64) bool) scheduler.Hooks {
			return scheduler.Hooks{CutPersist: func(seq uint64, n int) int {
				if at(seq) {
					return n / 2
				}
				return n
			}}
		},
	}
	for name, hooks := range points {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			c.registerHost("h1", 4)
			w := c.worker("h1")
			var target atomic.Uint64
			var fired atomic.Bool
			crashed := make(chan struct{})
			at := func(seq uint64) bool {
				tg := target.Load()
				if tg > 0 && seq >= tg && fired.CompareAndSwap(false, true) {
					close(crashed)
					return true
				}
				return false
			}
			// hold pauses the scheduler after one checkpoint, so the next
			// commands pile up and are folded as one batch.
			var holding atomic.Bool
			hold := make(chan struct{})
			release := sync.OnceFunc(func() { close(hold) })
			heldAt := make(chan uint64, 1)
			h := hooks(at)
			h.Checkpointed = func(seq uint64) {
				if holding.CompareAndSwap(true, false) {
					heldAt <- seq
					<-hold
				}
			}
			// The fold goes on while the flusher is held, so the entries
			// are either still with the follower or folded into the next
			// batch; the metrics say how far the fold has come.
			progress := newAppliedMetrics(t)
			first := c.startScheduler("first", schedOpts{hooks: h, tune: func(cfg *scheduler.Config) { cfg.Metrics = progress }})
			t.Cleanup(release) // before the scheduler is stopped, should the test fail while it is held
			c.createAccount("a", 1000)
			acc := c.submit("a", "before", 1, 10, 0)
			d := w.nextDispatch("before")
			w.start(d)
			c.waitEvent("a", "before", acc.Seq, ledger.EventStarted)

			holding.Store(true)
			w.finish(d, 0)
			var last uint64
			for _, id := range []string{"j1", "j2", "j3"} {
				msg, err := wire.EncodeSubmit(c.n, ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 20, Command: []string{"x"}})
				if err != nil {
					t.Fatal(err)
				}
				last = c.publishRaw(msg.Subject, msg.MsgID, msg.Data).Sequence
			}
			target.Store(last)
			// If the scheduler holds, release it only once every entry
			// after the held checkpoint, through the last submission, has
			// reached its follower or been folded (the fold goes on while
			// a flush is held), so the next flush takes them as one
			// batch. (It may also have folded them all before the hold
			// engaged, and crashed.)
			select {
			case cp := <-heldAt:
				want := int(int64(last) - int64(cp))
				reached := func() int { return first.log.buffered() + int(progress.applied.Load()-cp) }
				for deadline := time.Now().Add(10 * time.Second); reached() < want; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						t.Fatalf("%d entries after checkpoint %d reached the scheduler, want %d", reached(), cp, want)
					}
				}
			case <-crashed:
			case <-time.After(20 * time.Second):
				t.Fatal("the crash point was never reached")
			}
			release()
			if err := first.wait(t, 20*time.Second); !errors.Is(err, scheduler.ErrStopped) {
				t.Fatalf("first scheduler returned %v, want ErrStopped", err)
			}

			c.startScheduler("second", schedOpts{})
			seen := map[string]int{}
			for range 3 {
				d := w.next().(ledger.DispatchOrder)
				seen[d.Job]++
				w.start(d)
				w.finish(d, 0)
			}
			w.none(300 * time.Millisecond)
			st := c.waitSettled("before", "j1", "j2", "j3")
			for _, id := range []string{"j1", "j2", "j3"} {
				if seen[id] != 1 {
					t.Errorf("%s dispatched %d times, want once", id, seen[id])
				}
			}
			for _, id := range []string{"before", "j1", "j2", "j3"} {
				if j := st.Jobs[id]; j.State != ledger.StateSucceeded || j.Attempt != 1 {
					t.Errorf("%s: %s after %d attempts", id, j.State, j.Attempt)
				}
			}
			if a := st.Accounts["a"]; a.Balance != 1000-10-3*20 || a.Reserved != 0 {
				t.Errorf("account: balance %d reserved %d; want %d, 0", a.Balance, a.Reserved, 1000-10-3*20)
			}
			for _, id := range []string{"j1", "j2", "j3"} {
				if got := c.jobEventTypes("a", id); !slices.Equal(got, []string{"accepted", "dispatched", "started", "succeeded"}) {
					t.Errorf("%s events = %v", id, got)
				}
			}
			c.audit()
		})
	}
}

func TestTwoSchedulersOneLeader(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s1 := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 1000) // someone leads now
	s2 := c.startScheduler("s2", schedOpts{})
	c.registerHost("h1", 2)
	w := c.worker("h1")
	acc := c.submit("a", "one", 1, 100, 0)
	d := w.nextDispatch("one")
	w.start(d)
	w.finish(d, 0)
	c.waitFinal("a", "one", acc.Seq)
	leader, standby := s1, s2
	if s2.leading.Load() > 0 {
		leader, standby = s2, s1
	}
	if leader.leading.Load() != 1 || standby.leading.Load() != 0 {
		t.Fatalf("leading counts: %s %d, %s %d; want exactly one leader", leader.name, leader.leading.Load(), standby.name, standby.leading.Load())
	}

	// Stop the leader mid-job: the standby takes over and settles it.
	acc = c.submit("a", "two", 1, 100, 0)
	d = w.nextDispatch("two")
	w.start(d)
	c.waitEvent("a", "two", acc.Seq, ledger.EventStarted)
	if err := leader.stop(t); err != nil {
		t.Fatalf("stop %s: %v", leader.name, err)
	}
	w.finish(d, 0)
	final := c.waitFinal("a", "two", acc.Seq)
	if final.Type != ledger.EventSucceeded || final.Balance != 800 {
		t.Errorf("final after takeover = %+v", final)
	}
	if standby.leading.Load() != 1 {
		t.Errorf("%s led %d times, want 1", standby.name, standby.leading.Load())
	}
	c.submit("a", "three", 1, 100, 0)
	d = w.nextDispatch("three")
	w.start(d)
	w.finish(d, 0)
	st := c.waitSettled("one", "two", "three")
	if a := st.Accounts["a"]; a.Balance != 700 || a.Reserved != 0 {
		t.Errorf("account after takeover: %+v", a)
	}
	c.audit()
}

// TestDeposedLeaderStepsDown takes the lease from a running leader, as a
// lapse during a long pause would, and lets another scheduler take it: the
// old leader's next renewal fails and it steps down without writing.
func TestDeposedLeaderStepsDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s1 := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 1000)
	if err := c.ledger.Purge(c.ctx(), subjects.LeaderKey); err != nil {
		t.Fatal(err)
	}
	s2 := c.startScheduler("s2", schedOpts{})
	s2.waitLeading(t, 10*time.Second)
	c.registerHost("h1", 1)
	w := c.worker("h1")
	acc := c.submit("a", "j", 1, 10, 0)
	d := w.nextDispatch("j")
	w.start(d)
	w.finish(d, 0)
	c.waitFinal("a", "j", acc.Seq)
	// s1's renewal fails, since the key it renews has moved on: it must end
	// its term and give the lease up.
	s1.waitLeft(t, 10*time.Second)
	// s1 may lead again, but only once s2 has given the lease up.
	if n := s1.leading.Load(); n > 1 && s2.ended.Load() == 0 {
		t.Errorf("s1 led %d times while s2 never stepped down", n)
	}
	st := c.waitSettled("j")
	if a := st.Accounts["a"]; a.Balance != 990 {
		t.Errorf("balance %d, want 990", a.Balance)
	}
	c.audit()
}

// appliedMetrics is the scheduler's metrics, remembering the last
// sequence it reported folded.
type appliedMetrics struct {
	*metrics.Scheduler
	applied atomic.Uint64
}

func newAppliedMetrics(t *testing.T) *appliedMetrics {
	t.Helper()
	m, err := metrics.NewScheduler(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return &appliedMetrics{Scheduler: m}
}

func (m *appliedMetrics) Progress(p scheduler.Progress) {
	m.applied.Store(p.Applied)
	m.Scheduler.Progress(p)
}
