package gpuq_test

// Tests of deploy/nats-server.conf: a real server started from the file runs
// the scheduler, a worker, two tenants and the admin, each an nkey user in
// its own NATS account, through jobs end to end; each role does what its
// commands need, and is refused what it must not do. security_test.go
// replays attacks against the same deployment.

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestDeployConfigRoles(t *testing.T) {
	d := newDeployment(t)
	ctx, n := d.ctx, d.n

	// A submitter runs a job and reads it, its account and its output.
	vision := d.client(roleVision)
	id := d.submit(vision, roleVision, "sh", "-c", "echo ok")
	if j, err := vision.Job(ctx, id); err != nil || j.State != ledger.StateSucceeded || j.Host() != roleHost1 {
		t.Errorf("submitter reads its job: %+v, %v", j, err)
	}
	if a, err := vision.Account(ctx, roleVision); err != nil || a.Balance != 990 {
		t.Errorf("submitter reads its account: %+v, %v", a, err)
	}
	vjs := d.js(roleVision)
	if out := readLogs(t, vjs, n, roleVision, id, roleHost1); out != "ok\n" {
		t.Errorf("submitter reads its job's output: %q", out)
	}
	// A cancel of its own job answers.
	if ev, err := vision.Cancel(ctx, roleVision, id); err != nil && !errors.As(err, new(*client.RejectedError)) {
		t.Errorf("submitter cancels its job: %+v, %v", ev, err)
	}
	// A hold of its own job answers (not_waiting: the job has ended).
	if ev, err := vision.Hold(ctx, roleVision, id); !errors.As(err, new(*client.RejectedError)) || ev.Reason != ledger.ReasonNotWaiting {
		t.Errorf("submitter holds its job: %+v, %v", ev, err)
	}

	// The admin sets and reads the price table.
	prices := ledger.SetPricing{ID: "prices-1", PerGPUHour: map[string]ledger.Credits{"NVIDIA H100 80GB HBM3": 360}, Default: 100, FailurePercent: 50}
	if ev, err := d.admin.SetPricing(ctx, prices); err != nil || ev.Type != ledger.EventPricingSet {
		t.Fatalf("admin sets the price table: %+v, %v", ev, err)
	}
	if p, err := d.admin.Pricing(ctx); err != nil || p == nil || p.Default != 100 {
		t.Errorf("admin reads the price table: %+v, %v", p, err)
	}
	if p, err := vision.Pricing(ctx); err != nil || p == nil || p.Default != 100 {
		t.Errorf("a submitter reads the price table: %+v, %v", p, err)
	}
	// The admin cancels any account's job, and reads what gpuq jobs, job,
	// why, hosts, logs and audit read: the whole ledger view, the hosts
	// bucket, any job's output and the journal.
	if _, err := d.admin.Cancel(ctx, roleVision, id); err != nil && !errors.As(err, new(*client.RejectedError)) {
		t.Errorf("admin cancels a job: %v", err)
	}
	if ev, err := d.admin.SetPriority(ctx, roleVision, id, 3); !errors.As(err, new(*client.RejectedError)) || ev.Reason != ledger.ReasonNotWaiting {
		t.Errorf("admin changes a job's priority: %+v, %v", ev, err)
	}
	ajs := d.js(roleAdmin)
	lkv, err := ajs.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatalf("admin binds the ledger: %v", err)
	}
	view, err := natsstore.New(ajs, lkv).Load(ctx)
	if err != nil || view.State.Jobs[id] == nil || view.State.Accounts[roleNLP] == nil {
		t.Fatalf("admin loads the ledger view (gpuq jobs, why, audit): %v", err)
	}
	hkv, err := ajs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatalf("admin binds the hosts bucket: %v", err)
	}
	w, err := hkv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatalf("admin watches the hosts bucket (gpuq hosts): %v", err)
	}
	if e := <-w.Updates(); e == nil || e.Key() != roleHost1 {
		t.Errorf("admin reads the heartbeats: %v", e)
	} else if h, err := wire.DecodeHeartbeat(e.Value()); err != nil || len(h.Devices) != 2 {
		t.Errorf("gpu-host-1's heartbeat as the admin reads it: %+v, %v", h, err)
	}
	_ = w.Stop() // a read-only watch
	if out := readLogs(t, ajs, n, roleVision, id, roleHost1); out != "ok\n" {
		t.Errorf("admin reads a job's output: %q", out)
	}
	if diffs := d.audit(); len(diffs) > 0 {
		t.Errorf("admin audits: %v", diffs)
	}

	// What each role must not do.
	for _, subj := range []string{n.Submit(roleNLP), n.Submit("other"), n.Modify(roleNLP), n.Admin(roleVision), n.Config(subjects.ConfigPricing), n.Report(roleHost1)} {
		if _, err := vjs.Publish(d.short(), subj, []byte(`{"v":1}`)); err == nil {
			t.Errorf("a submitter published to %s", subj)
		}
	}
	if _, err := vision.Account(d.short(), roleNLP); err == nil || errors.Is(err, client.ErrNotFound) {
		t.Errorf("a submitter read another account's record: %v", err)
	}
	if _, err := vision.Watch(d.short(), roleNLP, "x", 0, nil); err == nil || !strings.Contains(err.Error(), "read") {
		t.Errorf("a submitter read another account's events: %v", err)
	}
	if _, err := vjs.CreateStream(d.short(), jetstream.StreamConfig{Name: "MINE", Subjects: []string{"mine.>"}}); err == nil {
		t.Error("a submitter created a stream")
	}
	wjs := d.js(roleHost1)
	for _, subj := range []string{n.Report(roleHost2), n.Submit(roleVision), subjects.KVSubject(n.LedgerBucket(), subjects.AccountKey(roleVision)),
		subjects.KVSubject(n.HostsBucket(), roleHost2), n.Log(roleVision, id, roleHost2), n.Dispatch(roleHost1)} {
		if _, err := wjs.Publish(d.short(), subj, []byte(`{"v":1}`)); err == nil {
			t.Errorf("a worker published to %s", subj)
		}
	}
	// A worker reads job records (it confirms each order against one
	// before it starts: the jobs above ran only because it could), and no
	// account record.
	wlkv, err := wjs.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatalf("a worker binds the ledger bucket: %v", err)
	}
	if e, err := wlkv.Get(ctx, subjects.JobKey(id)); err != nil {
		t.Errorf("a worker reads a job record: %v", err)
	} else if j, err := ledger.UnmarshalJob(e.Value()); err != nil || j.ID != id {
		t.Errorf("the job record a worker read: %+v, %v", j, err)
	}
	if _, err := wlkv.Get(d.short(), subjects.AccountKey(roleVision)); err == nil {
		t.Error("a worker read an account record")
	}
	ajsPub := d.js(roleAdmin)
	for _, subj := range []string{n.Submit(roleVision), n.Report(roleHost1), subjects.KVSubject(n.LedgerBucket(), subjects.LeaderKey)} {
		if _, err := ajsPub.Publish(d.short(), subj, []byte(`{"v":1}`)); err == nil {
			t.Errorf("the admin published to %s", subj)
		}
	}
}
