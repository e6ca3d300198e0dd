package gpuq_test

import (
	"os/exec"
	"testing"
)

// TestOtherBuildsVet vets the builds CI does not run: the real-GPU tests
// (-tags nvml, run on a GPU host with `go test -c -tags nvml`), the build
// without cgo (NVML unavailable) and the worker on a system other than
// Linux. A test helper of the nvml build once stopped compiling, and
// nothing noticed until a GPU host needed it.
func TestOtherBuildsVet(t *testing.T) {
	t.Parallel()
	for _, b := range []struct {
		name string
		env  []string
		args []string
	}{
		{"nvml", nil, []string{"vet", "-tags", "nvml", "./worker", "./internal/nvmlgpu"}},
		{"no cgo", []string{"CGO_ENABLED=0"}, []string{"vet", "./worker", "./internal/nvmlgpu", "./cmd/gpuq"}},
		{"darwin", []string{"CGO_ENABLED=0", "GOOS=darwin"}, []string{"vet", "./worker"}},
	} {
		cmd := exec.Command("go", b.args...)
		cmd.Env = append(cmd.Environ(), b.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("the %s build: go %v: %v\n%s", b.name, b.args, err, out)
		}
	}
}
