package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/worker"
)

// installation is a whole gpuq on one embedded nats-server, as gpuq dev
// runs it: the server, a scheduler, and one worker on go-nvml's simulated
// GPUs. An Example has no testing.T, so this starts the server itself
// rather than through natstest.
type installation struct {
	srv    *server.Server
	nc     *nats.Conn // the pipeline's connection
	js     jetstream.JetStream
	cancel context.CancelFunc
	done   []chan error
	dir    string
}

// startGpuq runs an installation with its files under a new directory; stop
// ends it and removes them.
func startGpuq() (*installation, error) {
	dir, err := os.MkdirTemp("", "gpuq-client-test-")
	if err != nil {
		return nil, err
	}
	in := &installation{dir: dir}
	in.srv, err = server.NewServer(&server.Options{JetStream: true, StoreDir: filepath.Join(dir, "nats"),
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, DontListen: true})
	if err != nil {
		return nil, in.fail(err)
	}
	go in.srv.Start()
	if !in.srv.ReadyForConnections(10 * time.Second) {
		return nil, in.fail(errors.New("nats-server did not start"))
	}
	connect := func() (*nats.Conn, jetstream.JetStream, error) {
		nc, err := nats.Connect("", nats.InProcessServer(in.srv))
		if err != nil {
			return nil, nil, err
		}
		js, err := jetstream.New(nc)
		return nc, js, err
	}
	if in.nc, in.js, err = connect(); err != nil {
		return nil, in.fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	n := subjects.Default
	if err := natsbus.Setup(ctx, in.js, n, natsbus.SetupConfig{}); err != nil {
		return nil, in.fail(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	// The scheduler, on a connection of its own.
	_, sjs, err := connect()
	if err != nil {
		return nil, in.fail(err)
	}
	lkv, err := sjs.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		return nil, in.fail(err)
	}
	hkv, err := sjs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		return nil, in.fail(err)
	}
	lease, err := natsstore.NewLease(sjs, lkv, "sched", time.Second)
	if err != nil {
		return nil, in.fail(err)
	}
	svc, err := scheduler.New(scheduler.Config{Store: natsstore.New(sjs, lkv), Lease: lease, CommandLog: natsbus.NewCommandLog(sjs, n),
		Publisher: natsbus.NewPublisher(sjs), Hosts: natsbus.NewHosts(hkv, log), Names: n, Logger: log,
		DecideInterval: 20 * time.Millisecond})
	if err != nil {
		return nil, in.fail(err)
	}
	in.run(ctx, svc.Run)

	// One worker with 8 simulated GPUs.
	_, wjs, err := connect()
	if err != nil {
		return nil, in.fail(err)
	}
	whkv, err := wjs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		return nil, in.fail(err)
	}
	gpu, err := nvmlgpu.Simulate("sim-1", "dgxh100", 8)
	if err != nil {
		return nil, in.fail(err)
	}
	bus, err := natsbus.NewWorkerBus(wjs, n, "sim-1", whkv)
	if err != nil {
		return nil, in.fail(err)
	}
	w, err := worker.New(worker.Config{Host: "sim-1", GPU: gpu, Bus: bus, Logger: log, StateDir: filepath.Join(dir, "worker"),
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second, LogFlush: 50 * time.Millisecond, DrainTimeout: time.Second})
	if err != nil {
		return nil, in.fail(err)
	}
	in.run(ctx, w.Run)
	return in, nil
}

func (in *installation) run(ctx context.Context, fn func(context.Context) error) {
	done := make(chan error, 1)
	in.done = append(in.done, done)
	go func() { done <- fn(ctx) }()
}

// fail stops what started and returns err.
func (in *installation) fail(err error) error {
	return errors.Join(err, in.stop())
}

// stop ends the daemons, the server and the files, and returns the
// daemons' errors.
func (in *installation) stop() error {
	var errs []error
	if in.cancel != nil {
		in.cancel()
	}
	for _, d := range in.done {
		select {
		case err := <-d:
			if err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		case <-time.After(15 * time.Second):
			errs = append(errs, fmt.Errorf("a daemon did not stop within 15s"))
		}
	}
	if in.nc != nil {
		in.nc.Close()
	}
	if in.srv != nil {
		in.srv.Shutdown()
		in.srv.WaitForShutdown()
	}
	return errors.Join(append(errs, os.RemoveAll(in.dir))...)
}
