package bench

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/subjects"
)

func TestPct(t *testing.T) {
	v := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := pct(v, c.p); got != c.want {
			t.Errorf("pct(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if pct(nil, 50) != 0 {
		t.Error("pct of nothing is not 0")
	}
	if v[0] != 5 {
		t.Error("pct sorted its argument")
	}
	if got := rate(500, 2*time.Second); got != 250 {
		t.Errorf("rate = %v", got)
	}
	if got := ms(1500 * time.Microsecond); got != 1.5 {
		t.Errorf("ms = %v", got)
	}
}

// TestJetStreamLimit measures a real server, and leaves no scratch stream
// or bucket behind.
func TestJetStreamLimit(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc := srv.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lim, err := JetStreamLimit(ctx, js, subjects.Default, "gbtest", 2000)
	if err != nil {
		t.Fatal(err)
	}
	if lim.PublishPerS <= 0 || lim.KVCASPerS <= 0 || lim.Replicas != 1 {
		t.Errorf("limit %+v", lim)
	}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		t.Errorf("stream %s left behind", name)
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestFields: the keys the issue and the peers name, from a result.
func TestFields(t *testing.T) {
	r := &Result{Account: AccountPrefix + "x", Jobs: 10, Probes: 2, Submitters: 8,
		Idle:    &Idle{Probes: 2, StartP50: 1, StartP99: 2, SettleP50: 3, SettleP99: 4},
		E2E:     &E2E{SubmitPerS: 100, E2EPerS: 50, SettleP50: 5, SettleP99: 6},
		Backlog: &Backlog{DrainPerS: 40},
		JS:      &JS{PublishPerS: 1000, KVCASPerS: 500, Replicas: 1}, Created: true, InvariantOK: true}
	f := r.Fields()
	want := map[string]float64{
		"idle.start_ms_p50": 1, "idle.start_ms_p99": 2, "idle.settle_ms_p50": 3, "idle.settle_ms_p99": 4,
		"e2e_jobs_per_s": 50, "submit_jobs_per_s": 100, "drain_jobs_per_s": 40,
		"e2e.e2e_jobs_per_s": 50, "e2e.submit_jobs_per_s": 100, "backlog.drain_jobs_per_s": 40,
		"js.publish_per_s": 1000, "js.kv_cas_per_s": 500, "e2e_per_kv_cas": 0.1,
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %v, want %v", k, f[k], v)
		}
	}
	for k := range f {
		if strings.ContainsAny(k, " -") {
			t.Errorf("key %q", k)
		}
	}
	if f["cleaned_up"] != true || f["invariant_ok"] != true {
		t.Errorf("cleaned_up %v, invariant_ok %v", f["cleaned_up"], f["invariant_ok"])
	}
	r.JS, r.JSSkipped = nil, "no right to make a stream"
	f = r.Fields()
	if _, ok := f["js.kv_cas_per_s"]; ok || f["js_skipped"] != r.JSSkipped {
		t.Errorf("skipped JetStream phase: %v", f)
	}
}
