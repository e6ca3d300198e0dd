//go:build nvml && cgo

// A test for a machine with a real NVIDIA GPU and driver: discovery, free
// detection, a claim, and a child process, started as the worker starts an
// attempt's, that sees its claimed device's UUID in CUDA_VISIBLE_DEVICES and
// finds the device by it. Run it with `go test -tags nvml ./worker`.
package worker_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

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
	a := worker.Attempt{Job: "nvml-test", N: 1}
	got, err := c.Claim(a, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(a)
	if !strings.HasPrefix(got[0].UUID, "GPU-") {
		t.Fatalf("claimed %q, want a GPU UUID", got[0].UUID)
	}

	// The child runs as the worker runs an attempt, so it sees the
	// environment gpuq gives it, whose devices win over the worker's own.
	// It prints the devices it was given and, if nvidia-smi is installed,
	// the UUID the driver finds by that name.
	t.Setenv("CUDA_VISIBLE_DEVICES", "the-worker's-own")
	smi, _ := exec.LookPath("nvidia-smi") // "" when not installed; checked below
	var stdout, stderr strings.Builder
	o, err := worker.RunAttemptProcess(worker.Spec{Attempt: a, Devices: []string{got[0].UUID}, Walltime: time.Minute,
		Env: map[string]string{"SMI": smi},
		Command: []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES"
if [ -n "$SMI" ]; then "$SMI" --query-gpu=uuid --format=csv,noheader -i "$CUDA_VISIBLE_DEVICES"; fi`}},
		&stdout, &stderr)
	if err != nil || o.ExitCode != 0 {
		t.Fatalf("the child: %+v, %v; stdout %q, stderr %q", o, err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if lines[0] != got[0].UUID {
		t.Fatalf("the child's CUDA_VISIBLE_DEVICES is %q, want %s", lines[0], got[0].UUID)
	}
	if smi == "" {
		t.Skip("nvidia-smi is not installed; cannot check that the driver finds the device by that name")
	}
	if len(lines) != 2 || lines[1] != got[0].UUID {
		t.Fatalf("nvidia-smi -i %s in the child found %q; stderr %q", got[0].UUID, lines[1:], stderr.String())
	}
}
