package client_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// TestManyCallsShareOneConsumer: 1,500 submissions through one client, from
// 8 goroutines, are each answered, and the events stream then holds a
// consumer or two, not one per call. A consumer per call stayed on the
// server for minutes after its call, and nats-server allows 1,000 per
// stream by default: call 1,001 within those minutes was refused with
// "maximum consumers limit reached".
func TestManyCallsShareOneConsumer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const calls, callers = 1500, 8
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for g := range callers {
		wg.Go(func() {
			for i := g; i < calls; i += callers {
				// A model no host has: the jobs wait, reserving nothing, and
				// nothing runs.
				id := fmt.Sprintf("many-%d", i)
				ev, err := f.c.Submit(f.ctx, ledger.Submit{Account: "vision", ID: id, GPUs: 1, GPUModel: "no such model", Command: []string{"true"}})
				switch {
				case err != nil:
					errs <- fmt.Errorf("submit %s: %w", id, err)
				case ev.Type != ledger.EventAccepted || ev.Job != id:
					errs <- fmt.Errorf("submit %s: answered %+v", id, ev)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d submissions failed", n, calls)
	}
	js, err := jetstream.New(f.in.nc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), subjects.Default.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers > 4 {
		t.Errorf("the events stream holds %d consumers after %d calls of one client; want them to share one", info.State.Consumers, calls)
	}
}

// TestAStalledFollowerIsReplaced: when the follower a client's calls share
// delivers nothing while a call waits (its consumer gone with a server,
// and the ordered consumer not back: seen in
// TestWorkerTakesOrdersAfterItsStreamNodeGoes), the call reads its answer
// with a consumer of its own, and the next call starts a new follower.
func TestAStalledFollowerIsReplaced(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	submit := func(id string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
		defer cancel()
		ev, err := f.c.Submit(ctx, ledger.Submit{Account: "vision", ID: id, GPUs: 1, GPUModel: "no such model", Command: []string{"true"}})
		if err != nil || ev.Type != ledger.EventAccepted {
			t.Fatalf("submit %s: %+v, %v", id, ev, err)
		}
	}
	submit("before")
	if err := client.StallAnswers(f.ctx, f.c, subjects.Default.AccountEvents("vision"), "gpuq.event.nobody.>"); err != nil {
		t.Fatal(err)
	}
	submit("stalled")
	submit("after")
}
