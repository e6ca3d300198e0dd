package gpuq_test

// Tests of deploy/nats-server.conf: a real server started from the file runs
// the scheduler, a worker and a submitter, each as its own user, through a
// job end to end; and each role is refused what it must not do.

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/worker"
)

func TestDeployConfigRoles(t *testing.T) {
	// Not parallel: the config reads its passwords from the environment.
	for name, pw := range map[string]string{"GPUQ_SCHEDULER_PASSWORD": "s3", "GPUQ_ADMIN_PASSWORD": "a3",
		"GPUQ_VISION_PASSWORD": "v3", "GPUQ_WORKER_PASSWORD": "w3"} {
		t.Setenv(name, pw)
	}
	opts, err := server.ProcessConfigFile("deploy/nats-server.conf")
	if err != nil {
		t.Fatalf("parse deploy/nats-server.conf: %v", err)
	}
	if !opts.JetStream || len(opts.Users) != 4 {
		t.Fatalf("config: jetstream %v, %d users", opts.JetStream, len(opts.Users))
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	connect := func(user, pw string) (*nats.Conn, jetstream.JetStream) {
		t.Helper()
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, pw), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatalf("connect as %s: %v", user, err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := subjects.Default
	log := slog.New(slog.NewTextHandler(tOutput{t, "deploy"}, &slog.HandlerOptions{Level: slog.LevelWarn}))

	// The scheduler, as user scheduler.
	_, sjs := connect("scheduler", "s3")
	if err := natsbus.Setup(ctx, sjs, n, natsbus.SetupConfig{}); err != nil {
		t.Fatalf("setup as scheduler: %v", err)
	}
	lkv, err := sjs.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatalf("scheduler binds the ledger bucket: %v", err)
	}
	hkv, err := sjs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatalf("scheduler binds the hosts bucket: %v", err)
	}
	lease, err := natsstore.NewLease(sjs, lkv, "s", time.Second)
	if err != nil {
		t.Fatalf("scheduler lease: %v", err)
	}
	svc, err := scheduler.New(scheduler.Config{Store: natsstore.New(sjs, lkv), Lease: lease, Log: natsbus.NewLog(sjs, n),
		Publisher: natsbus.NewPublisher(sjs), Hosts: natsbus.NewHosts(hkv, log), Logger: log, DecideInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSched := context.WithCancel(ctx)
	schedDone := make(chan error, 1)
	go func() { schedDone <- svc.Run(sctx) }()
	defer func() {
		stopSched()
		select {
		case err := <-schedDone:
			if err != nil {
				t.Errorf("scheduler: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the scheduler did not stop within 10s")
		}
	}()

	// The worker of gpu-host-1, as its own user.
	_, wjs := connect("worker-gpu-host-1", "w3")
	whkv, err := wjs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatalf("worker binds the hosts bucket: %v", err)
	}
	wb, err := natsbus.NewWorkerBus(wjs, n, "gpu-host-1", whkv)
	if err != nil {
		t.Fatalf("worker bus: %v", err)
	}
	gpu, err := nvmlgpu.Simulate("gpu-host-1", "dgxh100", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gpu.Close() }() // test teardown
	w, err := worker.New(worker.Config{Host: "gpu-host-1", GPU: gpu, Bus: wb, Logger: log, StateDir: t.TempDir(),
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	defer func() { stopWorker(); <-workerDone }()

	// The admin creates the account; the submitter runs a job through it.
	anc, _ := connect("admin", "a3")
	admin, err := client.New(anc, client.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatalf("admin client: %v", err)
	}
	if _, err := admin.Admin(ctx, ledger.Admin{Account: "vision", ID: "c", Op: ledger.OpCreate, Balance: 100}); err != nil {
		t.Fatalf("admin creates an account: %v", err)
	}
	vnc, vjs := connect("vision", "v3")
	vision, err := client.New(vnc, client.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatalf("submitter client: %v", err)
	}
	acc, err := vision.Submit(ctx, ledger.Submit{Account: "vision", ID: "deployed", GPUs: 1, Cost: 30, Command: []string{"sh", "-c", "echo ok"}})
	if err != nil {
		t.Fatalf("submitter submits: %v", err)
	}
	final, err := vision.Wait(ctx, "vision", "deployed", acc.Seq)
	if err != nil || final.Type != ledger.EventSucceeded || final.Balance != 70 {
		t.Fatalf("the job through the deploy config: %+v, %v", final, err)
	}
	if j, err := vision.Job(ctx, "deployed"); err != nil || j.State != ledger.StateSucceeded {
		t.Errorf("submitter reads its job: %+v, %v", j, err)
	}

	// The admin sets the price table of metered jobs.
	prices := ledger.SetPricing{ID: "prices-1", PerGPUHour: map[string]ledger.Credits{"NVIDIA H100 80GB HBM3": 360}, Default: 100, FailurePercent: 50}
	if ev, err := admin.SetPricing(ctx, prices); err != nil || ev.Type != ledger.EventPricingSet {
		t.Fatalf("admin sets the price table: %+v, %v", ev, err)
	}
	if p, err := admin.Pricing(ctx); err != nil || p == nil || p.Default != 100 || p.PerGPUHour["NVIDIA H100 80GB HBM3"] != 360 {
		t.Errorf("admin reads the price table: %+v, %v", p, err)
	}

	// What each role must not do.
	short := func() context.Context {
		c, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		t.Cleanup(cancel)
		return c
	}
	if _, err := vjs.Publish(short(), n.Submit("other"), []byte(`{"v":1}`)); err == nil {
		t.Error("the vision submitter published to another account's submit subject")
	}
	if _, err := vjs.Publish(short(), n.Admin("vision"), []byte(`{"v":1}`)); err == nil {
		t.Error("a submitter published an admin command")
	}
	if _, err := vjs.Publish(short(), n.Config(subjects.ConfigPricing), []byte(`{"v":1}`)); err == nil {
		t.Error("a submitter published a price table")
	}
	if _, err := vision.Account(short(), "other"); err == nil || errors.Is(err, client.ErrNotFound) {
		t.Errorf("a submitter read another account's record: %v", err)
	}
	if _, err := vision.Watch(short(), "other", "x", 0, nil); err == nil || !strings.Contains(err.Error(), "read") {
		t.Errorf("a submitter read another account's events: %v", err)
	}
	if _, err := wjs.Publish(short(), n.Report("gpu-host-2"), []byte(`{"v":1}`)); err == nil {
		t.Error("a worker published a report for another host")
	}
	if _, err := wjs.Publish(short(), n.Submit("vision"), []byte(`{"v":1}`)); err == nil {
		t.Error("a worker submitted a job")
	}
	if _, err := wjs.Publish(short(), "$KV.gpuq_ledger.account.vision", []byte(`{}`)); err == nil {
		t.Error("a worker wrote the ledger")
	}
	// A worker reads job records (it confirms each order against one
	// before it starts: the job above ran only because it could), and no
	// account record.
	wlkv, err := wjs.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatalf("a worker binds the ledger bucket: %v", err)
	}
	if e, err := wlkv.Get(ctx, subjects.JobKey("deployed")); err != nil {
		t.Errorf("a worker reads a job record: %v", err)
	} else if j, err := ledger.UnmarshalJob(e.Value()); err != nil || j.State != ledger.StateSucceeded {
		t.Errorf("the job record a worker read: %+v, %v", j, err)
	}
	if _, err := wlkv.Get(short(), subjects.AccountKey("vision")); err == nil {
		t.Error("a worker read an account record")
	}
}
