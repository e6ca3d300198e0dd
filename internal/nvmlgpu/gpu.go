//go:build cgo

package nvmlgpu

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuq/gpuq/worker"
)

var _ worker.GPU = (*GPU)(nil)

// Event wait timeouts. A WatchHealth loop looks at its ctx and at Close
// between waits, so the timeout bounds how late it notices either. A wait
// that times out costs one wake-up.
const (
	waitTimeoutMs    = 1000
	simWaitTimeoutMs = 100
)

// GPU implements [worker.GPU] over an [nvml.Interface]: the NVIDIA driver's
// library, or a go-nvml mock server. Its methods are safe for concurrent
// use; every NVML call goes through one mutex.
type GPU struct {
	// mu serializes NVML calls. NVML itself is thread-safe, but go-nvml has
	// a data race on its error-string function, and third parties report
	// trouble with concurrent calls. It also guards closing.
	mu        sync.Mutex
	lib       nvml.Interface
	simulated bool
	sim       *Sim // nil unless made by Simulate
	waitMs    uint32
	closing   bool // Close has begun: no new calls, watchers stop
	watchers  sync.WaitGroup
}

// Open initializes the NVIDIA driver's NVML library (libnvidia-ml.so.1).
// Open returns an error wrapping [worker.ErrNoNVML] and the [nvml.Return]
// if Init fails, for instance with nvml.ERROR_LIBRARY_NOT_FOUND on a host
// without the driver; it then makes no further NVML call.
func Open() (*GPU, error) {
	g, err := New(nvml.New(), false)
	if err != nil {
		return nil, fmt.Errorf("open NVML (install the NVIDIA driver, or run with --simulate): %w", err)
	}
	return g, nil
}

// New initializes lib and returns a GPU over it; simulated says whether lib
// is a mock rather than hardware. New calls lib.Init exactly once. If Init
// fails, New returns an error wrapping [worker.ErrNoNVML] and the
// [nvml.Return], and makes no further call on lib: go-nvml kills the
// process on a call into a library that failed to load.
func New(lib nvml.Interface, simulated bool) (*GPU, error) {
	if lib == nil {
		return nil, errors.New("nvmlgpu: New: nil library")
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("%w: %w", worker.ErrNoNVML, &returnError{op: "Init", ret: ret})
	}
	waitMs := uint32(waitTimeoutMs)
	if simulated {
		waitMs = simWaitTimeoutMs
	}
	return &GPU{lib: lib, simulated: simulated, waitMs: waitMs}, nil
}

// Sim returns the controls of a GPU made by [Simulate], or nil for any
// other GPU.
func (g *GPU) Sim() *Sim { return g.sim }

// Simulated reports whether the devices are go-nvml mock devices.
func (g *GPU) Simulated() bool { return g.simulated }

// Devices returns a fresh snapshot of every device, in index order. A
// failed query of one device sets that device's Err (for instance
// "GetMemoryInfo: ERROR_GPU_IS_LOST") and leaves the rest of the snapshot
// intact. Devices returns an error only if the device count cannot be
// read, and [ErrClosed] after Close.
func (g *GPU) Devices() ([]worker.Device, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return nil, ErrClosed
	}
	n, ret := g.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &returnError{op: "DeviceGetCount", ret: ret}
	}
	devices := make([]worker.Device, n)
	for i := range devices {
		devices[i] = query(g.lib, i)
	}
	return devices, nil
}

// Device reads device index afresh, as Devices reads each (see
// worker.DeviceReader).
func (g *GPU) Device(index int) (worker.Device, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing {
		return worker.Device{}, ErrClosed
	}
	return query(g.lib, index), nil
}

// Close shuts the library down. It stops running WatchHealth calls first,
// so it can take up to one event wait (a second). Calls after Close return
// [ErrClosed]; a second Close returns nil.
func (g *GPU) Close() error {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return nil
	}
	g.closing = true
	g.mu.Unlock()

	// Shutdown must not pull the library from under a watcher's Wait.
	g.watchers.Wait()

	g.mu.Lock()
	defer g.mu.Unlock()
	if ret := g.lib.Shutdown(); ret != nvml.SUCCESS {
		return &returnError{op: "Shutdown", ret: ret}
	}
	return nil
}

// query reads device index. It records each failed query in Err and goes
// on, so that one broken attribute still leaves the UUID to key it by.
func query(lib nvml.Interface, index int) (d worker.Device) {
	d = worker.Device{Index: index, Processes: -1}
	var errs []string
	failed := func(op string, ret nvml.Return) {
		errs = append(errs, (&returnError{op: op, ret: ret}).Error())
	}
	defer func() { d.Err = strings.Join(errs, "; ") }()

	// The real library returns a non-nil zero handle on error: check ret.
	h, ret := lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		failed("DeviceGetHandleByIndex", ret)
		return d
	}

	if uuid, ret := h.GetUUID(); ret == nvml.SUCCESS {
		d.UUID = uuid
	} else {
		failed("GetUUID", ret)
	}

	if name, ret := h.GetName(); ret == nvml.SUCCESS {
		d.Model = name
	} else {
		failed("GetName", ret)
	}

	if mem, ret := h.GetMemoryInfo(); ret == nvml.SUCCESS {
		d.MemoryMiB = int64(mem.Total >> 20)
		// Round up: a device with any memory in use never reads as 0 MiB.
		d.UsedMiB = int64((mem.Used + 1<<20 - 1) >> 20)
	} else {
		failed("GetMemoryInfo", ret)
	}

	switch current, _, ret := h.GetMigMode(); ret {
	case nvml.SUCCESS:
		d.MIG = current == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
		// Not MIG-capable, so not in MIG mode.
	default:
		failed("GetMigMode", ret)
	}

	switch procs, ret := h.GetComputeRunningProcesses(); ret {
	case nvml.SUCCESS:
		d.Processes = len(procs)
	case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NO_PERMISSION:
		// The library cannot tell: Processes stays -1, which reads as busy.
	default:
		failed("GetComputeRunningProcesses", ret)
	}
	return d
}
