//go:build !cgo

package nvmlgpu

import (
	"context"
	"fmt"

	"github.com/gpuq/gpuq/worker"
)

var _ worker.GPU = (*GPU)(nil)

// errNoCgo is why every entry point fails: go-nvml is cgo code.
var errNoCgo = fmt.Errorf("%w: this binary was built without cgo (rebuild with CGO_ENABLED=1)", worker.ErrNoNVML)

// GPU stands in for the cgo build's GPU. Open and Simulate never return
// one.
type GPU struct{}

// Open returns an error wrapping [worker.ErrNoNVML]: NVML needs cgo.
func Open() (*GPU, error) { return nil, errNoCgo }

// Simulate returns an error wrapping [worker.ErrNoNVML]: go-nvml's mock
// devices need cgo too.
func Simulate(host, model string, count int) (*GPU, error) { return nil, errNoCgo }

// Devices returns an error wrapping [worker.ErrNoNVML].
func (g *GPU) Devices() ([]worker.Device, error) { return nil, errNoCgo }

// WatchHealth returns an error wrapping [worker.ErrNoNVML].
func (g *GPU) WatchHealth(ctx context.Context, unhealthy func(uuid, reason string)) error {
	return errNoCgo
}

// Simulated reports false.
func (g *GPU) Simulated() bool { return false }

// Close returns nil.
func (g *GPU) Close() error { return nil }
