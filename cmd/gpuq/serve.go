package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/metrics"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

func init() {
	register(&command{
		name:    "scheduler",
		summary: "run a scheduler: fold the command log into the ledger and dispatch jobs",
		usage:   "scheduler [--nats URL] [--creds FILE] [--name NAME] [--replicas 1|3] [--job-retention D] [--history-max-age D] [--metrics-listen ADDR] [--http ADDR]",
		example: `  gpuq scheduler --nats nats://nats-1:4222,nats://nats-2:4222 --creds scheduler.creds --replicas 3
  # run two or three: one leads, the others wait on the lease and take over within seconds
  # later schedulers can leave --replicas out: they adopt what exists and never lower it
  # while NATS is unreachable a scheduler waits and retries; it exits only on a signal or a configuration error`,
		run: runSchedulerCmd,
	})
	register(&command{
		name:    "worker",
		summary: "run the worker daemon of this GPU host",
		usage:   "worker [--nats URL] [--host NAME] [--simulate dgxh100|dgxh200 --gpus N] [--state-dir DIR] [--job-root DIR] [--job-uids FIRST-LAST|none] [--cgroup DIR] [--metrics-listen ADDR]",
		example: `  gpuq worker --nats nats://nats-1:4222 --creds worker.creds          # real GPUs through NVML
  gpuq worker --host sim-2 --simulate dgxh100 --gpus 4                   # go-nvml's simulated GPUs
  # as root each attempt runs as its own user of --job-uids (61000-61099) in its own directory;
  # otherwise as the worker's user, which the worker's log explains at start
  # --cgroup auto puts each attempt in a cgroup of its own below the worker's: every process it
  # starts is found and killed when it ends, at a fixed cost (Linux 5.14 or later)
  # SIGTERM drains (running jobs finish, up to --drain); a second signal stops at once`,
		run: runWorkerCmd,
	})
}

type schedulerOpts struct {
	name     string
	replicas int
	leaseTTL time.Duration
	core     scheduler.CoreConfig
	// retention holds the streams' retention flags (Replicas and Logger
	// are set from the other options).
	retention     natsbus.SetupConfig
	retainApplied time.Duration
	// metrics, if set, receives what the scheduler measures.
	metrics *metrics.Scheduler
}

// startScheduler sets up gpuq's streams and buckets and returns a scheduler
// service ready to Run. While the server cannot be reached it waits (see
// untilReachable); a configuration error, such as a --replicas that would
// lower replication, fails at once with what to do.
func startScheduler(ctx context.Context, nc *nats.Conn, n subjects.Names, o schedulerOpts, log *slog.Logger) (*scheduler.Service, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	err = untilReachable(ctx, log, "set up gpuq's streams and buckets", func(ctx context.Context) error {
		cfg := o.retention
		cfg.Replicas, cfg.Logger = o.replicas, log
		return natsbus.Setup(ctx, js, n, cfg)
	})
	var re *natsbus.ReplicasError
	if errors.As(err, &re) {
		return nil, fmt.Errorf("%s %s has %d replicas; --replicas %d would lower it: leave the flag out to keep %d "+
			"(a scheduler never lowers replication; to lower it on purpose, change it on the server first, e.g. nats stream edit)",
			re.Kind, re.Name, re.Have, re.Want, re.Have)
	}
	if err != nil {
		return nil, err
	}
	var lkv, hkv, fkv jetstream.KeyValue
	err = untilReachable(ctx, log, "open the ledger, hosts and facts buckets", func(ctx context.Context) error {
		var err error
		if lkv, err = js.KeyValue(ctx, n.LedgerBucket()); err != nil {
			return err
		}
		if fkv, err = js.KeyValue(ctx, n.FactsBucket()); err != nil {
			return err
		}
		hkv, err = js.KeyValue(ctx, n.HostsBucket())
		return err
	})
	if err != nil {
		return nil, err
	}
	lease, err := natsstore.NewLease(js, lkv, o.name, o.leaseTTL)
	if err != nil {
		return nil, err
	}
	lease.Logger = log.With("component", "scheduler")
	store := natsstore.New(js, lkv)
	store.Names = n
	cfg := scheduler.Config{
		Store: store, Lease: lease, CommandLog: natsbus.NewCommandLog(js, n),
		Publisher: natsbus.NewPublisher(js), Hosts: natsbus.NewHosts(hkv, log),
		Names: n, Logger: log, Core: o.core, MaxMessageBytes: maxEffectBytes(nc.MaxPayload()),
		RetainApplied: o.retainApplied, Facts: natsbus.NewFacts(fkv), Name: o.name,
	}
	if o.metrics != nil {
		cfg.Metrics = o.metrics
	}
	return scheduler.New(cfg)
}

// maxEffectBytes is the largest effect body the scheduler may send to a
// server that accepts messages of up to payload bytes (0: not known yet),
// less 4 KiB for the subject and headers; 0 leaves the default.
func maxEffectBytes(payload int64) int {
	if payload <= 0 || payload >= wire.MaxMessageBytes {
		return 0
	}
	return max(int(payload)-4<<10, 1<<10)
}

func runSchedulerCmd(ctx context.Context, e *env, args []string) error {
	c := find("scheduler")
	fs := e.flags(c)
	host, hostErr := os.Hostname() // the default name; needed only if --name is left out
	o := schedulerOpts{}
	fs.StringVar(&o.name, "name", host, "this scheduler's name in the lease and logs")
	fs.IntVar(&o.replicas, "replicas", 0, "replicas of every stream and bucket: 1, or 3 on a cluster; left out, adopt what exists "+
		"(1 on a fresh server); a value below what exists is refused, one above raises it")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 5*time.Second, "leader lease time to live (whole seconds)")
	fs.DurationVar(&o.core.HalfLife, "half-life", 24*time.Hour, "fair share: how fast past use fades (use this long ago counts half)")
	fs.BoolVar(&o.core.NoBackfill, "no-backfill", false, "turn EASY backfill off")
	fs.DurationVar(&o.core.Retry.Initial, "retry-initial", 10*time.Second, "wait before the first retry of a lost or failed-by-infrastructure attempt")
	fs.DurationVar(&o.core.Retry.Max, "retry-max", 10*time.Minute, "longest wait between retries (the wait doubles each time)")
	fs.DurationVar(&o.core.UnplaceableAfter, "unplaceable-after", time.Minute, "how long a job wider than every live host, or asking for a GPU model none has, waits before it fails")
	fs.DurationVar(&o.core.LostAfter, "lost-after", 30*time.Second, "how long an attempt's host may be silent before it is declared lost")
	retentionFlags(fs, &o)
	fs.DurationVar(&o.core.JobRetention, "job-retention", scheduler.DefaultJobRetention,
		"how long a finished job stays in the ledger before it moves to the history stream (a positive duration, e.g. 168h)")
	fs.DurationVar(&o.retention.HistoryMaxAge, "history-max-age", 0, "how long the history stream keeps archived jobs (0: for good)")
	metricsAddr := fs.String("metrics-listen", "", "serve Prometheus /metrics, /healthz and /readyz on this HOST:PORT (default off)")
	dash := addWebFlags(fs, "", "serve the read-only web dashboard on this HOST:PORT, read with this scheduler's credentials (default off)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if o.core.JobRetention <= 0 || o.retention.HistoryMaxAge < 0 {
		return usagef("--job-retention must be positive and --history-max-age 0 or positive, not %v and %v", o.core.JobRetention, o.retention.HistoryMaxAge)
	}
	if err := checkRetention(o); err != nil {
		return err
	}
	if hostErr != nil && !flagSet(fs, "name") {
		return usagef("the host name is unknown (%v): give the scheduler one with --name", hostErr)
	}
	log, err := e.logger(*level)
	if err != nil {
		return err
	}
	ws, err := listenWeb(dash, log)
	if err != nil {
		return err
	}
	n, err := e.conn.names()
	if err != nil {
		return err
	}
	nc, err := e.conn.dial("gpuq scheduler " + o.name)
	if err != nil {
		return err
	}
	defer nc.Close()
	ms, err := listenMetrics(*metricsAddr)
	if err != nil {
		return err
	}
	if ms != nil {
		if o.metrics, err = metrics.NewScheduler(ms.reg); err != nil {
			return err
		}
		ms.check("nats", natsReady(nc))
		ms.check("scheduler", o.metrics.Ready)
		defer ms.serve(ctx, log)()
		log.Info("serving metrics", slog.String("url", ms.url()))
	}
	svc, err := startScheduler(ctx, nc, n, o, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal while waiting for the server
		}
		return err
	}
	cl, err := client.New(nc, client.WithPrefix(n.Prefix()), client.WithTimeout(e.conn.timeout))
	if err != nil {
		return err
	}
	stopWeb, err := ws.start(ctx, cl, log)
	if err != nil {
		return err
	}
	defer stopWeb()
	if ws != nil {
		log.Info("serving the dashboard", slog.String("url", ws.url()))
	}
	log.Info("scheduler running", slog.String("name", o.name), slog.String("nats", e.conn.url))
	return svc.Run(ctx)
}

type workerOpts struct {
	host     string
	simulate string
	gpus     int
	stateDir string
	jobRoot  string
	jobUIDs  worker.IDRange
	cgroup   string
	keepDirs bool
	drain    time.Duration
	maxUsed  int64
	maxLog   int // output kept per attempt, bytes; 0: the worker's default
	// metrics, if set, receives what the worker measures.
	metrics *metrics.Worker
}

// defaultJobUIDs is the worker's job uid pool when it runs as root: ids no
// distribution gives its users (Debian's end at 59999) and below systemd's
// dynamic users (61184 and up).
const defaultJobUIDs = "61000-61099"

// openGPU opens the host's GPUs: go-nvml's mock server when simulating,
// else the NVIDIA driver. Without a driver it says so and what to do.
func openGPU(o workerOpts) (*nvmlgpu.GPU, error) {
	if o.simulate != "" {
		return nvmlgpu.Simulate(o.host, o.simulate, o.gpus)
	}
	g, err := nvmlgpu.Open()
	if errors.Is(err, worker.ErrNoNVML) {
		return nil, fmt.Errorf("%w; to try gpuq without GPUs, run with --simulate dgxh200 --gpus 8", err)
	}
	return g, err
}

// newWorker builds the worker of o.host over nc. While the server cannot be
// reached it waits for the hosts bucket (see untilReachable); a reachable
// server without the bucket fails at once.
func newWorker(ctx context.Context, nc *nats.Conn, n subjects.Names, o workerOpts, gpu worker.GPU, log *slog.Logger) (*worker.Worker, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	var hkv jetstream.KeyValue
	err = untilReachable(ctx, log, "open the hosts bucket", func(ctx context.Context) error {
		var err error
		hkv, err = js.KeyValue(ctx, n.HostsBucket())
		return err
	})
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("no %s bucket on the server: start a scheduler first (it creates gpuq's streams and buckets)", n.HostsBucket())
	}
	if err != nil {
		return nil, err
	}
	bus, err := natsbus.NewWorkerBus(js, n, o.host, hkv)
	if err != nil {
		return nil, err
	}
	cfg := worker.Config{Host: o.host, GPU: gpu, Bus: bus, Logger: log, StateDir: o.stateDir,
		JobRoot: o.jobRoot, JobUIDs: o.jobUIDs, Cgroup: o.cgroup, KeepAttemptDirs: o.keepDirs, DrainTimeout: o.drain, MaxUsedMiB: o.maxUsed, MaxLogBytes: o.maxLog}
	if o.metrics != nil {
		cfg.Metrics = o.metrics
		bus.ReportRetried = o.metrics.ReportRetried
	}
	return worker.New(cfg)
}

func runWorkerCmd(ctx context.Context, e *env, args []string) error {
	c := find("worker")
	fs := e.flags(c)
	host, hostErr := os.Hostname() // the default host name; needed only if --host is left out
	o := workerOpts{}
	fs.StringVar(&o.host, "host", host, "this host's name (letters, digits, '_' and '-')")
	fs.StringVar(&o.simulate, "simulate", "", "run on go-nvml's simulated GPUs of this model: dgxh100 or dgxh200")
	fs.IntVar(&o.gpus, "gpus", 8, "number of simulated GPUs (with --simulate)")
	fs.StringVar(&o.stateDir, "state-dir", "", "where the worker records attempts it started, mode 0700 (default <tmp>/gpuq-worker-<host>)")
	fs.StringVar(&o.jobRoot, "job-root", "", "where each attempt gets its own directory, removed when it ends (default <state-dir>-jobs)")
	fs.BoolVar(&o.keepDirs, "keep-job-dirs", false, "keep each attempt's directory after it ends (handed back to the worker's user)")
	uids := ""
	if os.Geteuid() == 0 {
		uids = defaultJobUIDs
	}
	fs.StringVar(&uids, "job-uids", uids, "as root: ids FIRST-LAST to run attempts as, one each (uid and gid), no user or group of the host's, "+
		"and no other worker's; none runs jobs as the worker's user (default "+defaultJobUIDs+" as root, none otherwise)")
	fs.StringVar(&o.cgroup, "cgroup", "", "a cgroup v2 directory for this worker alone, or auto: gpuq-jobs-<host> below the worker's own cgroup "+
		"(under systemd, the service's, with Delegate=yes); each attempt runs in a cgroup of its own there, which holds every process it starts "+
		"(default: find them through /proc)")
	fs.DurationVar(&o.drain, "drain", 5*time.Minute, "on SIGTERM, how long running jobs may finish before they are stopped")
	fs.Int64Var(&o.maxUsed, "max-used-mib", 1024, "memory a GPU may have in use and still count as free")
	fs.IntVar(&o.maxLog, "max-log-bytes", 16<<20, "output kept per attempt; gpuq logs says where the rest was cut and how much was dropped")
	metricsAddr := fs.String("metrics-listen", "", "serve Prometheus /metrics, /healthz and /readyz on this HOST:PORT (default off)")
	level := fs.String("log-level", "info", "log level: debug, info, warn or error")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if hostErr != nil && !flagSet(fs, "host") {
		return usagef("the host name is unknown (%v): give it with --host", hostErr)
	}
	if err := subjects.CheckToken("host", o.host); err != nil {
		return usagef("--host: %v", err)
	}
	jobUIDs, err := worker.ParseIDRange(uids)
	if err != nil {
		return usagef("--job-uids: %v", err)
	}
	o.jobUIDs = jobUIDs
	if o.cgroup == "auto" {
		own, err := worker.OwnCgroup()
		if err != nil {
			return usagef("--cgroup auto: %v", err)
		}
		o.cgroup = filepath.Join(own, "gpuq-jobs-"+o.host)
	}
	if o.cgroup != "" {
		// Refused now, not once the server answers.
		if err := worker.CheckCgroup(o.cgroup); err != nil {
			return usagef("--cgroup: %v", err)
		}
	}
	log, err := e.logger(*level)
	if err != nil {
		return err
	}
	n, err := e.conn.names()
	if err != nil {
		return err
	}
	gpu, err := openGPU(o)
	if err != nil {
		return err
	}
	defer func() { _ = gpu.Close() }() // exiting; the driver releases everything anyway
	nc, err := e.conn.dial("gpuq worker " + o.host)
	if err != nil {
		return err
	}
	defer nc.Close()
	ms, err := listenMetrics(*metricsAddr)
	if err != nil {
		return err
	}
	if ms != nil {
		if o.metrics, err = metrics.NewWorker(ms.reg, metrics.WorkerConfig{}); err != nil {
			return err
		}
		ms.check("nats", natsReady(nc))
		ms.check("worker", o.metrics.Ready)
		defer ms.serve(context.WithoutCancel(ctx), log)()
		log.Info("serving metrics", slog.String("url", ms.url()))
	}
	w, err := newWorker(ctx, nc, n, o, gpu, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil // a signal while waiting for the server
		}
		return err
	}
	// The first signal (ctx) drains; a second stops at once.
	sig := make(chan os.Signal, 2)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		<-ctx.Done()
		select {
		case <-sig: // the first, which ended ctx
		case <-time.After(time.Second):
		}
		<-sig
		log.Warn("second signal: stopping now")
		w.Abort()
	}()
	return w.Run(ctx)
}

// startTryTimeout bounds one try of a start-up step, so that a request
// buffered while the server is away is given up and tried again.
const startTryTimeout = 5 * time.Second

// untilReachable runs step until it succeeds, fails with an error that is
// not transient (natsbus.Transient), or ctx ends. Each try has
// startTryTimeout; between tries it waits with an exponential backoff
// capped at 5s. It logs once that it is waiting and why, and once that the
// server answered again; never once per try.
func untilReachable(ctx context.Context, log *slog.Logger, what string, step func(context.Context) error) error {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 100*time.Millisecond, 5*time.Second, 0
	waiting := false
	err := backoff.RetryNotify(func() error {
		tctx, cancel := context.WithTimeout(ctx, startTryTimeout)
		defer cancel()
		err := step(tctx)
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return backoff.Permanent(ctx.Err())
		case !natsbus.Transient(err):
			return backoff.Permanent(err)
		}
		return err
	}, backoff.WithContext(bo, ctx), func(err error, next time.Duration) {
		if !waiting {
			waiting = true
			log.WarnContext(ctx, "the server cannot answer yet; retrying until it does", slog.String("step", what), slog.Any("err", err))
		}
	})
	if err == nil && waiting {
		log.InfoContext(ctx, "the server answers again", slog.String("step", what))
	}
	return err
}
