package natsbus

import (
	"context"
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
