package natsbus

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// silentJS never answers an asynchronous publish and stores every
// synchronous one at once.
type silentJS struct {
	jetstream.JetStream // unused methods panic
	mu                  sync.Mutex
	stored              []string // the ids published synchronously
}

func (s *silentJS) PublishMsgAsync(*nats.Msg, ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return silentFuture{}, nil
}

func (s *silentJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stored = append(s.stored, m.Header.Get(subjects.MsgIDHeader))
	return &jetstream.PubAck{}, nil
}

// silentFuture's channels are nil: receiving from them blocks forever.
type silentFuture struct{ jetstream.PubAckFuture }

func (silentFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (silentFuture) Err() <-chan error            { return nil }

// TestPublishBoundsTheWaitForAcks: when no acknowledgement comes within the
// timeout, every message still unanswered is published one by one, and
// none is waited for again.
func TestPublishBoundsTheWaitForAcks(t *testing.T) {
	t.Parallel()
	js := &silentJS{}
	p := NewPublisher(js)
	p.ackTimeout = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs := []wire.Message{
		{Subject: "gpuq.cmd.sched.dispatch", MsgID: "a"},
		{Subject: "gpuq.cmd.sched.dispatch", MsgID: "b"},
		{Subject: "gpuq.cmd.sched.dispatch", MsgID: "c"},
	}
	if _, err := p.Publish(ctx, msgs); err != nil {
		t.Fatalf("Publish = %v, want each message stored one by one after the timeout", err)
	}
	if got := js.stored; len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Errorf("published one by one: %v, want [a b c]", got)
	}
}

// windowJS answers every asynchronous publish after its first silent ones
// at once, and counts how many went out ahead of the one awaited.
type windowJS struct {
	jetstream.JetStream // unused methods panic
	mu                  sync.Mutex
	silent              int             // the first this many publishes are never answered
	silentIDs           map[string]bool // and these are never answered either
	created, awaited    int
	most                int      // the most created beyond those awaited
	stored              []string // the ids published synchronously
}

func (w *windowJS) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.created++
	w.most = max(w.most, w.created-w.awaited)
	if w.created <= w.silent || w.silentIDs[m.Header.Get(subjects.MsgIDHeader)] {
		return &windowFuture{js: w}, nil
	}
	ok := make(chan *jetstream.PubAck, 1)
	ok <- &jetstream.PubAck{}
	return &windowFuture{js: w, ok: ok}, nil
}

func (w *windowJS) PublishMsg(_ context.Context, m *nats.Msg, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stored = append(w.stored, m.Header.Get(subjects.MsgIDHeader))
	return &jetstream.PubAck{}, nil
}

type windowFuture struct {
	jetstream.PubAckFuture
	js   *windowJS
	ok   chan *jetstream.PubAck
	seen bool
}

func (f *windowFuture) Ok() <-chan *jetstream.PubAck {
	if !f.seen {
		f.seen = true
		f.js.mu.Lock()
		f.js.awaited++
		f.js.mu.Unlock()
	}
	return f.ok
}
func (f *windowFuture) Err() <-chan error { return nil }

// TestPublishKeepsAWindowInFlight: each acknowledgement taken lets the next
// message go, never more than the window ahead; after a timeout only the
// messages then in flight and unanswered are published one by one, and the
// rest go out asynchronously again.
//
// The ack timeout is a microsecond, shorter than any wait to be scheduled,
// so the timer has always fired by the time an answered message is awaited:
// the test holds however the goroutines are scheduled (with 50ms it failed
// under load, when a wait to run outlasted the timeout and the select took
// the timer over an answer already in).
func TestPublishKeepsAWindowInFlight(t *testing.T) {
	t.Parallel()
	js := &windowJS{silent: 3}
	p := NewPublisher(js)
	p.ackTimeout = time.Microsecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs := make([]wire.Message, 3*window)
	for i := range msgs {
		msgs[i] = wire.Message{Subject: "gpuq.cmd.sched.dispatch", MsgID: fmt.Sprint(i)}
	}
	stored, err := p.Publish(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	if stored != len(msgs) {
		t.Errorf("Publish stored %d, want %d", stored, len(msgs))
	}
	if js.most > window {
		t.Errorf("%d publishes went out ahead of the one awaited, more than the window of %d", js.most, window)
	}
	if len(js.stored) != js.silent {
		t.Errorf("%d messages published one by one after the timeout, want the %d unanswered then", len(js.stored), js.silent)
	}
	if js.created != len(msgs) {
		t.Errorf("%d messages published asynchronously, want all %d (the ones after the timeout too)", js.created, len(msgs))
	}
}

// TestPublishBoundsEveryTimeoutRound: after a timeout round whose last
// message had its answer in (so it was not published again), the wait for
// the next message that goes out is bounded again. It was not: a second
// lost answer left the publish, and the leader's flush, waiting forever.
func TestPublishBoundsEveryTimeoutRound(t *testing.T) {
	t.Parallel()
	js := &windowJS{silentIDs: map[string]bool{"0": true, fmt.Sprint(window): true}}
	p := NewPublisher(js)
	p.ackTimeout = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	msgs := make([]wire.Message, window+2)
	for i := range msgs {
		msgs[i] = wire.Message{Subject: "gpuq.cmd.sched.dispatch", MsgID: fmt.Sprint(i)}
	}
	if _, err := p.Publish(ctx, msgs); err != nil {
		t.Fatalf("Publish = %v, want both unanswered messages published one by one after their timeouts", err)
	}
	if got := js.stored; len(got) != 2 || got[0] != "0" || got[1] != fmt.Sprint(window) {
		t.Errorf("published one by one: %v, want [0 %d]", got, window)
	}
}
