package gpuq_test

// Tests of the facts bucket under deploy/nats-server.conf: a tenant reads
// the scheduler's config and pass facts and its own account's wait facts
// (gpuq why for its jobs), and not another tenant's; the admin reads all.

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

func TestDeployFactsPermissions(t *testing.T) {
	d := newDeployment(t)
	ctx, n := d.ctx, d.n
	vision, nlp := d.client(roleVision), d.client(roleNLP)
	// Each tenant submits a job wider than gpu-host-1's two GPUs: it waits
	// (for a minute, then fails as unplaceable) with a wait fact.
	for _, sub := range []struct {
		c    *client.Client
		acct string
	}{{vision, roleVision}, {nlp, roleNLP}} {
		if _, err := sub.c.Submit(ctx, ledger.Submit{Account: sub.acct, ID: sub.acct + "-wide", GPUs: 4, Cost: 10, Command: []string{"true"}}); err != nil {
			t.Fatalf("%s submits: %v", sub.acct, err)
		}
	}
	explained := func(c *client.Client, acct, job string) client.Explanation {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ex, err := c.Explain(ctx, acct, job)
			if err != nil {
				t.Fatalf("Explain(%s, %s): %v", acct, job, err)
			}
			if ex.Status == client.Explained {
				return ex
			}
			if time.Now().After(deadline) {
				t.Fatalf("Explain(%s, %s) = %+v after 10s, want it explained", acct, job, ex)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A tenant explains its own job, and reads the scheduler's config.
	if ex := explained(vision, roleVision, "vision-wide"); len(ex.Blockers) == 0 || ex.Blockers[0].Kind != "too_wide" {
		t.Errorf("vision explains its job: %+v", ex)
	}
	if ex := explained(nlp, roleNLP, "nlp-wide"); len(ex.Blockers) == 0 || ex.Blockers[0].Kind != "too_wide" {
		t.Errorf("nlp explains its job: %+v", ex)
	}
	if cf, err := vision.SchedulerConfig(ctx); err != nil || cf.Leader != "" || cf.Retry.Initial != "10s" || cf.NoBackfill {
		t.Errorf("vision reads the scheduler's config: %+v, %v", cf, err)
	}
	// The admin explains any account's job.
	explained(d.admin, roleVision, "vision-wide")
	explained(d.admin, roleNLP, "nlp-wide")
	ajs := d.js(roleAdmin)
	akv, err := ajs.KeyValue(ctx, n.FactsBucket())
	if err != nil {
		t.Fatalf("admin binds the facts bucket: %v", err)
	}
	e, err := akv.Get(ctx, subjects.FactWaitKey(roleNLP, "nlp-wide"))
	if err != nil {
		t.Fatalf("admin reads nlp's wait fact: %v", err)
	}
	if _, err := wire.DecodeWaitFact(roleNLP, "nlp-wide", e.Value()); err != nil {
		t.Errorf("nlp's wait fact as the admin reads it: %v", err)
	}
	// A tenant cannot read another's wait fact, which the admin just read.
	vkv, err := d.js(roleVision).KeyValue(ctx, n.FactsBucket())
	if err != nil {
		t.Fatalf("vision binds the facts bucket: %v", err)
	}
	if _, err := vkv.Get(ctx, subjects.FactWaitKey(roleVision, "vision-wide")); err != nil {
		t.Errorf("vision reads its own wait fact: %v", err)
	}
	if e, err := vkv.Get(d.short(), subjects.FactWaitKey(roleNLP, "nlp-wide")); err == nil {
		t.Errorf("vision read nlp's wait fact: %s", e.Value())
	}
	if _, err := vision.Explain(d.short(), roleNLP, "nlp-wide"); err == nil {
		t.Error("vision explained nlp's job")
	}
	// Nor write the bucket.
	if _, err := vkv.Put(d.short(), subjects.FactWaitKey(roleVision, "vision-wide"), []byte(`{"v":1}`)); err == nil {
		t.Error("vision wrote its own wait fact")
	}
}
