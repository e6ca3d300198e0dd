package worker

import (
	"context"
	"errors"
)

// ErrNoNVML reports that no NVML library is available: the worker refuses to
// start on real GPUs and says why; --simulate runs on go-nvml's mock devices
// instead.
var ErrNoNVML = errors.New("worker: NVML is unavailable")

// GPU is the worker's view of its host's GPUs. internal/nvmlgpu implements
// it over go-nvml, on a real driver or on go-nvml's mock servers.
type GPU interface {
	// Devices returns a fresh snapshot of every device, in index order.
	Devices() ([]Device, error)
	// WatchHealth calls unhealthy for each critical error the library
	// reports on a device (an Xid critical error), until ctx ends or the
	// library's event wait fails; it returns then. A library without event
	// support returns nil at once.
	WatchHealth(ctx context.Context, unhealthy func(uuid, reason string)) error
	// Simulated reports whether the devices are go-nvml mock devices rather
	// than hardware.
	Simulated() bool
	// Close releases the library.
	Close() error
}

// DeviceReader is what a GPU may offer besides: one device read afresh,
// by index (Device.Index), as Devices reads each. A claim then reads only
// the devices it may take, not those its host's attempts hold.
type DeviceReader interface {
	Device(index int) (Device, error)
}

// Device is one GPU as the library saw it when asked.
type Device struct {
	Index     int
	UUID      string // "GPU-…"; what CUDA_VISIBLE_DEVICES lists
	Model     string
	MemoryMiB int64 // total memory
	UsedMiB   int64 // memory in use
	// Processes is the number of compute processes on the device, or -1
	// when the library could not tell (treated as busy).
	Processes int
	MIG       bool   // MIG mode is enabled: never claimed whole
	Err       string // a query of the device failed; never claimed
}
