// Package worker is the GPU daemon that runs on each host: it takes the
// host's dispatch and cancel orders, claims GPUs, runs each job as a child
// process group, reports started and done, streams the output, and
// heartbeats the host's devices and running attempts.
//
// # Claims
//
// A device is free when it is healthy (no Xid critical error or ECC failure
// seen), not claimed by this worker, has no compute processes gpuq did not
// start, uses less memory than a threshold, and is not in MIG mode. A claim
// takes all the GPUs an attempt needs or none, from a fresh snapshot, and is
// released on every way the attempt ends. The worker's own table is the
// truth about what gpuq placed; the GPU library only reveals foreign use.
//
// # Order of work
//
// For each dispatch the worker claims, records the attempt on local disk,
// reports started (retrying until the server has stored it), sets the
// process starting on its own goroutine, and then acks the order. No
// process starts before its started report is stored: a worker that is
// stopping and cannot store it leaves the order unacked and the process
// unstarted. A redelivered order for an attempt running here is acked
// again; one for an attempt this host took before a restart is refused
// rather than run twice, and the scheduler retries it. A done report says
// the exit code and runtime; an attempt ended by the infrastructure (an Xid
// on its GPU, a drain past its timeout) says so, and is retried without
// charge.
//
// # What it does not do
//
// The worker never reads or writes the ledger: it is told what to run and
// reports what happened, and the scheduler's fold decides what the reports
// mean. CUDA_VISIBLE_DEVICES is not a security boundary; run untrusted jobs
// in containers.
//
// The GPU library is behind [GPU]; internal/nvmlgpu implements it over
// go-nvml on a real driver or on go-nvml's mock servers (--simulate), and
// NATS is behind [Bus], implemented by internal/natsbus.
package worker
