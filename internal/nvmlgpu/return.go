//go:build cgo

package nvmlgpu

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// returnError is a failed NVML call. It unwraps to the [nvml.Return], so
// errors.Is(err, nvml.ERROR_GPU_IS_LOST) works.
type returnError struct {
	op  string // the NVML function, e.g. "GetMemoryInfo"
	ret nvml.Return
}

func (e *returnError) Error() string { return e.op + ": " + returnName(e.ret) }

func (e *returnError) Unwrap() error { return e.ret }

// returnNames holds go-nvml's own names of the return codes, such as
// "ERROR_GPU_IS_LOST". They are read at package initialization, before Open
// can have loaded a library: once one is loaded, [nvml.Return.Error] calls
// the driver's nvmlErrorString instead, whose text varies by driver, and
// go-nvml swaps that function on Init and Shutdown without a lock (a data
// race). Looking a name up here calls nothing.
var returnNames = func() map[nvml.Return]string {
	names := map[nvml.Return]string{nvml.ERROR_UNKNOWN: nvml.ERROR_UNKNOWN.Error()}
	for r := nvml.SUCCESS; r <= 64; r++ {
		names[r] = r.Error()
	}
	return names
}()

// returnName is the name of r, e.g. "ERROR_GPU_IS_LOST".
func returnName(r nvml.Return) string {
	if s, ok := returnNames[r]; ok {
		return s
	}
	return fmt.Sprintf("NVML return %d", int32(r))
}
