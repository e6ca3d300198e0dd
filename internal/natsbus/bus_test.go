package natsbus_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestPublishCountsWhatItStoredAnew: messages the stream already had inside
// its duplicate window are stored, but not anew, and the count says so; the
// scheduler waits to read back only what a publish stored anew.
func TestPublishCountsWhatItStoredAnew(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	p := natsbus.NewPublisher(js)
	msgs := []wire.Message{
		{Subject: n.Sched(subjects.SchedLost), MsgID: "lost.j.1", Data: []byte(`{}`)},
		{Subject: n.Sched(subjects.SchedLost), MsgID: "lost.j.2", Data: []byte(`{}`)},
	}
	if stored, err := p.Publish(ctx, msgs); err != nil || stored != 2 {
		t.Fatalf("first Publish = %d, %v; want 2 stored anew", stored, err)
	}
	if stored, err := p.Publish(ctx, msgs); err != nil || stored != 0 {
		t.Errorf("Publish of the same ids again = %d, %v; want 0 stored anew", stored, err)
	}
	more := append(msgs, wire.Message{Subject: n.Sched(subjects.SchedLost), MsgID: "lost.j.3", Data: []byte(`{}`)})
	if stored, err := p.Publish(ctx, more); err != nil || stored != 1 {
		t.Errorf("Publish with one new id = %d, %v; want 1 stored anew", stored, err)
	}
}
