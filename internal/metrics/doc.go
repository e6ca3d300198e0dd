// Package metrics exports what the scheduler and the worker measure as
// Prometheus metrics, and serves them with health endpoints on one listener.
//
// [Scheduler] implements scheduler.Metrics and [Worker] implements
// worker.Metrics with client_golang collectors; neither of those packages
// imports Prometheus. [Handler] serves:
//
//	/metrics  the registry, in the Prometheus text format (or OpenMetrics when asked)
//	/healthz  200 "ok" while the process runs
//	/readyz   200 when every [Check] passes, else 503; one plain-text line per check
//
// Every metric is named gpuq_…, counters end in _total, durations are
// histograms in seconds, and labels are of low cardinality (kinds, states,
// accounts; never job ids). README.md's "Metrics and health" lists them all.
//
// The package does no I/O of its own beyond the HTTP server and knows
// nothing of NATS: a check that needs the connection is a func the caller
// passes (see [Check]).
//
//	reg := metrics.NewRegistry()
//	sm, _ := metrics.NewScheduler(reg)
//	svc, _ := scheduler.New(scheduler.Config{ /* … */ Metrics: sm})
//	h := metrics.Handler(reg, metrics.Check{Name: "scheduler", Func: sm.Ready})
//	go metrics.Serve(ctx, listener, h)
package metrics
