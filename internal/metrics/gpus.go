package metrics

import "github.com/gpuq/gpuq/wire"

// GPU states, as the gpuq_gpus and gpuq_worker_gpus metrics label them.
const (
	GPUFree      = "free"      // healthy, unused: gpuq may place work on it
	GPUClaimed   = "claimed"   // held by a gpuq attempt
	GPUBusy      = "busy"      // used by a process gpuq did not start
	GPUUnhealthy = "unhealthy" // failed (Xid, ECC, lost); never offered
)

// gpuStates are every GPU state, in the order metrics list them.
var gpuStates = []string{GPUFree, GPUClaimed, GPUBusy, GPUUnhealthy}

// Host states, as the gpuq_hosts metric labels them.
const (
	HostUp       = "up"       // heartbeating and taking work
	HostDraining = "draining" // heartbeating, taking no new work
)

// GPUState classifies a device of a heartbeat. Unhealthy comes first: a
// failed device is unhealthy whoever holds it.
func GPUState(d wire.Device) string {
	switch {
	case !d.Healthy:
		return GPUUnhealthy
	case d.Job != "":
		return GPUClaimed
	case d.Busy:
		return GPUBusy
	}
	return GPUFree
}

// count is one labelled count: a state and whether the devices are
// simulated.
type count struct {
	state     string
	simulated bool
	n         int
}

// countHosts counts hosts by state and GPUs by state, each split by
// simulated or not. Every state of a kind present is listed, with 0 where
// none is in it, so a series does not vanish when its count drops to 0.
func countHosts(hs []wire.Heartbeat) (hosts, gpus []count) {
	for _, sim := range []bool{false, true} {
		seen := false
		up, draining := 0, 0
		byState := map[string]int{}
		for _, h := range hs {
			if h.Simulated != sim {
				continue
			}
			seen = true
			if h.Draining {
				draining++
			} else {
				up++
			}
			for _, d := range h.Devices {
				byState[GPUState(d)]++
			}
		}
		if !seen {
			continue
		}
		hosts = append(hosts, count{HostUp, sim, up}, count{HostDraining, sim, draining})
		for _, st := range gpuStates {
			gpus = append(gpus, count{st, sim, byState[st]})
		}
	}
	return hosts, gpus
}
