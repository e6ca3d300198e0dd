package natsbus_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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

// TestCommandLogPullsAreHeartbeatedEverySecond: the scheduler's read of
// the command log pulls with a 1s heartbeat and a 10s expiry, so a pull
// the server dropped stalls the fold for 2s, not jetstream's default 10s.
func TestCommandLogPullsAreHeartbeatedEverySecond(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	watch := srv.Connect(t)
	pulls, err := watch.SubscribeSync("$JS.API.CONSUMER.MSG.NEXT." + n.CmdStream() + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}
	fol, err := natsbus.NewCommandLog(js, n).Follow(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fol.Stop()
	wantPullHeartbeat(t, pulls, time.Second, 10*time.Second)
}

// wantPullHeartbeat reads the next pull request pulls sees and checks its
// idle heartbeat and expiry.
func wantPullHeartbeat(t *testing.T, pulls *nats.Subscription, heartbeat, expires time.Duration) {
	t.Helper()
	m, err := pulls.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatalf("no pull request: %v", err)
	}
	var req struct {
		Expires   time.Duration `json:"expires"`
		Heartbeat time.Duration `json:"idle_heartbeat"`
	}
	if err := json.Unmarshal(m.Data, &req); err != nil {
		t.Fatalf("pull request %s: %v", m.Data, err)
	}
	if req.Heartbeat != heartbeat || req.Expires != expires {
		t.Errorf("pull request %s: heartbeat %v, expiry %v; want %v and %v", m.Data, req.Heartbeat, req.Expires, heartbeat, expires)
	}
}
