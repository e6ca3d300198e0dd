//go:build nvml && cgo

// A test for a machine with a real NVIDIA GPU and driver: discovery, free
// detection, a claim, and a child process that finds its claimed device by
// the UUID gpuq gives it. Run it with `go test -tags nvml ./worker`.
package worker_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/worker"
)

func TestRealGPUClaimAndChild(t *testing.T) {
	g, err := nvmlgpu.Open()
	if err != nil {
		t.Fatalf("open NVML: %v", err)
	}
	defer func() { _ = g.Close() }() // test teardown
	devs, err := g.Devices()
	if err != nil || len(devs) == 0 {
		t.Fatalf("Devices() = %v, %v", devs, err)
	}
	c := worker.NewClaims(g, 1024)
	snap, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	free := 0
	for _, s := range snap {
		t.Logf("%d %s %s %d/%d MiB processes=%d mig=%v why=%q", s.Index, s.UUID, s.Model, s.UsedMiB, s.MemoryMiB, s.Processes, s.MIG, s.Why)
		if s.Why == "" {
			free++
		}
	}
	if free == 0 {
		t.Skip("no free GPU on this machine (all busy, MIG or failing); nothing to claim")
	}
	got, err := c.Claim(worker.Attempt{Job: "nvml-test", N: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(worker.Attempt{Job: "nvml-test", N: 1})
	if !strings.HasPrefix(got[0].UUID, "GPU-") {
		t.Fatalf("claimed %q, want a GPU UUID", got[0].UUID)
	}
	smi, err := exec.LookPath("nvidia-smi")
	if err != nil {
		t.Skip("nvidia-smi is not installed; cannot check what the child sees")
	}
	cmd := exec.Command("sh", "-c", `"$SMI" --query-gpu=uuid --format=csv,noheader -i "$CUDA_VISIBLE_DEVICES"`)
	cmd.Env = append(cmd.Environ(), "SMI="+smi, "CUDA_VISIBLE_DEVICES="+got[0].UUID, "NVIDIA_VISIBLE_DEVICES="+got[0].UUID)
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != got[0].UUID {
		t.Fatalf("the child looked up %s and got %q, %v", got[0].UUID, out, err)
	}
}
