//go:build !cgo

// This test checks that a build without cgo compiles the package and fails
// every entry point with worker.ErrNoNVML instead of a link error.
package nvmlgpu

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/worker"
)

func TestNoCgo(t *testing.T) {
	t.Parallel()
	if g, err := Open(); g != nil || !errors.Is(err, worker.ErrNoNVML) || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Errorf("Open() without cgo = %v, %v; want an error wrapping ErrNoNVML that says to rebuild with CGO_ENABLED=1", g, err)
	}
	if g, err := Simulate("node-a", "dgxh100", 8); g != nil || !errors.Is(err, worker.ErrNoNVML) {
		t.Errorf("Simulate() without cgo = %v, %v; want an error wrapping ErrNoNVML", g, err)
	}
}
