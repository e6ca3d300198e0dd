package natsbus_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestHostsTimesOutHeartbeats: the hosts bucket leaves no delete markers
// (it refuses rollups, which markers need), so the watcher itself reports a
// host gone once its heartbeat is older than the TTL the heartbeat states,
// and keeps a host whose worker renews in time.
func TestHostsTimesOutHeartbeats(t *testing.T) {
	t.Parallel()
	_, js := natstest.Start(t).JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	hkv, err := js.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	beat := func(host string, ttl time.Duration) {
		t.Helper()
		wb, err := natsbus.NewWorkerBus(js, n, host, hkv)
		if err != nil {
			t.Fatal(err)
		}
		if err := wb.Beat(ctx, wire.Heartbeat{Host: host, Time: time.Now()}, ttl); err != nil {
			t.Fatalf("beat %s: %v", host, err)
		}
	}
	beat("steady", 2*time.Second)
	beat("gone", time.Second)
	ups, err := natsbus.NewHosts(hkv, slog.New(slog.NewTextHandler(io.Discard, nil))).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stop := time.NewTicker(500 * time.Millisecond)
	defer stop.Stop()
	for {
		var u scheduler.HostUpdate
		select {
		case u = <-ups:
		case <-stop.C:
			beat("steady", 2*time.Second)
			continue
		case <-ctx.Done():
			t.Fatal("no expiry reported")
		}
		if u.Host != nil {
			if u.Host.TTL == "" {
				t.Errorf("heartbeat of %s states no TTL", u.Name)
			}
			continue
		}
		if u.Name != "gone" {
			t.Fatalf("%s reported gone although renewed in time", u.Name)
		}
		if waited := time.Since(start); waited < 900*time.Millisecond {
			t.Fatalf("gone after %v, before its 1s TTL", waited)
		}
		break
	}
	// The key itself expires on the server too, without a marker.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := hkv.Get(ctx, "gone")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired key, 5s on: %v", err)
		}
	}
}
