package natsstore_test

// Load time of a ledger with live jobs only, and with as many again times
// ten archived (their keys deleted, markers still there, as in the 24h
// after an archive; once the markers expire a load sees nothing of them).
// -bench.live sets the live jobs (default 1,000).

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

var benchLive = flag.Int("bench.live", 1000, "live jobs in the load benchmark")

func BenchmarkLoadWithArchived(b *testing.B) {
	for _, archived := range []int{0, 10 * *benchLive} {
		b.Run(fmt.Sprintf("live=%d/archived=%d", *benchLive, archived), func(b *testing.B) {
			js, kv := setup(b, natsbus.SetupConfig{})
			ctx := context.Background()
			s := natsstore.New(js, kv)
			if _, err := s.Load(ctx); err != nil {
				b.Fatal(err)
			}
			at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
			rec := func(i int, seq uint64, del bool) scheduler.Record {
				j := &ledger.Job{ID: fmt.Sprintf("j%07d", i), Account: "a", GPUs: 1, Cost: 5, Charged: 5, Command: []string{"python", "train.py"},
					Walltime: time.Hour, MaxAttempts: 3, State: ledger.StateSucceeded, Attempt: 1, Host: "h1", SubmitSeq: 1, SubmittedAt: at, EndedAt: at, Seq: seq}
				data, err := ledger.MarshalJob(j)
				if err != nil {
					b.Fatal(err)
				}
				return scheduler.Record{Key: subjects.JobKey(j.ID), Seq: seq, Value: data, Delete: del}
			}
			var recs []scheduler.Record
			flush := func() {
				if err := s.Write(ctx, recs); err != nil {
					b.Fatal(err)
				}
				recs = recs[:0]
			}
			recs = append(recs, scheduler.Record{Key: subjects.AccountKey("a"), Seq: 1, Value: mustAccount(b)})
			for i := range *benchLive + archived {
				recs = append(recs, rec(i, 1, false))
				if len(recs) == 1000 {
					flush()
				}
			}
			flush()
			for i := *benchLive; i < *benchLive+archived; i++ {
				recs = append(recs, rec(i, 2, true))
				if len(recs) == 1000 {
					flush()
				}
			}
			flush()
			if err := s.Checkpoint(ctx, 2); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				view, err := natsstore.New(js, kv).Load(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(view.State.Jobs) != *benchLive {
					b.Fatalf("loaded %d jobs, want %d", len(view.State.Jobs), *benchLive)
				}
			}
		})
	}
}

func mustAccount(b *testing.B) []byte {
	data, err := ledger.MarshalAccount(&ledger.Account{ID: "a", Balance: 1000, Weight: 1, Seq: 1})
	if err != nil {
		b.Fatal(err)
	}
	return data
}
