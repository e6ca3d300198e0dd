// Tests of the embedded servers themselves: a restarted server keeps its
// URL and its streams and its clients reconnect to it; a cluster elects
// leaders, survives the loss of the node that leads a stream, and takes the
// node back with its data.
package natstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natstest"
)

func TestRestartKeepsURLAndStore(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	url := srv.ClientURL()
	nc, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	nc.SetReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} })

	srv.Stop()
	if srv.Running() {
		t.Fatal("Running after Stop")
	}
	srv.Restart(t)
	if got := srv.ClientURL(); got != url {
		t.Errorf("URL after restart = %s, want %s", got, url)
	}
	select {
	case <-reconnected: // the client kept dialling the same URL
	case <-ctx.Done():
		t.Fatal("the client did not reconnect to the restarted server")
	}
	if _, err := js.Publish(ctx, "s.2", []byte("after")); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 2 {
		t.Errorf("stream holds %d messages after the restart, want 2 (the store dir was kept)", n)
	}
}

func TestClusterSurvivesLosingStreamLeader(t *testing.T) {
	t.Parallel()
	c := natstest.StartCluster(t)
	_, js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.1", []byte("one")); err != nil {
		t.Fatal(err)
	}
	c.WaitCurrent(t, "S")
	old := c.StreamLeader(t, "S")
	old.Stop()
	next := c.StreamLeader(t, "S")
	if next == old {
		t.Fatalf("%s still leads S after it stopped", old.Name())
	}
	if _, err := js.Publish(ctx, "s.2", []byte("two")); err != nil {
		t.Fatalf("publish with %s down: %v", old.Name(), err)
	}
	old.Restart(t)
	c.WaitCurrent(t, "S")
	if !old.JetStreamIsStreamCurrent(natstest.Account, "S") {
		t.Errorf("%s is not current on S after its restart", old.Name())
	}
	s, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	if info.State.Msgs != 2 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Errorf("stream S after the restart: %d messages, cluster %+v; want 2 messages and 2 replicas besides the leader",
			info.State.Msgs, info.Cluster)
	}
}
