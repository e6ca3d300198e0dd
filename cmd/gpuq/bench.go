package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/bench"
	"github.com/gpuq/gpuq/subjects"
)

func init() {
	register(&command{
		name:    "bench",
		summary: "measure an installation: latencies, jobs/s, submissions/s and the JetStream limit",
		usage:   "bench [--jobs N] [--probes N] [--submitters N] [--gpus N] [--js-ops N]\nbench --nats URL | --context NAME [--creds FILE | --nkey FILE] [--account A] [--jobs N] ...",
		example: `  gpuq bench                                  # an embedded NATS, scheduler and worker (8 simulated GPUs)
  gpuq bench --jobs 500 --probes 10 --output json
  gpuq bench --nats tls://nats.example.com:4222 --creds admin.creds --inbox-prefix _INBOX_admin
  gpuq bench --context prod --jobs 20000
  gpuq bench --context vision --account vision --jobs 500   # as a tenant, in its own account
  gpuq bench --jobs 2000 --cpu-profile bench.pprof && go tool pprof -top bench.pprof

Without --nats or --context it starts everything in this process, on
loopback and in a temporary directory: NATS, a scheduler and one worker
whose GPUs are go-nvml mock devices (simulated, not real hardware), and
removes it all afterwards. $NATS_URL and the config file's default context
are not enough to bench a real installation: name it with --nats or
--context, so that a bench never runs against a server by accident.

Against an installation it needs an admin's credentials: it creates an
account of its own, gpuq-bench-<random>, with just the credits its jobs
cost (1 each), and its jobs run "true" on 1 GPU of your workers. At the end
it cancels any job of its own still waiting, takes the account's remaining
credits back (the account itself stays: gpuq deletes no account) and
deletes its scratch stream and bucket (GPUQ_BENCH_*, gpuq_bench_*). Where each tenant
is a NATS account of its own (deploy/), only a tenant may submit its jobs:
run the bench as one, with --account and an account nobody else uses
meanwhile, holding the credits the jobs cost; there no user may create a
stream either, and the JetStream phase is skipped (it says so).

Phases (the workload of the peer benchmarks):
  idle      one job at a time: submit -> started and submit -> settled
  e2e       --jobs jobs from --submitters submitters while the workers run them
  backlog   --jobs jobs queued behind a gate job, then the gate is cancelled
  jetstream --js-ops async publishes and pipelined KV compare-and-swaps
A progress line goes to stderr; --output json prints one JSON line with
flattened keys: idle.start_ms_p50/p99, idle.settle_ms_p50/p99,
e2e_jobs_per_s, drain_jobs_per_s, submit_jobs_per_s, js.publish_per_s, ...`,
		run: runBench,
	})
}

func runBench(ctx context.Context, e *env, args []string) error {
	c := find("bench")
	fs := e.flags(c)
	var cfg bench.Config
	fs.IntVar(&cfg.Jobs, "jobs", 5000, "jobs of the e2e phase, and of the backlog phase")
	fs.IntVar(&cfg.Probes, "probes", 50, "idle-latency probes, one job at a time")
	fs.IntVar(&cfg.Submitters, "submitters", 8, "concurrent submitters")
	fs.IntVar(&cfg.Warmup, "warmup", 8, "jobs run before the first phase and left out of the numbers")
	fs.IntVar(&cfg.JSOps, "js-ops", 50000, "async publishes, and KV updates, that measure the JetStream limit")
	fs.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 10*time.Minute, "how long one phase's jobs may take to settle")
	fs.StringVar(&cfg.Account, "account", "", "run the jobs in this existing account (one these credentials may submit to) instead of creating gpuq-bench-<random>")
	cpuProfile := fs.String("cpu-profile", "", "write a CPU profile of this process to FILE (go tool pprof): of the embedded NATS, scheduler and worker too")
	gpus := fs.Int("gpus", 8, "simulated GPUs of the embedded worker (without --nats or --context)")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    int
		low  int
	}{{"jobs", cfg.Jobs, 1}, {"probes", cfg.Probes, 1}, {"submitters", cfg.Submitters, 1}, {"warmup", cfg.Warmup, 0}, {"js-ops", cfg.JSOps, 1}, {"gpus", *gpus, 1}} {
		if f.v < f.low {
			return usagef("--%s %d: want at least %d", f.name, f.v, f.low)
		}
	}
	if cfg.Warmup == 0 {
		cfg.Warmup = -1 // bench.Config: 0 is the default, negative none
	}
	if cfg.Account != "" {
		if err := subjects.CheckToken("--account", cfg.Account); err != nil {
			return usagef("%v", err)
		}
	}
	if cfg.PhaseTimeout <= 0 {
		return usagef("--phase-timeout must be positive, not %v", cfg.PhaseTimeout)
	}
	remote := flagSet(fs, "nats") || flagSet(fs, "context")
	if !remote {
		conn := []string{"creds", "nkey", "inbox-prefix", "tls-ca", "tls-cert", "tls-key"}
		if err := onlyFlags(fs, "gpuq bench without --nats or --context (an embedded installation)", conn, nil); err != nil {
			return err
		}
	} else if flagSet(fs, "gpus") {
		return usagef("--gpus is the embedded worker's; a bench of an installation (--nats or --context) runs on its workers")
	}

	var nc *nats.Conn
	var n subjects.Names
	var where string
	if remote {
		s, err := e.session()
		if err != nil {
			return err
		}
		defer s.close()
		nc, n, where = s.nc, s.n, redactURL(e.conn.url)
	} else {
		emb, err := startEmbedded(ctx, e, *gpus)
		if err != nil {
			return err
		}
		defer emb.stop()
		nc, n, where = emb.nc, emb.n, emb.desc
	}
	cl, err := client.New(nc, client.WithPrefix(n.Prefix()), client.WithTimeout(e.conn.timeout))
	if err != nil {
		return err
	}
	if *cpuProfile != "" {
		stop, err := startCPUProfile(*cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	p := newProgress(e.stderr)
	cfg.Progress = p.line
	cfg.AnswerTimeout = e.conn.timeout
	res, err := bench.Run(ctx, nc, cl, cfg)
	p.done()
	if err != nil {
		if res != nil && res.Cleanup != "" {
			fmt.Fprintf(e.stderr, "gpuq bench: the clean-up of account %s left: %s\n", res.Account, res.Cleanup)
		}
		if errors.Is(err, bench.ErrNotPermitted) {
			return fmt.Errorf("%v; run it with an admin's --creds or --nkey (and --inbox-prefix), or without --nats for an embedded installation", err)
		}
		return err
	}
	if e.output == "json" {
		f := res.Fields()
		f["peer"] = "gpuq"
		f["installation"] = "embedded"
		if remote {
			f["installation"] = where
		} else {
			f["simulated_gpus"] = *gpus
		}
		f["date"] = time.Now().UTC().Format(time.RFC3339)
		f["host_cpus"] = runtime.NumCPU()
		return printJSON(e.stdout, f)
	}
	return printBench(e.stdout, where, res)
}

func printBench(w io.Writer, where string, r *bench.Result) error {
	fmt.Fprintf(w, "gpuq bench of %s\n", where)
	clean := "cleaned up"
	if r.Cleanup != "" {
		clean = "clean-up left: " + r.Cleanup
	}
	fmt.Fprintf(w, "account %s: %d jobs succeeded, charged %d credits (1 each), invariant ok: %v; %s\n\n",
		r.Account, r.Succeeded, r.Charged, r.InvariantOK, clean)
	t := newTable(w, "PHASE", "METRIC", "VALUE")
	if i := r.Idle; i != nil {
		t.row("idle", "submit → started, p50 / p99", fmt.Sprintf("%.2f / %.2f ms  (%d probes, one at a time)", i.StartP50, i.StartP99, i.Probes))
		t.row("idle", "submit → settled, p50 / p99", fmt.Sprintf("%.2f / %.2f ms", i.SettleP50, i.SettleP99))
	}
	if e := r.E2E; e != nil {
		t.row("e2e", "submissions accepted", fmt.Sprintf("%.1f /s  (%d jobs, %d submitters)", e.SubmitPerS, r.Jobs, r.Submitters))
		t.row("e2e", "end to end (first submit → last settled)", fmt.Sprintf("%.1f jobs/s  (%.2f s)", e.E2EPerS, e.WallS))
		t.row("e2e", "submit → settled, p50 / p99", fmt.Sprintf("%.1f / %.1f ms", e.SettleP50, e.SettleP99))
	}
	if b := r.Backlog; b != nil {
		t.row("backlog", "drain (gate cancelled → last settled)", fmt.Sprintf("%.1f jobs/s  (%.2f s)", b.DrainPerS, b.WallS))
	}
	if j := r.JS; j != nil {
		t.row("jetstream", "async publish", fmt.Sprintf("%.0f msgs/s  (file storage, replicas: %d)", j.PublishPerS, j.Replicas))
		t.row("jetstream", "KV compare-and-swap, pipelined", fmt.Sprintf("%.0f /s", j.KVCASPerS))
		if r.E2E != nil && j.KVCASPerS > 0 {
			t.row("ratio", "end to end / KV compare-and-swap", fmt.Sprintf("%.2f %%", 100*r.E2E.E2EPerS/j.KVCASPerS))
		}
	}
	if r.JSSkipped != "" {
		t.row("jetstream", "skipped", r.JSSkipped)
	}
	return t.flush()
}

// redactURL is a server URL (or a comma-separated list of them) without
// the passwords or tokens it may carry.
func redactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			continue
		}
		if _, ok := u.User.Password(); !ok {
			u.User = url.User("xxxxx") // a lone user part is a token: a secret
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}

// startCPUProfile profiles this process into path until the returned
// function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close() // the profile's error is the one to report
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "gpuq bench: --cpu-profile %s: %v\n", path, err)
		}
	}, nil
}

// progress writes the bench's progress line to stderr: one line rewritten
// in place on a terminal, else a line at each phase and every few seconds.
type progress struct {
	w        io.Writer
	tty      bool
	mu       sync.Mutex
	phase    string
	last     time.Time
	rewrites bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) line(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[Kgpuq bench: %s", s)
		p.rewrites = true
		return
	}
	phase, _, _ := strings.Cut(s, ":")
	if phase == p.phase && time.Since(p.last) < 5*time.Second {
		return
	}
	p.phase, p.last = phase, time.Now()
	fmt.Fprintf(p.w, "gpuq bench: %s\n", s)
}

func (p *progress) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rewrites {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

// embedded is the installation a bench starts when it is named none: an
// embedded NATS on loopback, a scheduler and one worker on simulated GPUs,
// as gpuq dev runs them, in a temporary directory.
type embedded struct {
	nc   *nats.Conn
	n    subjects.Names
	desc string
	stop func()
}

func startEmbedded(ctx context.Context, e *env, gpus int) (_ *embedded, err error) {
	n, err := e.conn.names()
	if err != nil {
		return nil, err
	}
	log, err := e.logger("error")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gpuq-bench-")
	if err != nil {
		return nil, err
	}
	var stops []func()
	stop := func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Error("remove the bench's directory", slog.String("dir", dir), slog.Any("err", err))
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	ns, err := server.NewServer(&server.Options{ServerName: "gpuq-bench", Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: filepath.Join(dir, "nats"), NoSigs: true, NoLog: true})
	if err != nil {
		return nil, fmt.Errorf("embedded NATS: %w", err)
	}
	go ns.Start()
	stops = append(stops, func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, fmt.Errorf("embedded NATS did not start")
	}
	nc, err := nats.Connect(ns.ClientURL(), nats.Name("gpuq bench"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	stops = append(stops, nc.Close)
	o := workerOpts{host: "sim-bench", simulate: "dgxh200", gpus: gpus, drain: 10 * time.Second, maxUsed: 1024,
		stateDir: filepath.Join(dir, "worker")}
	if os.Geteuid() == 0 {
		o.jobUIDs = devJobUIDs(dir)
	}
	gpu, err := openGPU(o)
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { _ = gpu.Close() }) // stopping: nothing more to do with an error
	model := "NVIDIA H200"
	if devs, err := gpu.Devices(); err == nil && len(devs) > 0 {
		model = devs[0].Model
	}
	svc, err := startScheduler(ctx, nc, n, schedulerOpts{name: "bench", replicas: 1, leaseTTL: 2 * time.Second}, log)
	if err != nil {
		return nil, err
	}
	w, err := newWorker(ctx, nc, n, o, gpu, log)
	if err != nil {
		return nil, err
	}
	// The worker stops first, while the scheduler still folds its reports.
	schedCtx, stopSched := context.WithCancel(context.WithoutCancel(ctx))
	workerCtx, stopWorker := context.WithCancel(schedCtx)
	var schedDone, workerDone sync.WaitGroup
	schedDone.Add(1)
	go func() {
		defer schedDone.Done()
		if err := svc.Run(schedCtx); err != nil {
			log.Error("scheduler", slog.Any("err", err))
		}
	}()
	workerDone.Add(1)
	go func() {
		defer workerDone.Done()
		if err := w.Run(workerCtx); err != nil {
			log.Error("worker", slog.Any("err", err))
		}
	}()
	stops = append(stops, func() {
		stopWorker()
		workerDone.Wait()
		stopSched()
		schedDone.Wait()
	})
	desc := fmt.Sprintf("an embedded installation: NATS %s, a scheduler and worker %s with %d simulated %s GPUs (go-nvml mock devices, not real hardware)",
		ns.ClientURL(), o.host, gpus, model)
	return &embedded{nc: nc, n: n, desc: desc, stop: stop}, nil
}
