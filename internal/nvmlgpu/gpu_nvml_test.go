//go:build nvml && cgo

// This test checks the adapter against a real NVIDIA driver: Open
// succeeds, Devices reads every GPU, and WatchHealth waits on real events
// while Devices runs beside it. It needs a GPU and libnvidia-ml.so.1, so it
// builds only with -tags nvml:
//
//	go test -c -tags nvml -o nvmlgpu.test ./internal/nvmlgpu
//	./nvmlgpu.test -test.run TestNVML -test.v
//
// It is self-contained: it uses no helper of the mock tests.
package nvmlgpu_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/nvmlgpu"
)

// TestNVML is not parallel, and opens the library once for all subtests:
// go-nvml races on a global when Init and Shutdown run beside other calls.
func TestNVML(t *testing.T) {
	start := time.Now()
	g, err := nvmlgpu.Open()
	if err != nil {
		t.Fatalf("Open() on a GPU host = %v", err)
	}
	t.Logf("Open took %v", time.Since(start))
	defer func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}()
	if g.Simulated() {
		t.Error("Open().Simulated() = true, want false")
	}
	if g.Sim() != nil {
		t.Error("Open().Sim() != nil, want nil")
	}

	t.Run("Devices", func(t *testing.T) {
		start := time.Now()
		devices, err := g.Devices()
		if err != nil {
			t.Fatalf("Devices() = %v", err)
		}
		t.Logf("Devices took %v", time.Since(start))
		if len(devices) == 0 {
			t.Fatal("Devices() = no devices, want at least 1")
		}
		healthy := 0
		for i, d := range devices {
			t.Logf("device %d: %+v", i, d)
			if d.Index != i {
				t.Errorf("device %d: Index = %d", i, d.Index)
			}
			if !strings.HasPrefix(d.UUID, "GPU-") && !strings.HasPrefix(d.UUID, "MIG-") {
				t.Errorf("device %d: UUID = %q, want GPU-… or MIG-…", i, d.UUID)
			}
			if d.Processes < -1 {
				t.Errorf("device %d: Processes = %d, want -1 or more", i, d.Processes)
			}
			if d.Err != "" {
				continue
			}
			healthy++
			if d.Model == "" {
				t.Errorf("device %d: no Model", i)
			}
			if d.MemoryMiB <= 0 {
				t.Errorf("device %d: MemoryMiB = %d, want > 0", i, d.MemoryMiB)
			}
			if d.UsedMiB < 0 || d.UsedMiB > d.MemoryMiB {
				t.Errorf("device %d: UsedMiB = %d, want 0 to %d", i, d.UsedMiB, d.MemoryMiB)
			}
		}
		if healthy == 0 {
			t.Error("every device has an Err, want at least one without")
		}
	})

	t.Run("WatchHealth", func(t *testing.T) {
		const watchFor = 2 * time.Second
		ctx, cancel := context.WithTimeout(t.Context(), watchFor)
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- g.WatchHealth(ctx, func(uuid, reason string) {
				// A real report means a broken GPU: worth failing on.
				t.Errorf("unhealthy(%q, %q)", uuid, reason)
			})
		}()

		// Snapshots must not wait behind the watcher's event wait.
		for ctx.Err() == nil {
			s := time.Now()
			if _, err := g.Devices(); err != nil {
				t.Errorf("Devices() during WatchHealth = %v", err)
			}
			if d := time.Since(s); d > 500*time.Millisecond {
				t.Errorf("Devices() during WatchHealth took %v, want well under a wait timeout", d)
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}

		select {
		case err := <-done:
			if err != nil {
				t.Errorf("WatchHealth() = %v, want nil", err)
			}
		case <-time.After(watchFor + 5*time.Second):
			t.Fatalf("WatchHealth still running %v after its ctx ended", 5*time.Second)
		}
		if d := time.Since(start); d < watchFor {
			t.Logf("WatchHealth returned after %v, before its ctx ended: no device supports health events", d)
		} else {
			t.Logf("WatchHealth returned %v after start", d)
		}
	})
}
