// Tests of how the daemons start, in process against real embedded servers:
// a scheduler or worker started while the server is down waits for it and
// says so once, and a configuration error (a --replicas that would lower
// replication, a server without gpuq's buckets) fails at once with what to
// do.
package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// daemonConn connects as dial does: it keeps trying while the server is away.
func daemonConn(t *testing.T, urls string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(urls, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// testLogger logs to the test's output and to buf.
func testLogger(t *testing.T, buf *syncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(io.MultiWriter(t.Output(), buf), nil))
}

// waitLog waits until logs holds want.
func waitLog(t *testing.T, logs *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the logs within 30s:\n%s", want, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestSchedulerStartWaitsForTheServer(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	srv.Stop()
	var logs syncBuffer
	nc := daemonConn(t, srv.URLs())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type started struct{ err error }
	done := make(chan started, 1)
	go func() {
		_, err := startScheduler(ctx, nc, subjects.Default, schedulerOpts{name: "s1", leaseTTL: time.Second}, testLogger(t, &logs))
		done <- started{err}
	}()
	waitLog(t, &logs, "the server cannot answer yet")
	srv.Restart(t)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("startScheduler after the server came back: %v", r.err)
		}
	case <-ctx.Done():
		t.Fatal("startScheduler did not return after the server came back")
	}
	out := logs.String()
	for want, n := range map[string]int{"the server cannot answer yet": 1, "the server answers again": 1, "streams and buckets ready": 1} {
		if got := strings.Count(out, want); got != n {
			t.Errorf("%q logged %d times, want %d:\n%s", want, got, n, out)
		}
	}
}

func TestSchedulerRefusesToLowerReplication(t *testing.T) {
	t.Parallel()
	cl := natstest.StartCluster(t)
	_, js := cl.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	nc := daemonConn(t, cl.URLs())
	_, err := startScheduler(ctx, nc, n, schedulerOpts{name: "s1", replicas: 1, leaseTTL: time.Second}, testLogger(t, &logs))
	if err == nil || errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "stream GPUQ_CMD has 3 replicas; --replicas 1 would lower it: leave the flag out to keep 3") {
		t.Fatalf("startScheduler --replicas 1 over R3 = %v", err)
	}
	if strings.Contains(logs.String(), "retrying") {
		t.Errorf("the refusal was retried:\n%s", logs.String())
	}
	if _, err := startScheduler(ctx, nc, n, schedulerOpts{name: "s2", leaseTTL: time.Second}, testLogger(t, &logs)); err != nil {
		t.Fatalf("startScheduler without --replicas: %v", err)
	}
	if !strings.Contains(logs.String(), "replicas=3 chosen=adopted") {
		t.Errorf("a scheduler without --replicas logged:\n%s", logs.String())
	}
}

func TestWorkerStartWaitsForTheServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := subjects.Default
	gpu, err := nvmlgpu.Simulate("h1", "dgxh100", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gpu.Close() }) // the test is over
	o := workerOpts{host: "h1", stateDir: t.TempDir()}

	// A reachable server without gpuq's buckets is a mistake to explain
	// at once.
	bare := natstest.Start(t)
	var logs syncBuffer
	_, err = newWorker(ctx, daemonConn(t, bare.URLs()), n, o, gpu, testLogger(t, &logs))
	if err == nil || !strings.Contains(err.Error(), "start a scheduler first") {
		t.Fatalf("newWorker on a server without buckets = %v", err)
	}

	// An unreachable one is waited for.
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	type started struct{ err error }
	done := make(chan started, 1)
	go func() {
		_, err := newWorker(ctx, daemonConn(t, srv.URLs()), n, o, gpu, testLogger(t, &logs))
		done <- started{err}
	}()
	waitLog(t, &logs, "the server cannot answer yet")
	srv.Restart(t)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("newWorker after the server came back: %v", r.err)
		}
	case <-ctx.Done():
		t.Fatal("newWorker did not return after the server came back")
	}
	if got := strings.Count(logs.String(), "the server cannot answer yet"); got != 1 {
		t.Errorf("waiting logged %d times, want once:\n%s", got, logs.String())
	}
}

// TestMaxEffectBytesFollowsTheServer: a server whose max_payload is below
// gpuq's default message size bounds what the scheduler sends, so an
// effect it cannot store is refused once instead of retried forever.
func TestMaxEffectBytesFollowsTheServer(t *testing.T) {
	for _, c := range []struct {
		payload int64
		want    int
	}{{0, 0}, {wire.MaxMessageBytes, 0}, {8 << 20, 0}, {64 << 10, 60 << 10}, {2 << 10, 1 << 10}} {
		if got := maxEffectBytes(c.payload); got != c.want {
			t.Errorf("maxEffectBytes(%d) = %d, want %d", c.payload, got, c.want)
		}
	}
}
