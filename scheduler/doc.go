// Package scheduler decides what runs where, and folds the command log into
// the ledger while it leads.
//
// [Core] is the decider: it keeps the queue of pending jobs (priority, then
// fair share, then age), the live hosts and their free GPUs, and returns its
// decisions as values from [Core.Decide] (dispatches, lost and unplaceable
// verdicts, admissions). It performs no I/O and reads no clock: the caller
// passes the time. A decision takes effect only when the fold applies it from
// the log. A job that names a GPU model goes only to hosts whose every GPU
// is that model (model.go). [Explain] answers why a job waits by the same
// rules; the leader publishes its own answers as facts (see # Facts).
//
// [Service] is the process around it: it contends for the leader lease
// and, while it holds it, folds every command into a [ledger.State], persists
// the changed records, sends the effects, moves the checkpoint, and
// publishes the core's decisions. Each batch is written in order (records,
// then its effects once they are acknowledged, then the checkpoint once
// both are), two batches at a time: one's records are written while the
// one before sends its effects and checkpoints (pipeline.go says what each
// keeps). Meanwhile the fold goes on with the next, up to
// [Config.MaxBatch] commands, and the decisions are stored on the log from
// a goroutine of their own: no step of the fold waits on an
// acknowledgement. Its seams ([Store], [Lease], [CommandLog],
// [Publisher], [HostWatcher]) are implemented over JetStream by
// internal/natsstore and internal/natsbus; this package imports no NATS.
// What it measures goes to [Metrics], from the service's own goroutine
// (internal/metrics exports it to Prometheus); this package imports no
// metrics library either.
//
// # Placement
//
// A GPU is free for a new job only if the host's latest heartbeat shows it
// healthy, free of foreign processes and held by no attempt (whatever the
// ledger thinks of that attempt: a job whose end the ledger has applied but
// whose worker has not freed its GPUs yet, or a stale run of a restarted
// worker), and no ledger job or decision in flight is waiting to claim it.
// A host whose worker refuses an order, or whose attempts end by the
// infrastructure, is backed off: it gets nothing for
// [CoreConfig.HostBackoff]'s delay for its failures in a row (1s, doubling,
// at most 30s by default), counted from the ledger's record of refusals,
// starts and attempt ends: refusals start again when the host next reports
// an attempt started, infrastructure failures when an attempt on it next
// ends by its job's doing (an exit code or a cancel), so a broken host
// that fails everything it is sent does not take every job. A refusal
// because the GPUs were taken ([ledger.Report.Busy]) spends none of the job's
// attempts and waits no retry delay.
//
// A pending job that waits on a dependency or that its owner paused
// ([ledger.Job.Gated]) keeps its reservation but is kept out of the queue
// (scheduler/deps.go): no pass dispatches it, and [Explain] and the wait
// facts say "waiting_on_dependency" (naming each job) or "user_hold". When
// the fold clears the gate, the job is queued at its submit sequence; a
// changed priority re-queues it.
//
// # Outages
//
// [Service.Run] rides out the server's absence for as long as it lasts.
// While the lease cannot be reached, it retries with backoff (logging
// "cannot reach the lease; retrying" once, then "lease reachable again"). A
// term that fails (its lease not renewed, a write fenced or timed out, the
// view not loaded, the log follower or the hosts watch ended or stuck) steps
// down and contends again, waiting longer after each term in a row that
// failed early ("stepped down; contending again" once, then debug lines).
// The lease is renewed every third of its TTL from the moment it is taken,
// also while a new term loads the view (a load of a large ledger outlasts a
// TTL); a renewal that finds the lease taken, or renewals that fail until it
// lapses, abandon the load, and the term ends before it writes or sends
// anything. Run returns only when its context ends, on a misconfiguration no retry
// can mend ([ErrMisconfigured]), or when the command log has lost entries
// the ledger has not applied, found at the same place by three terms in a
// row ([ErrLogGap]).
//
// # Facts
//
// A reader that asks why a job waits must hear what the leader saw, not a
// decision computed again elsewhere with other settings. So the leader
// publishes read-optimised facts through [Config.Facts] (a [FactStore];
// internal/natsbus keeps them in the gpuq_facts bucket, see docs/wire.md):
// its effective configuration when it takes over, and after each decision
// pass (at most every [Config.FactInterval]) why each of the first
// [Config.FactWindow] waiting jobs waits, from [Core.Waiting]: the blockers
// by Decide's rules with the core's own configuration, hosts, backoffs and
// in-flight decisions, and the backfill reservation the pass itself made. A
// fact is written only when its explanation changes, and deleted when its
// job leaves the queue or the window; then a pass fact says through which
// log sequence all of them are written.
//
// Facts are advisory and cost the fold nothing it waits on: the loop
// computes them after the checkpoint and the pass and queues the changes;
// a writer goroutine stores them at most [Config.FactWrites] a second, a
// key's newer value replacing one still queued, retrying failures with
// backoff (logged once per spell) until the term ends. They live in a
// bucket of their own, not the ledger's, because they are written without
// compare-and-swap, lost harmlessly on a crash (a new leader lists the
// bucket and deletes or rewrites what it finds), and readable per tenant.
//
// A minimal decision round:
//
//	core := scheduler.NewCore(scheduler.CoreConfig{})
//	core.Load(state)                  // the ledger as folded
//	core.SetHost(heartbeat, now)      // each host's latest heartbeat
//	for _, d := range core.Decide(state, now) {
//		// publish d on the log; fold it when it comes back, then
//		// core.Observe(state, d, result)
//	}
package scheduler
