package gpuq_test

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

var whyBacklog = flag.Int("why.backlog", 100_000, "pending jobs in BenchmarkWhyBacklog (the issue's figure is 1,000,000)")

// BenchmarkWhyBacklog measures `gpuq why` with -why.backlog jobs pending
// (no host heartbeats, so none can start) on the real scheduler and an
// embedded server: client.Explain of the job at the head of the queue (its
// wait fact), of the last job (no fact: further back than the window), and,
// for comparison, the path gpuq why took before the facts (load the whole
// ledger through the recovery path and run a decision pass); and gpuq jobs
// --limit 100 (the events' tail and the page's keys) beside a read of the
// whole view, which every page took before. It reports the
// fact writes the backlog cost per job.
func BenchmarkWhyBacklog(b *testing.B) {
	n := *whyBacklog
	c := newCluster(b)
	var checkpoint atomic.Uint64
	c.startScheduler("bench", schedOpts{hooks: scheduler.Hooks{Checkpointed: func(seq uint64) { checkpoint.Store(seq) }}})
	c.createAccount("a", ledger.MaxCredits)
	id := func(i int) string { return fmt.Sprintf("job-%07d", i) }
	futs := make([]jetstream.PubAckFuture, 0, 1024)
	var last uint64
	drain := func() {
		for _, f := range futs {
			select {
			case ack := <-f.Ok():
				last = max(last, ack.Sequence)
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		futs = futs[:0]
	}
	for i := range n {
		m, err := wire.EncodeSubmit(c.n, ledger.Submit{Account: "a", ID: id(i), GPUs: 1, Cost: 1, Command: []string{"python", "train.py"}})
		if err != nil {
			b.Fatal(err)
		}
		msg := nats.NewMsg(m.Subject)
		msg.Data = m.Data
		msg.Header.Set(subjects.MsgIDHeader, m.MsgID)
		f, err := c.js.PublishMsgAsync(msg)
		if err != nil {
			b.Fatal(err)
		}
		if futs = append(futs, f); len(futs) == cap(futs) {
			drain()
		}
	}
	drain()
	published := time.Now()
	for deadline := time.Now().Add(10 * time.Minute); checkpoint.Load() < last; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("checkpoint stayed at %d, want %d", checkpoint.Load(), last)
		}
	}
	folded := time.Since(published)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// The facts of the backlog's pass are all written once the pass fact
	// says it folded the last submission.
	deadline := time.Now().Add(5 * time.Minute)
	for {
		ex, err := c.c.Explain(ctx, "a", id(0))
		if err == nil && ex.Status == client.Explained && ex.Pass.Seq >= last {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("the facts of the backlog are not written after 5m: %+v, %v", ex, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	s, err := c.js.Stream(ctx, "KV_"+c.n.FactsBucket())
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	writes := info.State.LastSeq
	b.Run("facts/head", func(b *testing.B) {
		for b.Loop() {
			if ex, err := c.c.Explain(ctx, "a", id(0)); err != nil || ex.Status != client.Explained {
				b.Fatalf("Explain = %+v, %v", ex, err)
			}
		}
		b.ReportMetric(folded.Seconds(), "s-to-fold-after-publish")
		b.ReportMetric(float64(writes), "fact-writes")
		b.ReportMetric(float64(writes)/float64(n), "fact-writes/job")
	})
	b.Run("facts/deep", func(b *testing.B) {
		for b.Loop() {
			if ex, err := c.c.Explain(ctx, "a", id(n-1)); err != nil || ex.Status != client.NotExplained {
				b.Fatalf("Explain = %+v, %v", ex, err)
			}
		}
	})
	// gpuq jobs --limit 100: the newest page, from the events' tail and
	// 100 keys; and the whole view, as every page read before.
	b.Run("jobs/limit=100", func(b *testing.B) {
		for b.Loop() {
			page, err := c.c.Jobs(ctx, client.JobFilter{Limit: 100})
			if err != nil || len(page.Jobs) != 100 || page.Jobs[0].ID != id(n-1) || page.Next == "" {
				b.Fatalf("Jobs = %d jobs, first %v, next %q, %v", len(page.Jobs), page.Jobs[0].ID, page.Next, err)
			}
		}
	})
	b.Run("jobs/whole-view", func(b *testing.B) {
		for b.Loop() {
			page, err := c.c.Jobs(ctx, client.JobFilter{})
			if err != nil || len(page.Jobs) != n {
				b.Fatalf("Jobs = %d jobs, %v", len(page.Jobs), err)
			}
		}
	})
	b.Run("recovery-path", func(b *testing.B) {
		for b.Loop() {
			view, err := natsstore.New(c.js, c.ledger).Load(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := scheduler.Explain(view.State, nil, id(0), time.Now(), scheduler.CoreConfig{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
