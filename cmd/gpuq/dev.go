package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/metrics"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/worker"
)

func init() {
	register(&command{
		name:    "dev",
		summary: "run everything on this machine: embedded NATS, a scheduler and a worker on simulated GPUs",
		usage:   "dev [--listen HOST:PORT] [--data DIR] [--gpus N] [--model dgxh100|dgxh200] [--metrics-listen HOST:PORT] [--http HOST:PORT]",
		example: `  go run ./cmd/gpuq dev                      # NATS on 127.0.0.1:4222, data in ~/.gpuq/dev
  gpuq dev --listen 127.0.0.1:4333 --data /tmp/gpuq --gpus 4 --model dgxh100
  # Ctrl-C stops it and keeps the data; run it again to go on where it stopped`,
		run: runDev,
	})
}

func defaultDevData() string {
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".gpuq", "dev")
	}
	return filepath.Join(".gpuq", "dev")
}

// devJobUIDs is the job uid pool of a gpuq dev run as root: 64 ids of its
// own, named by the data directory (so a restart finds its leftovers, and
// two dev runs on other data do not share ids), far above any user's.
func devJobUIDs(data string) worker.IDRange {
	abs, err := filepath.Abs(data)
	if err != nil {
		abs = data
	}
	h := fnv.New32a()
	h.Write([]byte(abs))
	first := 1_000_000 + h.Sum32()%100_000*64
	return worker.IDRange{First: first, Last: first + 63}
}

// invokedAs is how the user ran this binary, for the commands dev prints.
func invokedAs() string {
	if strings.Contains(os.Args[0], "go-build") {
		return "go run ./cmd/gpuq"
	}
	return "gpuq"
}

func runDev(ctx context.Context, e *env, args []string) error {
	c := find("dev")
	fs := e.flags(c)
	listen := fs.String("listen", "127.0.0.1:4222", "address the embedded NATS server listens on")
	data := fs.String("data", defaultDevData(), "directory for NATS data and worker state")
	o := workerOpts{host: "sim-1", drain: 10 * time.Second, maxUsed: 1024}
	fs.IntVar(&o.gpus, "gpus", 8, "number of simulated GPUs")
	fs.IntVar(&o.maxLog, "max-log-bytes", 16<<20, "output the worker keeps per attempt")
	fs.StringVar(&o.simulate, "model", "dgxh200", "simulated GPU model: dgxh100 or dgxh200")
	fs.StringVar(&o.host, "host", "sim-1", "the simulated worker's host name")
	level := fs.String("log-level", "info", "log level of the embedded parts: debug, info (host loss, leader changes, rejected commands), warn or error")
	retention := fs.Duration("job-retention", scheduler.DefaultJobRetention, "how long a finished job stays in the ledger before it moves to history")
	metricsAddr := fs.String("metrics-listen", "127.0.0.1:0", "serve Prometheus /metrics, /healthz and /readyz on this HOST:PORT (port 0: a free one; empty: off)")
	dash := addWebFlags(fs, "127.0.0.1:0", "serve the read-only web dashboard on this HOST:PORT (port 0: a free one; empty: off)")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if *retention <= 0 {
		return usagef("--job-retention must be positive, not %v", *retention)
	}
	log, err := e.logger(*level)
	if err != nil {
		return err
	}
	hostName, portText, err := net.SplitHostPort(*listen)
	if err != nil {
		return usagef("--listen %q: want HOST:PORT", *listen)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return usagef("--listen %q: bad port", *listen)
	}
	n, err := e.conn.names()
	if err != nil {
		return err
	}
	unlock, err := lockDir(*data)
	if err != nil {
		return err
	}
	defer unlock()
	if l, err := net.Listen("tcp", *listen); err != nil {
		return fmt.Errorf("cannot listen on %s (%v): is another NATS server or gpuq dev using it? try --listen %s",
			*listen, err, net.JoinHostPort(hostName, strconv.Itoa(port+1)))
	} else if err := l.Close(); err != nil {
		return err
	}
	o.stateDir = filepath.Join(*data, "worker-"+o.host)
	if os.Geteuid() == 0 {
		o.jobUIDs = devJobUIDs(*data)
	}
	gpu, err := openGPU(o)
	if err != nil {
		return err
	}
	defer func() { _ = gpu.Close() }() // exiting

	ns, err := server.NewServer(&server.Options{ServerName: "gpuq-dev", Host: hostName, Port: port,
		JetStream: true, StoreDir: filepath.Join(*data, "nats"), NoSigs: true, NoLog: true})
	if err != nil {
		return fmt.Errorf("embedded NATS: %w", err)
	}
	go ns.Start()
	defer func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	}()
	if !ns.ReadyForConnections(10 * time.Second) {
		return fmt.Errorf("embedded NATS did not start on %s: is the port in use (another gpuq dev)? try --listen %s",
			*listen, net.JoinHostPort(hostName, strconv.Itoa(port+1)))
	}
	url := ns.ClientURL()
	nc, err := nats.Connect(url, nats.Name("gpuq dev"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := client.New(nc, client.WithPrefix(n.Prefix()), client.WithTimeout(e.conn.timeout))
	if err != nil {
		return err
	}

	so := schedulerOpts{name: "dev", replicas: 1, leaseTTL: 2 * time.Second, core: scheduler.CoreConfig{JobRetention: *retention}}
	ms, err := listenMetrics(*metricsAddr)
	if err != nil {
		return err
	}
	ws, err := listenWeb(dash, log)
	if err != nil {
		return err
	}
	metricsLine := ""
	if ms != nil {
		if so.metrics, err = metrics.NewScheduler(ms.reg); err != nil {
			return err
		}
		if o.metrics, err = metrics.NewWorker(ms.reg, metrics.WorkerConfig{}); err != nil {
			return err
		}
		ms.check("nats", natsReady(nc))
		ms.check("scheduler", so.metrics.Ready)
		ms.check("worker", o.metrics.Ready)
		defer ms.serve(context.WithoutCancel(ctx), log)()
		metricsLine = fmt.Sprintf("  metrics    %s  (and /healthz, /readyz)\n", ms.url())
	}
	svc, err := startScheduler(ctx, nc, n, so, log)
	if err != nil {
		return err
	}
	// After the scheduler has made the streams the dashboard follows.
	stopWeb, err := ws.start(context.WithoutCancel(ctx), cl, log)
	if err != nil {
		return err
	}
	defer stopWeb()
	dashboardLine := ""
	if ws != nil {
		dashboardLine = fmt.Sprintf("  dashboard  %s  (read-only)\n", ws.url())
	}
	w, err := newWorker(ctx, nc, n, o, gpu, log)
	if err != nil {
		return err
	}
	// The parts run until Ctrl-C; then the worker drains first, while the
	// scheduler still folds its reports, and the scheduler stops last.
	schedCtx, stopSched := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSched()
	workerCtx, stopWorker := context.WithCancel(schedCtx)
	defer stopWorker()
	var schedDone, workerDone sync.WaitGroup
	errs := make(chan error, 2)
	schedDone.Add(1)
	go func() {
		defer schedDone.Done()
		if err := svc.Run(schedCtx); err != nil {
			errs <- fmt.Errorf("scheduler: %w", err)
		}
	}()
	workerDone.Add(1)
	go func() {
		defer workerDone.Done()
		if err := w.Run(workerCtx); err != nil {
			errs <- fmt.Errorf("worker: %w", err)
		}
	}()
	shutdown := func() {
		stopWorker()
		workerDone.Wait()
		stopSched()
		schedDone.Wait()
	}

	demo, err := ensureDemoAccount(ctx, cl)
	if err != nil {
		shutdown()
		return err
	}
	me := invokedAs()
	model := strings.ToUpper(o.simulate) + " GPUs"
	if devs, err := gpu.Devices(); err == nil && len(devs) > 0 {
		model = devs[0].Model
	}
	fmt.Fprintf(e.stdout, `gpuq dev is running.
  NATS       %s  (data in %s)
  scheduler  leading
  worker     %s with %d simulated %s (go-nvml mock devices, not real hardware)
  account    %s
%s%s
Try, in another terminal:
  %s submit --account demo --gpus 2 --cost 50 --wait -- sh -c 'echo hello from $CUDA_VISIBLE_DEVICES'
  %s jobs
  %s hosts

Ctrl-C stops it; the data stays in %s.
`, url, *data, o.host, o.gpus, model, demo, metricsLine, dashboardLine, me, me, me, *data)

	select {
	case <-ctx.Done():
	case err := <-errs:
		log.Error("stopping", slog.Any("err", err))
		shutdown()
		return err
	}
	fmt.Fprintln(e.stdout, "stopping: letting running jobs finish (up to 10s; Ctrl-C again stops them now)…")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			w.Abort()
		case <-schedCtx.Done():
		}
	}()
	shutdown()
	fmt.Fprintln(e.stdout, "stopped; data kept in", *data)
	return nil
}

// ensureDemoAccount creates account "demo" with 1000 credits unless it
// exists, and describes it.
func ensureDemoAccount(ctx context.Context, cl *client.Client) (string, error) {
	a, err := cl.Account(ctx, "demo")
	if err == nil {
		return fmt.Sprintf("demo with %d credits (%d available)", a.Balance, a.Available()), nil
	}
	if !errors.Is(err, client.ErrNotFound) {
		return "", err
	}
	ev, err := cl.Admin(ctx, ledger.Admin{Account: "demo", ID: "dev-demo", Op: ledger.OpCreate, Balance: 1000})
	var rej *client.RejectedError
	if errors.As(err, &rej) && rej.Reason == ledger.ReasonAccountExists {
		return "demo", nil
	}
	if err != nil {
		return "", fmt.Errorf("create the demo account: %w", err)
	}
	return fmt.Sprintf("demo with %d credits (created now)", ev.Balance), nil
}
