//go:build cgo

// Claim tests against go-nvml's mock servers (through nvmlgpu.Simulate):
// which devices count as free, all-or-nothing claims, and claims made
// concurrently never sharing a device.
package worker_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/worker"
)

func simulate(t *testing.T, n int) (*nvmlgpu.GPU, []string) {
	t.Helper()
	g, err := nvmlgpu.Simulate("claims-"+t.Name(), "dgxh100", n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = g.Close() })
	devs, err := g.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
	}
	return g, uuids
}

func TestClaimSkipsDevicesThatAreNotFree(t *testing.T) {
	t.Parallel()
	g, uuids := simulate(t, 5)
	sim := g.Sim()
	sim.SetProcesses(0, 1)    // a compute process gpuq did not start
	sim.SetUsedMiB(1, 20_000) // memory in use
	sim.SetMIG(2, true)       // MIG mode: never claimed whole
	c := worker.NewClaims(g, 1024)
	c.MarkUnhealthy(uuids[3], "Xid 79")

	got, err := c.Claim(worker.Attempt{Job: "j", N: 1}, 1)
	if err != nil || len(got) != 1 || got[0].UUID != uuids[4] {
		t.Fatalf("Claim(1) = %v, %v; want only the free device %s", got, err, uuids[4])
	}
	_, err = c.Claim(worker.Attempt{Job: "k", N: 1}, 1)
	if !errors.Is(err, worker.ErrNotEnoughGPUs) {
		t.Fatalf("second claim = %v, want ErrNotEnoughGPUs", err)
	}
	for _, why := range []string{"1 compute process(es)", "MiB of memory in use", "MIG mode", "unhealthy: Xid 79", "claimed by j attempt 1"} {
		if !strings.Contains(err.Error(), why) {
			t.Errorf("refusal %q does not say %q", err, why)
		}
	}
	// The busy device frees up: it can be claimed again.
	sim.SetProcesses(0, 0)
	if got, err := c.Claim(worker.Attempt{Job: "k", N: 1}, 1); err != nil || got[0].UUID != uuids[0] {
		t.Errorf("after the process left: %v, %v", got, err)
	}
	// An unhealthy device is never offered again, and its holder is named.
	if a, held := c.MarkUnhealthy(uuids[4], "Xid 48"); !held || a.Job != "j" {
		t.Errorf("MarkUnhealthy of a claimed device = %v, %v", a, held)
	}
	c.Release(worker.Attempt{Job: "j", N: 1})
	if _, err := c.Claim(worker.Attempt{Job: "m", N: 1}, 1); !errors.Is(err, worker.ErrNotEnoughGPUs) {
		t.Errorf("claim after the only other device failed = %v", err)
	}
	snap, err := c.Snapshot()
	if err != nil || snap[4].Healthy || !strings.Contains(snap[4].Why, "Xid 48") {
		t.Errorf("snapshot of the failed device = %+v, %v", snap[4], err)
	}
}

func TestClaimIsAllOrNothing(t *testing.T) {
	t.Parallel()
	g, _ := simulate(t, 4)
	c := worker.NewClaims(g, 1024)
	if _, err := c.Claim(worker.Attempt{Job: "a", N: 1}, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Claim(worker.Attempt{Job: "b", N: 1}, 2); !errors.Is(err, worker.ErrNotEnoughGPUs) {
		t.Fatalf("claim of 2 with 1 free = %v", err)
	}
	// The failed claim took nothing: the last device is still free.
	if got, err := c.Claim(worker.Attempt{Job: "c", N: 1}, 1); err != nil || len(got) != 1 {
		t.Errorf("claim of the last device = %v, %v", got, err)
	}
	// A repeated claim by the same attempt returns what it holds.
	again, err := c.Claim(worker.Attempt{Job: "a", N: 1}, 3)
	if err != nil || len(again) != 3 {
		t.Errorf("repeated claim = %v, %v", again, err)
	}
}

func TestConcurrentClaimsNeverOverlap(t *testing.T) {
	t.Parallel()
	g, _ := simulate(t, 8)
	c := worker.NewClaims(g, 1024)
	var mu sync.Mutex
	owner := map[string]string{}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := worker.Attempt{Job: fmt.Sprintf("j%d", i), N: 1}
			for round := 0; round < 20; round++ {
				got, err := c.Claim(a, 1+i%3)
				if err != nil {
					continue
				}
				mu.Lock()
				for _, d := range got {
					if o := owner[d.UUID]; o != "" {
						t.Errorf("%s claimed by %s and %s at once", d.UUID, o, a.Job)
					}
					owner[d.UUID] = a.Job
				}
				mu.Unlock()
				// Hold the devices a while, so other claims run meanwhile.
				runtime.Gosched()
				mu.Lock()
				for _, d := range got {
					if o := owner[d.UUID]; o != a.Job {
						t.Errorf("%s, claimed by %s, was taken by %q meanwhile", d.UUID, a.Job, o)
					}
					delete(owner, d.UUID)
				}
				mu.Unlock()
				c.Release(a)
			}
		}()
	}
	wg.Wait()
}

// countingGPU counts the reads of a real (simulated) GPU.
type countingGPU struct {
	*nvmlgpu.GPU
	mu        sync.Mutex
	snapshots int
	reads     []int // device indexes read one at a time
}

func (g *countingGPU) Devices() ([]worker.Device, error) {
	g.mu.Lock()
	g.snapshots++
	g.mu.Unlock()
	return g.GPU.Devices()
}

func (g *countingGPU) Device(i int) (worker.Device, error) {
	g.mu.Lock()
	g.reads = append(g.reads, i)
	g.mu.Unlock()
	return g.GPU.Device(i)
}

// TestClaimReadsOnlyTheDevicesItMayTake: once a snapshot has named the
// devices, a claim reads afresh only devices no attempt holds, in index
// order, until it has enough; a device found busy that way is not taken,
// and the full read then says why the claim fails.
func TestClaimReadsOnlyTheDevicesItMayTake(t *testing.T) {
	t.Parallel()
	sg, uuids := simulate(t, 8)
	g := &countingGPU{GPU: sg}
	c := worker.NewClaims(g, 1024)
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		got, err := c.Claim(worker.Attempt{Job: fmt.Sprintf("j%d", i), N: 1}, 1)
		if err != nil || len(got) != 1 || got[0].UUID != uuids[i] {
			t.Fatalf("claim %d = %v, %v; want %s", i, got, err, uuids[i])
		}
	}
	if g.snapshots != 1 || fmt.Sprint(g.reads) != "[0 1 2 3 4 5 6]" {
		t.Errorf("7 claims read %d snapshots and devices %v; want 1 (the first) and each claim's own device", g.snapshots, g.reads)
	}
	g.reads = nil
	sg.Sim().SetProcesses(7, 1) // the one left is in use by a process gpuq did not start
	_, err := c.Claim(worker.Attempt{Job: "late", N: 1}, 1)
	if !errors.Is(err, worker.ErrGPUsBusy) || !strings.Contains(err.Error(), "compute process") {
		t.Errorf("a claim of the busy device = %v, want ErrGPUsBusy saying why", err)
	}
	if fmt.Sprint(g.reads) != "[7]" || g.snapshots != 2 {
		t.Errorf("the refused claim read devices %v and %d snapshots in all; want [7], then a snapshot for why", g.reads, g.snapshots)
	}
	c.Release(worker.Attempt{Job: "j3", N: 1})
	got, err := c.Claim(worker.Attempt{Job: "next", N: 1}, 1)
	if err != nil || len(got) != 1 || got[0].UUID != uuids[3] {
		t.Errorf("a claim after j3 ended = %v, %v; want %s", got, err, uuids[3])
	}
}

// gatedGPU holds the first device read until gate is closed.
type gatedGPU struct {
	*nvmlgpu.GPU
	once    sync.Once
	reading chan struct{} // closed when the first read has begun
	gate    chan struct{}
}

func (g *gatedGPU) Device(i int) (worker.Device, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.reading)
		<-g.gate
	}
	return g.GPU.Device(i)
}

// TestClaimsOfOneAttemptAtOnceHoldItsCount: a claim of an attempt that
// another claim of the same attempt overtakes while it reads the devices
// (a redelivered order confirmed beside the first) returns what the first
// took, and the attempt holds what it asked for once, not twice.
func TestClaimsOfOneAttemptAtOnceHoldItsCount(t *testing.T) {
	t.Parallel()
	sg, uuids := simulate(t, 8)
	g := &gatedGPU{GPU: sg, reading: make(chan struct{}), gate: make(chan struct{})}
	c := worker.NewClaims(g, 1024)
	if _, err := c.Snapshot(); err != nil {
		t.Fatal(err)
	}
	a := worker.Attempt{Job: "j", N: 1}
	slow := make(chan []worker.Device, 1)
	go func() {
		devs, err := c.Claim(a, 1)
		if err != nil {
			t.Error(err)
		}
		slow <- devs
	}()
	<-g.reading // the slow claim reads device 0
	fast, err := c.Claim(a, 1)
	if err != nil || len(fast) != 1 || fast[0].UUID != uuids[0] {
		t.Fatalf("the overtaking claim = %v, %v; want %s", fast, err, uuids[0])
	}
	close(g.gate)
	if devs := <-slow; len(devs) != 1 || devs[0].UUID != uuids[0] {
		t.Errorf("the overtaken claim = %v, want the GPU the attempt holds, %s", devs, uuids[0])
	}
	st, err := c.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, s := range st {
		if s.Holder == a {
			held++
		}
	}
	if held != 1 {
		t.Errorf("two claims of 1 GPU by one attempt left it holding %d", held)
	}
}
