package worker

import (
	"context"
	"log/slog"
	"testing"
	"time"
)

// TestNoHeartbeatAfterLeave checks that a stopping worker writes no
// heartbeat once it has removed it: a late beat would bring the host back
// for HeartbeatTTL.
func TestNoHeartbeatAfterLeave(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	// Leave takes a while, as a round trip to the server does; a heartbeat
	// still running then beats meanwhile.
	bus.leave = func() { time.Sleep(20 * time.Millisecond) }
	w, err := New(Config{Host: "h", GPU: fakeGPU{n: 1}, Bus: bus, StateDir: t.TempDir(),
		Logger:            slog.New(slog.NewTextHandler(t.Output(), nil)),
		HeartbeatInterval: time.Microsecond, HeartbeatTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-bus.beat
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	events, _ := bus.recorded()
	if len(events) == 0 || events[len(events)-1] != "leave" {
		for i, e := range events {
			if e == "leave" {
				t.Fatalf("%d heartbeats after Leave", len(events)-i-1)
			}
		}
		t.Fatal("the worker never left")
	}
}
