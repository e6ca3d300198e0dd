package gpuq_test

// Tests of the query seam for `gpuq why`: a real scheduler on an embedded
// server, run with non-default policy settings, publishes why each waiting
// job waits, and client.Explain returns exactly that (the retry time its
// retry policy gives, no backfill reservation when backfill is off), where
// an explanation computed with the default configuration says otherwise. A
// job's wait fact goes away when the job runs, and a job dispatched at once
// from an idle queue costs no fact write.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestExplainIsWhatTheSchedulerComputed(t *testing.T) {
	c := newCluster(t)
	policy := scheduler.CoreConfig{NoBackfill: true, HalfLife: time.Hour,
		Retry:       scheduler.RetryPolicy{Initial: 40 * time.Second},
		HostBackoff: scheduler.RetryPolicy{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}}
	c.startScheduler("s1", schedOpts{core: policy})
	c.createAccount("a", 1000)
	c.registerHost("h1", 4)
	w := c.worker("h1")
	ctx := c.ctx()
	fkv, err := c.js.KeyValue(ctx, c.n.FactsBucket())
	if err != nil {
		t.Fatal(err)
	}

	// The scheduler publishes the configuration it runs, defaults filled in.
	cf := waitFor(t, func() (wire.SchedulerFact, bool) {
		cf, err := c.c.SchedulerConfig(ctx)
		return cf, err == nil
	})
	if cf.Leader != "s1" || !cf.NoBackfill || cf.HalfLife != "1h0m0s" || cf.Retry.Initial != "40s" || cf.Retry.Max != "10m0s" || cf.Facts.Window != 1000 {
		t.Errorf("config fact = %+v, want the scheduler's policy", cf)
	}

	// A job dispatched at once from an idle queue costs no fact write.
	quick := c.submit("a", "quick", 1, 1, 0)
	d := w.nextDispatch("quick")
	w.start(d)
	w.finish(d, 0)
	c.waitFinal("a", "quick", quick.Seq)

	hog := c.submit("a", "hog", 3, 1, 0)
	hd := w.nextDispatch("hog")
	w.start(hd)
	c.waitEvent("a", "hog", hog.Seq, ledger.EventStarted)
	// flaky is refused by h1: it waits its retry delay, under this policy.
	c.submit("a", "flaky", 1, 1, 0)
	fd := w.nextDispatch("flaky")
	c.report(ledger.Report{Type: ledger.ReportRejected, Host: "h1", Job: "flaky", Attempt: fd.Attempt, Reason: "test refusal"})
	// wide fits h1 only once hog ends; with backfill it would hold a
	// reservation there, but backfill is off.
	wide := c.submit("a", "wide", 4, 1, 0)

	kinds := func(bs []wire.Blocker) []string {
		var out []string
		for _, b := range bs {
			out = append(out, b.Kind)
		}
		return out
	}
	explained := func(job string, want []string) client.Explanation {
		t.Helper()
		return waitFor(t, func() (client.Explanation, bool) {
			ex, err := c.c.Explain(ctx, "a", job)
			if err != nil {
				t.Fatalf("Explain(%s): %v", job, err)
			}
			return ex, ex.Status == client.Explained && slices.Equal(kinds(ex.Blockers), want)
		})
	}
	fex := explained("flaky", []string{"backoff"})
	wex := explained("wide", []string{"no_free_gpus", "queue"})

	// What the scheduler computed, recomputed here from the stored ledger
	// with the scheduler's policy and with the default one: the facts must
	// match the first and not the second.
	view, err := natsstore.New(c.js, c.ledger).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e, err := c.hosts.Get(ctx, "h1")
	if err != nil {
		t.Fatal(err)
	}
	h, err := wire.DecodeHeartbeat(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	hosts, now := []wire.Heartbeat{h}, time.Now()
	fj := view.State.Jobs["flaky"]
	at := fj.Attempts()[len(fj.Attempts())-1].EndedAt.Add(policy.Retry.Delay("flaky", fj.Failures))
	if want := "until " + at.UTC().Format(time.RFC3339) + " after"; !strings.Contains(fex.Blockers[0].Message, want) {
		t.Errorf("flaky's backoff says %q, want it to say %q (its retry delay under the scheduler's policy)", fex.Blockers[0].Message, want)
	}
	def := scheduler.RetryPolicy{}.Delay("flaky", fj.Failures)
	if strings.Contains(fex.Blockers[0].Message, fj.Attempts()[len(fj.Attempts())-1].EndedAt.Add(def).UTC().Format(time.RFC3339)) {
		t.Errorf("flaky's backoff %q is the default policy's", fex.Blockers[0].Message)
	}
	for _, job := range []string{"flaky", "wide"} {
		got, _ := c.c.Explain(ctx, "a", job)
		same, err := scheduler.Explain(view.State, hosts, job, now, policy)
		if err != nil {
			t.Fatal(err)
		}
		dflt, err := scheduler.Explain(view.State, hosts, job, now, scheduler.CoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var sameKinds, dfltKinds []string
		for _, b := range same {
			sameKinds = append(sameKinds, b.Kind)
		}
		for _, b := range dflt {
			dfltKinds = append(dfltKinds, b.Kind)
		}
		if !slices.Equal(kinds(got.Blockers), sameKinds) {
			t.Errorf("Explain(%s) = %v, the scheduler's policy gives %v", job, kinds(got.Blockers), sameKinds)
		}
		if job == "wide" && slices.Equal(kinds(got.Blockers), dfltKinds) {
			t.Errorf("Explain(wide) = %v, what the default policy gives too (%v): the test cannot tell them apart", kinds(got.Blockers), dfltKinds)
		}
	}
	if wex.Reservation != nil {
		t.Errorf("wide holds reservation %+v with backfill off", *wex.Reservation)
	}

	// When wide runs, its wait fact goes away.
	w.finish(hd, 0)
	c.waitFinal("a", "hog", hog.Seq)
	wd := w.nextDispatch("wide")
	w.start(wd)
	c.waitEvent("a", "wide", wide.Seq, ledger.EventStarted)
	waitFor(t, func() (struct{}, bool) {
		_, err := fkv.Get(ctx, subjects.FactWaitKey("a", "wide"))
		return struct{}{}, errors.Is(err, jetstream.ErrKeyNotFound)
	})
	if ex, err := c.c.Explain(ctx, "a", "wide"); err != nil || ex.Status != client.NotWaiting || ex.State != ledger.StateRunning {
		t.Errorf("Explain(wide) once it runs = %+v, %v", ex, err)
	}
	// quick never waited past a pass: no fact was ever written for it.
	if _, err := fkv.History(ctx, subjects.FactWaitKey("a", "quick")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("quick, dispatched at once, has fact history: %v", err)
	}
}

// TestFactsOfAnEarlierTermAreReconciled: a new leader deletes the wait
// facts its predecessor left for jobs no longer waiting, and rewrites those
// of jobs still waiting under its own term.
func TestFactsOfAnEarlierTermAreReconciled(t *testing.T) {
	c := newCluster(t)
	ctx := c.ctx()
	s1 := c.startScheduler("s1", schedOpts{core: scheduler.CoreConfig{UnplaceableAfter: time.Hour}})
	c.createAccount("a", 1000)
	c.registerHost("h1", 2)
	for _, id := range []string{"w1", "w2"} {
		c.submit("a", id, 4, 1, 0) // wider than h1: they wait
	}
	first := waitFor(t, func() (client.Explanation, bool) {
		ex, err := c.c.Explain(ctx, "a", "w2")
		return ex, err == nil && ex.Status == client.Explained
	})
	if err := s1.stop(t); err != nil {
		t.Fatal(err)
	}
	// w1 is cancelled while no scheduler runs; s2 folds it when it leads.
	msg, err := wire.EncodeCancel(c.n, ledger.Cancel{Account: "a", Job: "w1"})
	if err != nil {
		t.Fatal(err)
	}
	c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
	c.startScheduler("s2", schedOpts{core: scheduler.CoreConfig{UnplaceableAfter: time.Hour}})
	fkv, err := c.js.KeyValue(ctx, c.n.FactsBucket())
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() (struct{}, bool) {
		_, err := fkv.Get(ctx, subjects.FactWaitKey("a", "w1"))
		return struct{}{}, errors.Is(err, jetstream.ErrKeyNotFound)
	})
	second := waitFor(t, func() (client.Explanation, bool) {
		ex, err := c.c.Explain(ctx, "a", "w2")
		return ex, err == nil && ex.Status == client.Explained && ex.Fact.Term != first.Fact.Term
	})
	if cf, err := c.c.SchedulerConfig(ctx); err != nil || cf.Leader != "s2" || cf.Term != second.Fact.Term {
		t.Errorf("config fact after the takeover = %+v, %v; want s2's, term %s", cf, err, second.Fact.Term)
	}
}

// hangingFacts is a fact store whose every call hangs until its context
// ends, as a bucket that cannot be reached does.
type hangingFacts struct{ calls atomic.Int32 }

func (h *hangingFacts) hang(ctx context.Context) error {
	h.calls.Add(1)
	<-ctx.Done()
	return ctx.Err()
}
func (h *hangingFacts) Put(ctx context.Context, _ string, _ []byte) error { return h.hang(ctx) }
func (h *hangingFacts) Delete(ctx context.Context, _ string) error        { return h.hang(ctx) }
func (h *hangingFacts) Keys(ctx context.Context) ([]string, error)        { return nil, h.hang(ctx) }

// TestFactsNeverHoldUpTheFold: with a facts store that never answers, the
// scheduler still folds, dispatches and settles jobs, and keeps trying the
// store.
func TestFactsNeverHoldUpTheFold(t *testing.T) {
	c := newCluster(t)
	facts := &hangingFacts{}
	c.startScheduler("s1", schedOpts{facts: facts})
	c.createAccount("a", 1000)
	c.registerHost("h1", 2)
	w := c.worker("h1")
	for _, id := range []string{"j1", "j2", "j3"} {
		ev := c.submit("a", id, 2, 1, 0)
		d := w.nextDispatch(id)
		w.start(d)
		w.finish(d, 0)
		if final := c.waitFinal("a", id, ev.Seq); final.Type != ledger.EventSucceeded {
			t.Fatalf("%s ended %+v", id, final)
		}
	}
	if facts.calls.Load() == 0 {
		t.Error("the scheduler never tried the facts store")
	}
}

// waitFor polls f until it says done, for up to 10s.
func waitFor[T any](t *testing.T, f func() (T, bool)) T {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, ok := f()
		if ok {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not so after 10s: %+v", v)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
