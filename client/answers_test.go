package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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

// TestAHangingConsumerHoldsUpNoOtherCall: while one call's events consumer
// cannot be created (JetStream does not answer), other calls of the same
// client, on the same filter or another, or reading the ledger, each end
// by their own deadline. The consumer was created under the client's lock,
// so every other call queued behind the hung one until its context ended,
// past their own deadlines.
//
// The server is a real nats-server without JetStream; a subscriber that
// never replies stands for a JetStream that does not answer, so each API
// request waits out its caller's context instead of failing at once with
// "no responders".
func TestAHangingConsumerHoldsUpNoOtherCall(t *testing.T) {
	t.Parallel()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	creating := make(chan struct{}, 16)
	silent, err := nc.Subscribe("$JS.API.>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "$JS.API.CONSUMER.CREATE.") {
			creating <- struct{}{}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = silent.Unsubscribe() }) // the connection closes after
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}

	hungCtx, cancelHung := context.WithTimeout(context.Background(), time.Minute)
	defer cancelHung()
	hung := make(chan error, 1)
	go func() {
		_, err := c.Submit(hungCtx, ledger.Submit{Account: "vision", ID: "hung", GPUs: 1, Command: []string{"true"}})
		hung <- err
	}()
	select {
	case <-creating:
	case <-time.After(30 * time.Second):
		t.Fatal("the first call never asked for its consumer")
	}

	const deadline = 300 * time.Millisecond
	calls := map[string]func(context.Context) error{
		"submit on the same filter": func(ctx context.Context) error {
			_, err := c.Submit(ctx, ledger.Submit{Account: "vision", ID: "same", GPUs: 1, Command: []string{"true"}})
			return err
		},
		"submit on another filter": func(ctx context.Context) error {
			_, err := c.Submit(ctx, ledger.Submit{Account: "nlp", ID: "other", GPUs: 1, Command: []string{"true"}})
			return err
		},
		"read an account": func(ctx context.Context) error {
			_, err := c.Account(ctx, "vision")
			return err
		},
	}
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			began := time.Now()
			err := call(ctx)
			// Far more than the deadline, far less than the hung call's
			// minute: a margin for a loaded machine, not a speed claim.
			if took := time.Since(began); took > 20*time.Second {
				t.Errorf("%s: returned after %v, its deadline was %v", name, took, deadline)
			}
			if err == nil {
				t.Errorf("%s: no error, though JetStream never answered", name)
			}
		})
	}
	wg.Wait()
	select {
	case err := <-hung:
		t.Fatalf("the hung call returned early: %v", err)
	default:
	}
	cancelHung()
	if err := <-hung; !errors.Is(err, context.Canceled) {
		t.Errorf("the hung call: %v, want its context's end", err)
	}
}
