// Package worker is the GPU daemon that runs on each host: it takes the
// host's dispatch and cancel orders, claims GPUs, runs each job as a child
// process group, reports started and done, streams the output, and
// heartbeats the host's devices and running attempts.
//
// # Jobs are not trusted
//
// A job gets an environment of its own: a few harmless variables of the
// worker's (PATH, LANG, LC_*, TZ, TERM, LD_LIBRARY_PATH, CUDA_HOME,
// CUDA_PATH), its own, and gpuq's (CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES, GPUQ_JOB_ID, GPUQ_ACCOUNT, GPUQ_ATTEMPT,
// GPUQ_SANDBOX, GPUQ_ARRAY_ID and GPUQ_ARRAY_INDEX for a task of a job
// array, and HOME and TMPDIR set to the attempt's directory): never
// the worker's NATS settings or any other secret. The worker makes itself
// non-dumpable, so no process of its user can read its environment,
// memory or open files through /proc. Each attempt runs in a fresh
// directory of its own under [Config.JobRoot], mode 0700, removed when it
// ends; as root with [Config.JobUIDs], as a user and group of its own with
// no supplementary groups, so it cannot read the worker's files (its state
// directory is 0700) or another attempt's. When an attempt ends, by
// itself, a cancel, its walltime or a drain, every process of it is killed
// before its GPUs are freed and its done report is sent: with a uid pool,
// every process of the attempt's uid (complete); without, those in its
// process group or session, its descendants, and those marked with its
// GPUQ_SANDBOX (a process that leaves all of these escapes: the limit of
// running jobs as the worker's own user, which the worker logs at start).
// With [Config.Cgroup] each attempt also runs in a cgroup v2 of its own,
// which every process it starts is born in, and the sweep finds them all
// by that cgroup (one read of cgroup.events, not a listing of /proc); a
// process escapes only by moving itself to another cgroup, which takes
// write access to the worker's cgroup files (a job of the worker's own
// user has it; a pool uid has not). Processes that survive keep the GPUs
// held. At start the worker kills what attempts of its earlier life left
// (in its cgroups, every process of the pool's uids, or those marked with
// its job root) before its first heartbeat offers the GPUs as free.
//
// A job that names a workdir runs there instead of in its attempt's
// directory (which stays its HOME and TMPDIR). The worker refuses the
// attempt, with a rejected report that says why and no charge, when the
// workdir does not exist, is not a directory, or the job's user (its pool
// uid, or the worker's own user) cannot search every directory down to it.
//
// # Claims
//
// A device is free when it is healthy (no Xid critical error or ECC failure
// seen), not claimed by this worker, has no compute processes gpuq did not
// start, uses less memory than a threshold, and is not in MIG mode. A claim
// takes all the GPUs an attempt needs or none, from a fresh read of the
// devices (with a [DeviceReader], only of those no attempt holds, until it
// has enough), and is released on every way the attempt ends. The worker's own table is the
// truth about what gpuq placed; the GPU library only reveals foreign use.
//
// # Order of work
//
// For each dispatch the worker first confirms the order: it reads the job's
// record in the ledger, which the scheduler writes (this attempt,
// dispatched to this host) before it sends the order. An order whose
// attempt is no longer current (declared lost while the worker was away and
// retried elsewhere, cancelled, finished) is acked and dropped without
// running and without a report; a record not caught up yet is read again
// for a while; while the server cannot be reached the read is retried, and
// no order starts unconfirmed. Then the worker claims, records the attempt
// on local disk, reports started (retrying until the server has stored
// it), sets the process starting on a goroutine of its own (kept from
// attempt to attempt), and then acks the order, without waiting for the
// server's answer: an ack that is lost brings the order back after the
// consumer's ack wait, and it is known then (see below). The
// record of the attempt is one line appended to a file in the state
// directory and flushed to disk, made while the attempt's directory is;
// dispatches that wait together (of distinct jobs, up to any other order)
// are confirmed and claimed in order, recorded with one append and one
// flush and reported started side by side, then each started and acked,
// in order. No process starts before its started report is stored: a worker
// that is stopping and cannot store it leaves the order unacked and the
// process unstarted. An attempt's directory (and user) is made before its
// started report; a worker that cannot make it refuses the order. A
// redelivered order for an attempt running here is
// acked again; one for an attempt this host took before a restart is
// refused rather than run twice, and the scheduler retries it. An order
// for GPUs that are healthy but in use is refused as busy, which does not
// spend one of the job's attempts. When a process ends its GPUs are freed
// at once, then the done report says the exit code and runtime; an attempt
// ended by the infrastructure (an Xid on its GPU, a drain past its
// timeout) says so, and is retried without charge. A cancel order stops
// the attempt it names, whether the job was cancelled or the attempt
// started here after the scheduler had moved on.
//
// # Outages
//
// The worker rides out every outage of the server for as long as it lasts:
// it waits for the orders stream at start, reads its orders again when
// their stream fails, and retries heartbeats and reports; each kind of
// failure is logged once when it begins and once when it ends. Running
// jobs keep running meanwhile; their reports are stored when the server
// is back. The worker exits only when stopped, or when it cannot start for
// a reason of its own, which it explains.
//
// # What it does not do
//
// The worker never writes the ledger, and reads only the record of a job it
// is told to run: it is told what to run and reports what happened, and the
// scheduler's fold decides what the reports mean. CUDA_VISIBLE_DEVICES is
// not a security boundary, and jobs share the host's network, /tmp,
// /var/tmp and /dev/shm while they run (with a job uid pool, what an
// attempt's uid left there is removed, in one walk for every uid released
// meanwhile, before the uid goes to another attempt; a walk that fails is
// logged as an outage and retried, and its uids stay out of the pool until
// one succeeds; without a pool every
// job is the worker's user): run untrusted jobs in containers for more.
// Mount those directories nosuid: a setuid copy of a shell an attempt
// leaves there lets any process that runs it become the attempt's uid
// until the walk removes it, and the sweeps find such a process only if it
// ran as a pool uid before.
//
// The GPU library is behind [GPU]; internal/nvmlgpu implements it over
// go-nvml on a real driver or on go-nvml's mock servers (--simulate), and
// NATS is behind [Bus], implemented by internal/natsbus. What the worker
// measures goes to [Metrics], which internal/metrics exports to Prometheus.
package worker
