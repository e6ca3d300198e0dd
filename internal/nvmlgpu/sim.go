//go:build cgo

package nvmlgpu

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Limits of Simulate's count.
const (
	simGPUsMin = 1
	simGPUsMax = 64
)

// Simulate returns a GPU over go-nvml's mock server of a DGX host: model
// "dgxh100" (NVIDIA H100 80GB HBM3) or "dgxh200" (NVIDIA H200 141GB HBM3e),
// with count devices, from 1 to 64. Its Simulated method reports true.
//
// Each device's UUID derives from host and its index, so a simulated worker
// keeps its UUIDs across restarts and two hosts never share one. The
// devices start idle; [GPU.Sim] changes that. Simulate returns an error for
// an empty host, another model or a count out of range.
func Simulate(host, model string, count int) (*GPU, error) {
	if host == "" {
		return nil, errors.New("nvmlgpu: simulate: empty host name")
	}
	if count < simGPUsMin || count > simGPUsMax {
		return nil, fmt.Errorf("nvmlgpu: simulate %d GPUs: want %d to %d", count, simGPUsMin, simGPUsMax)
	}
	var s *server.Server
	switch model {
	case "dgxh100":
		s = dgxh100.NewWithGPUs(gpus.Multiple(count, gpus.H100_SXM5_80GB)...)
	case "dgxh200":
		s = dgxh200.NewWithGPUs(gpus.Multiple(count, gpus.H200_SXM5_141GB)...)
	default:
		return nil, fmt.Errorf("nvmlgpu: simulate model %q: want dgxh100 or dgxh200", model)
	}

	sim := &Sim{wake: make(chan struct{}, 1)}
	for i, d := range s.Devices {
		dev, ok := d.(*server.Device)
		if !ok {
			panic(fmt.Sprintf("nvmlgpu: mock device %d is a %T, not a *server.Device", i, d))
		}
		dev.UUID = simUUID(host, i)
		dev.MemoryInfo.Free = dev.MemoryInfo.Total
		sim.devices = append(sim.devices, &simDevice{dev: dev})
		sim.mockDevice(sim.devices[i])
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return sim.newEventSet(), nvml.SUCCESS
	}

	g, err := New(s, true)
	if err != nil {
		return nil, err
	}
	g.sim = sim
	return g, nil
}

// Sim changes the mock devices of a GPU made by [Simulate]: it makes them
// busy, full, MIG-enabled or broken, and raises health events. Its methods
// are safe for concurrent use with each other and with the GPU's. They
// panic on a device index out of range.
type Sim struct {
	mu       sync.Mutex
	devices  []*simDevice
	events   []nvml.EventData // queued until an event wait takes them
	waitRet  nvml.Return      // what event waits return; SUCCESS: the usual
	wake     chan struct{}    // capacity 1: a waiter should look again
	openSets int              // event sets created and not yet freed
}

// simDevice is the state the mock functions of one device read.
type simDevice struct {
	dev       *server.Device
	processes int
	usedMiB   int64
	mig       bool
	memoryRet nvml.Return // what GetMemoryInfo fails with; SUCCESS: it works
}

// SetProcesses sets the number of compute processes on device index.
func (s *Sim) SetProcesses(index, n int) {
	if n < 0 {
		panic(fmt.Sprintf("nvmlgpu: Sim.SetProcesses(%d, %d): negative count", index, n))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.device(index).processes = n
}

// SetUsedMiB sets the memory in use on device index, from 0 to its total.
func (s *Sim) SetUsedMiB(index int, mib int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.device(index)
	if total := int64(d.dev.MemoryInfo.Total >> 20); mib < 0 || mib > total {
		panic(fmt.Sprintf("nvmlgpu: Sim.SetUsedMiB(%d, %d): want 0 to %d", index, mib, total))
	}
	d.usedMiB = mib
}

// SetMIG turns MIG mode on device index on or off.
func (s *Sim) SetMIG(index int, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.device(index).mig = on
}

// FailDevice makes GetMemoryInfo on device index fail with ret, as
// nvml.ERROR_GPU_IS_LOST does on a GPU that fell off the bus; nvml.SUCCESS
// heals it.
func (s *Sim) FailDevice(index int, ret nvml.Return) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.device(index).memoryRet = ret
}

// InjectXid queues an Xid critical error on device index. A WatchHealth
// call's next event wait takes it; it stays queued until one does.
func (s *Sim) InjectXid(index int, xid uint64) {
	s.inject(index, nvml.EventTypeXidCriticalError, xid)
}

// InjectDoubleBitECC queues a double-bit (uncorrectable) ECC error on
// device index, like InjectXid.
func (s *Sim) InjectDoubleBitECC(index int) {
	s.inject(index, nvml.EventTypeDoubleBitEccError, 0)
}

// FailEvents makes every event wait fail with ret, as a driver failure
// does; nvml.SUCCESS restores them.
func (s *Sim) FailEvents(ret nvml.Return) {
	s.mu.Lock()
	s.waitRet = ret
	s.mu.Unlock()
	s.notify()
}

func (s *Sim) inject(index int, eventType, data uint64) {
	s.mu.Lock()
	d := s.device(index)
	s.events = append(s.events, nvml.EventData{
		Device:    d.dev,
		EventType: eventType,
		EventData: data,
		// Not a MIG instance, as NVML marks it.
		GpuInstanceId:     0xFFFFFFFF,
		ComputeInstanceId: 0xFFFFFFFF,
	})
	s.mu.Unlock()
	s.notify()
}

// device returns device index; the caller holds s.mu.
func (s *Sim) device(index int) *simDevice {
	if index < 0 || index >= len(s.devices) {
		panic(fmt.Sprintf("nvmlgpu: Sim: device index %d out of range [0, %d)", index, len(s.devices)))
	}
	return s.devices[index]
}

func (s *Sim) notify() {
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// mockDevice sets the mock functions of d.dev that go-nvml's server leaves
// unset (they panic) or that must read s. The funcs are set before the
// server is in use and never change; the state they read is under s.mu.
func (s *Sim) mockDevice(d *simDevice) {
	d.dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if d.memoryRet != nvml.SUCCESS {
			return nvml.Memory{}, d.memoryRet
		}
		total := d.dev.MemoryInfo.Total
		used := uint64(d.usedMiB) << 20
		return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
	}
	d.dev.GetMigModeFunc = func() (int, int, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		mode := nvml.DEVICE_MIG_DISABLE
		if d.mig {
			mode = nvml.DEVICE_MIG_ENABLE
		}
		return mode, mode, nvml.SUCCESS
	}
	d.dev.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		d.mig = mode == nvml.DEVICE_MIG_ENABLE
		return nvml.SUCCESS, nvml.SUCCESS
	}
	d.dev.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		s.mu.Lock()
		defer s.mu.Unlock()
		procs := make([]nvml.ProcessInfo, d.processes)
		for i := range procs {
			procs[i] = nvml.ProcessInfo{Pid: uint32(4000 + i), GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
		}
		return procs, nvml.SUCCESS
	}
	d.dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return healthEvents, nvml.SUCCESS
	}
	d.dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return {
		return nvml.SUCCESS
	}
}

// newEventSet returns a mock event set whose waits take s's queued events.
func (s *Sim) newEventSet() nvml.EventSet {
	s.mu.Lock()
	s.openSets++
	s.mu.Unlock()
	freed := false
	return &mock.EventSet{
		WaitFunc: s.wait,
		FreeFunc: func() nvml.Return {
			s.mu.Lock()
			defer s.mu.Unlock()
			if freed {
				return nvml.ERROR_INVALID_ARGUMENT
			}
			freed = true
			s.openSets--
			return nvml.SUCCESS
		},
	}
}

// wait is an event set's Wait: the oldest queued event, or
// nvml.ERROR_TIMEOUT once timeoutMs passes without one.
func (s *Sim) wait(timeoutMs uint32) (nvml.EventData, nvml.Return) {
	timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
	defer timer.Stop()
	for {
		s.mu.Lock()
		switch {
		case s.waitRet != nvml.SUCCESS:
			ret := s.waitRet
			s.mu.Unlock()
			return nvml.EventData{}, ret
		case len(s.events) > 0:
			e := s.events[0]
			s.events = s.events[1:]
			s.mu.Unlock()
			return e, nvml.SUCCESS
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-timer.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
}

// simUUID is the UUID of device index on host: the first 16 bytes of a
// SHA-256, marked as an RFC 9562 version 8 (custom) UUID.
func simUUID(host string, index int) string {
	// The NUL keeps ("a1", 1) and ("a", 11) apart.
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d", host, index))
	b := sum[:16]
	b[6] = b[6]&0x0f | 0x80
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
