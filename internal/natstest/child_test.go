package natstest_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natstest"
)

func TestMain(m *testing.M) {
	if natstest.ServeChild() {
		return
	}
	os.Exit(m.Run())
}

// TestStartChild: a child server is another process, stores what it is
// sent, and is gone once stopped.
func TestStartChild(t *testing.T) {
	t.Parallel()
	srv := natstest.StartChild(t)
	p := srv.Process()
	if p == nil || p.Pid == os.Getpid() {
		t.Fatalf("child process %v, this process %d", p, os.Getpid())
	}
	if natstest.Start(t).Process() != nil {
		t.Error("an embedded server names a child process")
	}
	nc, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "CHILD", Subjects: []string{"child.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, "child.x", []byte("x"))
	if err != nil || ack.Sequence != 1 {
		t.Fatalf("publish: %+v, %v", ack, err)
	}
	srv.Stop()
	if srv.Running() {
		t.Error("running after Stop")
	}
	deadline := time.Now().Add(10 * time.Second)
	for nc.IsConnected() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if nc.IsConnected() {
		t.Error("the client is still connected to a stopped child")
	}
	if err := p.Signal(syscall.Signal(0)); err == nil {
		t.Error("the child process is still there after Stop")
	}
}
