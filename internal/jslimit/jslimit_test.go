// The tests run Measure and Worker against a real embedded server: the
// measurement must store what it counts and leave nothing behind, and the
// worker must carry a dispatch order to its started and done reports on
// the command stream, acking the order.
package jslimit_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/jslimit"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestMeasureStoresAndCleansUp(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := jslimit.Config{Messages: 2000, Writes: 2000, Keys: 100}.Measure(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	if l.PublishPerSec <= 0 || l.CASPerSec <= 0 {
		t.Errorf("Measure = %+v, want both rates above zero", l)
	}
	names := js.StreamNames(ctx)
	for n := range names.Name() {
		t.Errorf("stream %s left behind", n)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestMeasureHoldsBothScratchStreams: Measure creates its stream and its
// bucket before it deletes either, so the account never runs out of streams
// between two creates (see Measure for the server's race that follows
// deleting an account's last stream). It watches the JetStream API requests
// of the account it measures.
func TestMeasureHoldsBothScratchStreams(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	watch := srv.Connect(t)
	api := make(chan *nats.Msg, 16)
	sub, err := watch.ChanSubscribe("$JS.API.STREAM.*.*", api)
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := (jslimit.Config{Messages: 100, Writes: 100, Keys: 10, Name: "jsl_order"}).Measure(ctx, js); err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	var ops []string
	for len(api) > 0 {
		m := <-api
		if op := strings.TrimPrefix(m.Subject, "$JS.API.STREAM."); strings.HasPrefix(op, "CREATE.") || strings.HasPrefix(op, "DELETE.") {
			ops = append(ops, op)
		}
	}
	want := []string{"CREATE.JSL_ORDER", "CREATE.KV_jsl_order", "DELETE.KV_jsl_order", "DELETE.JSL_ORDER"}
	if !slices.Equal(ops, want) {
		t.Errorf("stream requests %q, want %q", ops, want)
	}
}

func TestWorkerReportsStartedAndDone(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	w, err := jslimit.NewWorker(js, n, "h1")
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	msg, err := wire.EncodeEffect(n, 7, time.Now(), 0, ledger.DispatchOrder{Host: "h1", Job: "j1", Account: "a", Attempt: 2, GPUs: 2,
		Command: []string{"true"}, Walltime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := natsbus.NewPublisher(js).Publish(ctx, []wire.Message{msg}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.OrderedConsumer(ctx, n.CmdStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{subjects.Default.Report("h1")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []ledger.Report
	for len(got) < 2 {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			t.Fatalf("after %d reports: %v", len(got), err)
		}
		r, err := wire.DecodeReport("h1", m.Data())
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if got[0].Type != ledger.ReportStarted || got[0].Job != "j1" || got[0].Attempt != 2 || len(got[0].Devices) != 2 {
		t.Errorf("first report = %+v, want j1 attempt 2 started on 2 devices", got[0])
	}
	if got[1].Type != ledger.ReportDone || got[1].Job != "j1" || got[1].Attempt != 2 || got[1].ExitCode != 0 {
		t.Errorf("second report = %+v, want j1 attempt 2 done with exit code 0", got[1])
	}
	// The order was acked: the work queue holds nothing.
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := js.Stream(ctx, n.DispatchStream())
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dispatch stream still holds %d orders", info.State.Msgs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if w.Done.Load() != 1 {
		t.Errorf("Done = %d, want 1", w.Done.Load())
	}
	wcancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after its context ended", err)
	}
}
