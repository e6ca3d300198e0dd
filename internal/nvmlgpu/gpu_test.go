//go:build cgo

// These tests check the NVML adapter against go-nvml's mock servers: that
// Simulate builds the devices it promises, with UUIDs stable per host; that
// Devices reports busy, full, MIG-enabled and broken devices as such
// without failing as a whole; that WatchHealth turns critical events into
// unhealthy reports, ignores application Xids and stops cleanly; and that a
// failed Init is the last call made on a library. Conditions are injected
// through Sim or through the mocks' Func fields. Nothing sleeps: a test
// waits on a channel with a deadline.
package nvmlgpu

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuq/gpuq/worker"
)

// waitLimit bounds every wait on a channel; reaching it fails the test.
const waitLimit = 10 * time.Second

var uuidPattern = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestSimulateEnumerates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		model     string
		count     int
		wantModel string
		wantMiB   int64
	}{
		{"dgxh100", 2, "NVIDIA H100 80GB HBM3", 81920},
		{"dgxh100", 8, "NVIDIA H100 80GB HBM3", 81920},
		{"dgxh200", 1, "NVIDIA H200 141GB HBM3e", 144384},
		{"dgxh200", 8, "NVIDIA H200 141GB HBM3e", 144384},
		{"dgxh200", 64, "NVIDIA H200 141GB HBM3e", 144384},
	}
	for _, tt := range tests {
		g := simulate(t, "node-a", tt.model, tt.count)
		if !g.Simulated() {
			t.Errorf("Simulate(%q, %d).Simulated() = false, want true", tt.model, tt.count)
		}
		if g.Sim() == nil {
			t.Errorf("Simulate(%q, %d).Sim() = nil", tt.model, tt.count)
		}
		got := devices(t, g)
		if len(got) != tt.count {
			t.Fatalf("Simulate(%q, %d): %d devices, want %d", tt.model, tt.count, len(got), tt.count)
		}
		for i, d := range got {
			// Every device starts idle and healthy.
			want := worker.Device{Index: i, UUID: d.UUID, Model: tt.wantModel, MemoryMiB: tt.wantMiB}
			if d != want {
				t.Errorf("Simulate(%q, %d) device %d = %+v, want %+v", tt.model, tt.count, i, d, want)
			}
			if !uuidPattern.MatchString(d.UUID) {
				t.Errorf("Simulate(%q, %d) device %d UUID = %q, want GPU-<version 8 UUID>", tt.model, tt.count, i, d.UUID)
			}
		}
	}
}

func TestSimulateRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host, model string
		count       int
		wantInErr   string
	}{
		{"node-a", "dgxa100", 8, "want dgxh100 or dgxh200"},
		{"node-a", "", 8, "want dgxh100 or dgxh200"},
		{"node-a", "dgxh100", 0, "want 1 to 64"},
		{"node-a", "dgxh100", 65, "want 1 to 64"},
		{"node-a", "dgxh200", -1, "want 1 to 64"},
		{"", "dgxh100", 8, "empty host"},
	}
	for _, tt := range tests {
		g, err := Simulate(tt.host, tt.model, tt.count)
		if err == nil || !strings.Contains(err.Error(), tt.wantInErr) {
			t.Errorf("Simulate(%q, %q, %d) = %v, %v; want an error containing %q", tt.host, tt.model, tt.count, g, err, tt.wantInErr)
		}
	}
}

func TestSimulateUUIDsStablePerHost(t *testing.T) {
	t.Parallel()
	uuids := func(host, model string) []string {
		var out []string
		for _, d := range devices(t, simulate(t, host, model, 64)) {
			out = append(out, d.UUID)
		}
		return out
	}
	a1, a2 := uuids("node-a", "dgxh100"), uuids("node-a", "dgxh100")
	// Property: a restarted simulated worker keeps its UUIDs.
	for i := range a1 {
		if a1[i] != a2[i] {
			t.Errorf("node-a device %d: UUID %q, then %q after a restart; want the same", i, a1[i], a2[i])
		}
	}
	// Property: the UUID names the host's device, not the model.
	aH200 := uuids("node-a", "dgxh200")
	for i := range a1 {
		if a1[i] != aH200[i] {
			t.Errorf("node-a device %d: UUID %q on dgxh100, %q on dgxh200; want the same", i, a1[i], aH200[i])
		}
	}
	// Property: no UUID repeats on a host or across hosts. With a plain
	// host+index, node-a1 and node- would collide with node-a.
	seen := make(map[string]string)
	for _, host := range []string{"node-a", "node-b", "node-a1", "node-"} {
		for i, u := range uuids(host, "dgxh100") {
			if prev, ok := seen[u]; ok {
				t.Errorf("UUID %s of %s device %d is also %s", u, host, i, prev)
			}
			seen[u] = fmt.Sprintf("%s device %d", host, i)
		}
	}
	if len(seen) != 4*64 {
		t.Errorf("%d distinct UUIDs on 4 hosts of 64 devices, want %d", len(seen), 4*64)
	}
}

func TestDevicesReportsSimConditions(t *testing.T) {
	t.Parallel()
	g := simulate(t, "node-a", "dgxh100", 8)
	s := g.Sim()
	s.SetProcesses(1, 2)
	s.SetUsedMiB(3, 1234)
	s.SetMIG(4, true)
	s.FailDevice(6, nvml.ERROR_GPU_IS_LOST)

	got, err := g.Devices()
	if err != nil {
		t.Fatalf("Devices() with a lost GPU = %v, want nil: one device must not fail the snapshot", err)
	}
	idle := func(i int) worker.Device {
		return worker.Device{Index: i, UUID: got[i].UUID, Model: "NVIDIA H100 80GB HBM3", MemoryMiB: 81920}
	}
	want := make([]worker.Device, 8)
	for i := range want {
		want[i] = idle(i)
	}
	want[1].Processes = 2
	want[3].UsedMiB = 1234
	want[4].MIG = true
	want[6].MemoryMiB = 0
	want[6].Err = "GetMemoryInfo: ERROR_GPU_IS_LOST"
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if got[6].UUID == "" {
		t.Errorf("lost device has no UUID; the other queries must still run")
	}

	// Property: the conditions are undone as they were done.
	s.SetProcesses(1, 0)
	s.SetUsedMiB(3, 0)
	s.SetMIG(4, false)
	s.FailDevice(6, nvml.SUCCESS)
	for i, d := range devices(t, g) {
		if d != idle(i) {
			t.Errorf("after undoing, device %d = %+v, want %+v", i, d, idle(i))
		}
	}
}

func TestDevicesRoundsUsedMemoryUp(t *testing.T) {
	t.Parallel()
	s := dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB)
	dev := s.Devices[0].(*server.Device)
	dev.MemoryInfo.Used = 1 // one byte
	dev.GetComputeRunningProcessesFunc = noProcesses
	g := newGPU(t, s)
	if got := devices(t, g)[0].UsedMiB; got != 1 {
		t.Errorf("UsedMiB with 1 byte in use = %d, want 1", got)
	}
}

// TestDevicesQueryFailures uses a mock built by hand, through New, for
// failures Sim does not inject.
func TestDevicesQueryFailures(t *testing.T) {
	t.Parallel()
	s := dgxh100.NewWithGPUs(gpus.Multiple(4, gpus.H100_SXM5_80GB)...)
	dev := func(i int) *server.Device { return s.Devices[i].(*server.Device) }
	for i := range s.Devices {
		dev(i).GetComputeRunningProcessesFunc = noProcesses
	}
	// Device 0: a container without permission to list processes, on a GPU
	// without MIG support.
	dev(0).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_NO_PERMISSION
	}
	dev(0).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	// Device 1: no handle, as the real library says with a zero handle.
	getHandle := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 1 {
			return nvml.Device(nil), nvml.ERROR_UNKNOWN
		}
		return getHandle(i)
	}
	// Device 2: every query fails.
	dev(2).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	dev(2).GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	dev(2).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	dev(2).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_GPU_IS_LOST }
	dev(2).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	g := newGPU(t, s)

	got := devices(t, g)
	want := []worker.Device{
		{Index: 0, UUID: dev(0).UUID, Model: "NVIDIA H100 80GB HBM3", Processes: -1},
		{Index: 1, Processes: -1, Err: "DeviceGetHandleByIndex: ERROR_UNKNOWN"},
		{Index: 2, Processes: -1, Err: "GetUUID: ERROR_GPU_IS_LOST; GetName: ERROR_GPU_IS_LOST; " +
			"GetMemoryInfo: ERROR_GPU_IS_LOST; GetMigMode: ERROR_GPU_IS_LOST; GetComputeRunningProcesses: ERROR_GPU_IS_LOST"},
		{Index: 3, UUID: dev(3).UUID, Model: "NVIDIA H100 80GB HBM3"},
	}
	if len(got) != len(want) {
		t.Fatalf("Devices() = %d devices, want %d", len(got), len(want))
	}
	for i := range want {
		// The mock reports no memory in use and Free = 0; only the total
		// matters here.
		got[i].MemoryMiB = 0
		if got[i] != want[i] {
			t.Errorf("device %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	// Property: only the device count fails the snapshot.
	s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	if d, err := g.Devices(); !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Errorf("Devices() with a failing count = %v, %v; want an error wrapping ERROR_UNKNOWN", d, err)
	}
}

func TestWatchHealthReportsXid(t *testing.T) {
	t.Parallel()
	g := simulate(t, "node-a", "dgxh100", 8)
	uuids := uuidsOf(t, g)
	reports, done, cancel := startWatch(t, g)

	g.Sim().InjectXid(5, 79)
	if r := next(t, reports); r != (report{uuids[5], "Xid 79"}) {
		t.Errorf("after Xid 79 on device 5, report %+v, want %+v", r, report{uuids[5], "Xid 79"})
	}
	g.Sim().InjectDoubleBitECC(2)
	if r := next(t, reports); r != (report{uuids[2], "double-bit ECC error"}) {
		t.Errorf("after a double-bit ECC error on device 2, report %+v, want %+v", r, report{uuids[2], "double-bit ECC error"})
	}

	cancel()
	if err := wait(t, done); err != nil {
		t.Errorf("WatchHealth after ctx ended = %v, want nil", err)
	}
	assertSetsFreed(t, g)
}

func TestWatchHealthIgnoresApplicationXids(t *testing.T) {
	t.Parallel()
	for _, xid := range []uint64{13, 31, 43, 45, 68, 109} {
		g := simulate(t, "node-a", "dgxh100", 2)
		uuids := uuidsOf(t, g)
		reports, _, _ := startWatch(t, g)
		// Events arrive in order, so if the first report is the Xid 79 on
		// device 1, the application Xid on device 0 was seen and ignored.
		g.Sim().InjectXid(0, xid)
		g.Sim().InjectXid(1, 79)
		if r := next(t, reports); r != (report{uuids[1], "Xid 79"}) {
			t.Errorf("after Xid %d on device 0 and Xid 79 on device 1, first report %+v, want %+v", xid, r, report{uuids[1], "Xid 79"})
		}
	}
}

func TestWatchHealthWaitFailure(t *testing.T) {
	t.Parallel()
	g := simulate(t, "node-a", "dgxh200", 3)
	uuids := uuidsOf(t, g)
	reports, done, _ := startWatch(t, g)

	g.Sim().FailEvents(nvml.ERROR_UNKNOWN)
	err := wait(t, done)
	if !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Errorf("WatchHealth after a failed wait = %v, want an error wrapping ERROR_UNKNOWN", err)
	}
	// Property: losing the events marks every device unhealthy.
	for i, u := range uuids {
		want := report{u, "EventSetWait: ERROR_UNKNOWN"}
		if r := next(t, reports); r != want {
			t.Errorf("report %d = %+v, want %+v", i, r, want)
		}
	}
	assertSetsFreed(t, g)
}

// TestWatchHealthRegistration uses a mock built by hand, through New, for
// devices that cannot be watched.
func TestWatchHealthRegistration(t *testing.T) {
	t.Parallel()
	s := dgxh100.NewWithGPUs(gpus.Multiple(4, gpus.H100_SXM5_80GB)...)
	dev := func(i int) *server.Device { return s.Devices[i].(*server.Device) }
	for i := range s.Devices {
		dev(i).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return healthEvents, nvml.SUCCESS }
	}
	// Device 0 is too old for health events; device 1 fails to register;
	// device 2 cannot say what it supports; device 3 supports none of the
	// health events.
	dev(0).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NOT_SUPPORTED }
	dev(1).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
	dev(2).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	dev(3).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypePState, nvml.SUCCESS }
	set := &mock.EventSet{FreeFunc: func() nvml.Return { return nvml.SUCCESS }}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	g := newGPU(t, s)

	var got []report
	// No device is registered, so WatchHealth returns at once: set has no
	// WaitFunc and would panic if waited on.
	if err := g.WatchHealth(t.Context(), func(uuid, reason string) { got = append(got, report{uuid, reason}) }); err != nil {
		t.Errorf("WatchHealth with nothing to watch = %v, want nil", err)
	}
	want := []report{{dev(1).UUID, "RegisterEvents: ERROR_UNKNOWN"}}
	if len(got) != len(want) || got[0] != want[0] {
		t.Errorf("reports = %+v, want %+v", got, want)
	}
	if n := len(dev(0).RegisterEventsCalls()); n != 1 {
		t.Errorf("device 0: %d RegisterEvents calls, want 1", n)
	}
	if n := len(dev(2).RegisterEventsCalls()) + len(dev(3).RegisterEventsCalls()); n != 0 {
		t.Errorf("devices 2 and 3: %d RegisterEvents calls, want 0 (nothing to register)", n)
	}
	if n := len(set.FreeCalls()); n != 1 {
		t.Errorf("event set freed %d times, want 1", n)
	}

	// Property: a library without event sets has nothing to watch.
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	if err := g.WatchHealth(t.Context(), func(uuid, reason string) { t.Errorf("unhealthy(%q, %q) without events", uuid, reason) }); err != nil {
		t.Errorf("WatchHealth without event support = %v, want nil", err)
	}
}

func TestCloseStopsWatchHealth(t *testing.T) {
	t.Parallel()
	g, err := Simulate("node-a", "dgxh100", 2)
	if err != nil {
		t.Fatalf("Simulate() = %v", err)
	}
	reports, done, _ := startWatch(t, g)
	// Once a report arrives, the watcher is registered and waiting.
	g.Sim().InjectXid(0, 79)
	next(t, reports)

	if err := g.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
	// Close waits for the watcher to return; what it returned reaches the
	// test through the goroutine that called it, which may not have run
	// yet, so the wait is bounded rather than none.
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchHealth after Close = %v, want nil", err)
		}
	case <-time.After(waitLimit):
		t.Errorf("WatchHealth still running %v after Close returned", waitLimit)
	}
	assertSetsFreed(t, g)
	if err := g.Close(); err != nil {
		t.Errorf("second Close() = %v, want nil", err)
	}
	if d, err := g.Devices(); !errors.Is(err, ErrClosed) {
		t.Errorf("Devices() after Close = %v, %v; want ErrClosed", d, err)
	}
	if err := g.WatchHealth(t.Context(), func(string, string) {}); !errors.Is(err, ErrClosed) {
		t.Errorf("WatchHealth() after Close = %v, want ErrClosed", err)
	}
}

// TestConcurrentUse runs snapshots, Sim changes and a watcher at once, for
// the race detector.
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	g := simulate(t, "node-a", "dgxh100", 8)
	s := g.Sim()
	reports, done, cancel := startWatch(t, g)

	const rounds = 50
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range rounds {
				if _, err := g.Devices(); err != nil {
					t.Errorf("Devices() = %v", err)
					return
				}
				s.SetProcesses(w, i%3)
				s.SetUsedMiB(w, int64(i))
				s.SetMIG(w+4, i%2 == 0)
				s.FailDevice(w+4, nvml.ERROR_GPU_IS_LOST)
				s.InjectXid(w, 79)
			}
		})
	}
	wg.Wait()
	for range 4 * rounds {
		next(t, reports)
	}
	cancel()
	if err := wait(t, done); err != nil {
		t.Errorf("WatchHealth = %v, want nil", err)
	}
}

func TestEventReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e          nvml.EventData
		wantReason string
		wantOK     bool
	}{
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79}, "Xid 79", true},
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 48}, "Xid 48", true},
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 13}, "", false},
		{nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 109}, "", false},
		{nvml.EventData{EventType: nvml.EventTypeDoubleBitEccError}, "double-bit ECC error", true},
		{nvml.EventData{EventType: nvml.EventTypeSingleBitEccError}, "", false},
		{nvml.EventData{EventType: nvml.EventTypePState}, "", false},
	}
	for _, tt := range tests {
		reason, ok := eventReason(tt.e)
		if reason != tt.wantReason || ok != tt.wantOK {
			t.Errorf("eventReason(%+v) = %q, %v; want %q, %v", tt.e, reason, ok, tt.wantReason, tt.wantOK)
		}
	}
}

// Property: a failed Init is the last call on the library. The mock
// panics on any method whose Func is unset, and only InitFunc is.
func TestNewInitFailureStops(t *testing.T) {
	t.Parallel()
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }}
	g, err := New(lib, false)
	if g != nil || !errors.Is(err, worker.ErrNoNVML) || !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("New() with a failing Init = %v, %v; want an error wrapping ErrNoNVML and ERROR_DRIVER_NOT_LOADED", g, err)
	}
	if n := len(lib.InitCalls()); n != 1 {
		t.Errorf("Init called %d times, want 1", n)
	}
}

func TestCloseShutsDownOnce(t *testing.T) {
	t.Parallel()
	s := dgxh100.NewWithGPUs(gpus.H100_SXM5_80GB)
	g, err := New(s, true)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	for range 2 {
		if err := g.Close(); err != nil {
			t.Errorf("Close() = %v, want nil", err)
		}
	}
	if n, m := len(s.InitCalls()), len(s.ShutdownCalls()); n != 1 || m != 1 {
		t.Errorf("Init called %d times and Shutdown %d, want 1 and 1", n, m)
	}
}

// TestOpenWithoutDriver is not parallel: on a host with a driver, Open
// loads the library, and go-nvml then swaps a global that other tests'
// error formatting reads.
func TestOpenWithoutDriver(t *testing.T) {
	g, err := Open()
	if err == nil {
		g.Close()
		t.Skip("this host has an NVIDIA driver; gpu_nvml_test.go covers it")
	}
	// Reaching this line shows that the failed Init did not kill the
	// process.
	if !errors.Is(err, worker.ErrNoNVML) || !errors.Is(err, nvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Errorf("Open() without libnvidia-ml = %v; want an error wrapping ErrNoNVML and ERROR_LIBRARY_NOT_FOUND", err)
	}
	if !strings.Contains(err.Error(), "--simulate") {
		t.Errorf("Open() error %q does not mention --simulate", err)
	}
}

// simulate returns a simulated GPU that the test closes.
func simulate(t *testing.T, host, model string, count int) *GPU {
	t.Helper()
	g, err := Simulate(host, model, count)
	if err != nil {
		t.Fatalf("Simulate(%q, %q, %d) = %v", host, model, count, err)
	}
	t.Cleanup(func() { closeGPU(t, g) })
	return g
}

// newGPU returns a GPU over s that the test closes.
func newGPU(t *testing.T, s *server.Server) *GPU {
	t.Helper()
	g, err := New(s, true)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { closeGPU(t, g) })
	return g
}

func closeGPU(t *testing.T, g *GPU) {
	t.Helper()
	if err := g.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
}

func devices(t *testing.T, g *GPU) []worker.Device {
	t.Helper()
	d, err := g.Devices()
	if err != nil {
		t.Fatalf("Devices() = %v", err)
	}
	return d
}

func uuidsOf(t *testing.T, g *GPU) []string {
	t.Helper()
	var uuids []string
	for _, d := range devices(t, g) {
		uuids = append(uuids, d.UUID)
	}
	return uuids
}

// startWatch runs WatchHealth until the test ends or cancel is called. Its
// reports arrive on reports, and its result on done.
func startWatch(t *testing.T, g *GPU) (reports <-chan report, done <-chan error, cancel context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	r := make(chan report, 1024)
	d := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		d <- g.WatchHealth(ctx, func(uuid, reason string) { r <- report{uuid, reason} })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-finished:
		case <-time.After(waitLimit):
			t.Errorf("WatchHealth still running %v after the test ended", waitLimit)
		}
	})
	return r, d, cancel
}

func next(t *testing.T, reports <-chan report) report {
	t.Helper()
	select {
	case r := <-reports:
		return r
	case <-time.After(waitLimit):
		t.Fatalf("no unhealthy report within %v", waitLimit)
		return report{}
	}
}

func wait(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(waitLimit):
		t.Fatalf("WatchHealth did not return within %v", waitLimit)
		return nil
	}
}

func assertSetsFreed(t *testing.T, g *GPU) {
	t.Helper()
	s := g.Sim()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.openSets != 0 {
		t.Errorf("%d event sets not freed, want 0", s.openSets)
	}
}

func noProcesses() ([]nvml.ProcessInfo, nvml.Return) { return []nvml.ProcessInfo{}, nvml.SUCCESS }
