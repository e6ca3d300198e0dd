package natsstore_test

// What a takeover costs (a new leader's Load of the ledger bucket, then the
// core's index of it) with the same jobs in flight, on an installation that
// is new, one that has archived many jobs (their final records in the
// history stream, their markers expired), and one that archived them all
// within the last hour (their markers still in the bucket). -bench.live sets
// the jobs in flight (default 1,000), -bench.archived the archived ones
// (default 10 × live); the figures are 10,000 and 1,000,000.

import (
	"context"
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

var (
	benchLive     = flag.Int("bench.live", 1000, "jobs in flight in the takeover benchmark")
	benchArchived = flag.Int("bench.archived", 0, "archived jobs in the takeover benchmark (0: 10 × -bench.live)")
)

func BenchmarkTakeover(b *testing.B) {
	live, archived := *benchLive, *benchArchived
	if archived == 0 {
		archived = 10 * live
	}
	for _, c := range []struct {
		name     string
		archived int
		markers  bool
	}{
		{"new", 0, false},
		{"archived", archived, false},
		{"archived-within-the-hour", archived, true},
	} {
		b.Run(fmt.Sprintf("%s/live=%d/archived=%d", c.name, live, c.archived), func(b *testing.B) {
			js, kv := setup(b, natsbus.SetupConfig{})
			ctx := context.Background()
			s := natsstore.New(js, kv)
			if _, err := s.Load(ctx); err != nil {
				b.Fatal(err)
			}
			seq := writeInFlight(b, ctx, s, live)
			writeArchived(b, ctx, js, s, c.archived, c.markers, seq)
			if err := s.Checkpoint(ctx, seq+uint64(c.archived)+1); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				view, err := natsstore.New(js, kv).Load(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if len(view.State.Jobs) != live {
					b.Fatalf("loaded %d jobs, want %d", len(view.State.Jobs), live)
				}
				scheduler.NewCore(scheduler.CoreConfig{}).Load(view.State)
			}
		})
	}
}

// writeInFlight stores n jobs in flight of account a (half running, half
// queued, as the fold leaves them) and returns the last sequence used.
func writeInFlight(b *testing.B, ctx context.Context, s *natsstore.Store, n int) uint64 {
	l := ledgertest.NewLog(b)
	l.Create("a", ledger.MaxCredits)
	for i := range n {
		id := fmt.Sprintf("live-%07d", i)
		l.Apply(ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 1, Command: []string{"python", "train.py"}})
		if i%2 == 0 {
			l.Apply(ledger.Dispatch{Job: id, Attempt: 1, Host: "h1"})
			l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: id, Attempt: 1, Devices: []string{"GPU-0"}})
		}
	}
	var recs []scheduler.Record
	flush := func() {
		if err := s.Write(ctx, recs); err != nil {
			b.Fatal(err)
		}
		recs = recs[:0]
	}
	for _, a := range l.State.Accounts {
		data, err := ledger.MarshalAccount(a)
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, scheduler.Record{Key: subjects.AccountKey(a.ID), Seq: a.Seq, Value: data})
	}
	for _, j := range l.State.Jobs {
		data, err := ledger.MarshalJob(j)
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, scheduler.Record{Key: subjects.JobKey(j.ID), Seq: j.Seq, Value: data})
		if len(recs) == 1000 {
			flush()
		}
	}
	flush()
	return l.Seq
}

// writeArchived puts the final records of n archived jobs in the history
// stream, as archives after seq. With markers their keys are written and
// then removed as an archive does, so the bucket keeps their markers.
func writeArchived(b *testing.B, ctx context.Context, js jetstream.JetStream, s *natsstore.Store, n int, markers bool, seq uint64) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	final := func(i int) *ledger.Job {
		return &ledger.Job{ID: fmt.Sprintf("done-%07d", i), Account: "a", GPUs: 1, Cost: 5, Charged: 5, Command: []string{"python", "train.py"},
			Walltime: time.Hour, MaxAttempts: 3, State: ledger.StateSucceeded, Attempt: 1, SubmitSeq: 1, SubmittedAt: at, Seq: 1, JobOutcome: &ledger.JobOutcome{Host: "h1", EndedAt: at}}
	}
	var futs []jetstream.PubAckFuture
	wait := func() {
		for _, f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
		futs = futs[:0]
	}
	for i := range n {
		msg, err := wire.EncodeEffect(subjects.Default, seq+uint64(i)+1, at, 0, ledger.ArchivedJob{Job: final(i)})
		if err != nil {
			b.Fatal(err)
		}
		m := nats.NewMsg(msg.Subject)
		m.Data = msg.Data
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		if futs = append(futs, f); len(futs) == 4000 {
			wait()
		}
	}
	wait()
	if !markers {
		return
	}
	var recs []scheduler.Record
	flush := func() {
		if err := s.Write(ctx, recs); err != nil {
			b.Fatal(err)
		}
		recs = recs[:0]
	}
	for _, del := range []bool{false, true} {
		for i := range n {
			data, err := ledger.MarshalJob(final(i))
			if err != nil {
				b.Fatal(err)
			}
			rec := scheduler.Record{Key: subjects.JobKey(final(i).ID), Seq: 1, Value: data}
			if del {
				rec.Seq, rec.Delete = seq+uint64(i)+1, true
			}
			if recs = append(recs, rec); len(recs) == 1000 {
				flush()
			}
		}
		flush()
	}
}
