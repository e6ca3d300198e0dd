// Package nvmlgpu implements [worker.GPU] over go-nvml: on a real NVIDIA
// driver ([Open]), on any [nvml.Interface] a caller built ([New]), or on
// go-nvml's mock DGX H100 and H200 servers ([Simulate]).
//
// A GPU takes snapshots of its devices (UUID, model, memory, MIG mode and
// the number of compute processes) and watches NVML's health events (Xid
// critical errors and double-bit ECC errors). The snapshot says what NVML
// saw; deciding which devices are free, claiming them and starting jobs is
// the worker's business. The package does not enumerate MIG instances (a
// MIG-enabled GPU is reported as such and never claimed whole), read
// utilization, temperature or power, or ever mark a device healthy again.
//
// # Init once
//
// Each GPU calls its library's Init exactly once, in Open, New or Simulate,
// and Shutdown once, in Close. If Init fails, no other NVML function is
// called: go-nvml kills the process (exit 127, not a panic) on a call into
// a library that did not load. Open on a host without libnvidia-ml returns
// an error wrapping [worker.ErrNoNVML]. Init and Shutdown must not cycle
// concurrently either, because go-nvml races on a global then, so a process
// should Open one GPU and keep it. All NVML calls of a GPU go through one
// mutex.
//
// # Simulation
//
// [Simulate] builds devices from go-nvml's mock packages, and its GPU's
// Simulated method reports true: simulated devices are labelled as such,
// never passed off as hardware. Their model names are the real ones
// ("NVIDIA H100 80GB HBM3"), so placement works as on hardware. Their UUIDs
// derive from the host name, and so survive restarts. [GPU.Sim] makes
// devices busy or broken and raises Xid events, for tests and for
// exercising a worker by hand.
//
// # Without cgo
//
// go-nvml is cgo code. Built with CGO_ENABLED=0, the package still
// compiles, but Open and Simulate return errors wrapping worker.ErrNoNVML.
//
// # Example
//
// A worker opens the driver, or the simulator when asked to; it does not
// fall back from one to the other by itself:
//
//	open := nvmlgpu.Open
//	if simulate {
//		open = func() (*nvmlgpu.GPU, error) { return nvmlgpu.Simulate(hostname, "dgxh100", 8) }
//	}
//	g, err := open() // on a host without the driver: errors.Is(err, worker.ErrNoNVML)
//	if err != nil {
//		return err
//	}
//	defer g.Close()
//	devices, err := g.Devices()
package nvmlgpu
