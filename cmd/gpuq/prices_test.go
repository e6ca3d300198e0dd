package main

import (
	"strings"
	"testing"
)

// TestPricesFixedCostFloor sets a price table that floors fixed costs and
// replays the probe of issue 10 (cost 0 for 8 GPUs × 720 h): it is refused
// with its floor, and a table that takes metered jobs only refuses any cost.
func TestPricesFixedCostFloor(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("account", "create", "nlp", "--balance", "100000000")
	d.ok("prices", "set", "--model", "NVIDIA H200 141GB HBM3e=720", "--default", "900", "--fixed-cost", "floor")
	if out := d.ok("prices", "show"); !strings.Contains(out, "fixed costs: at least gpus × walltime × 900 per GPU-hour") {
		t.Errorf("prices show printed:\n%s", out)
	}
	r := d.gpuq("submit", "--id", "free", "--account", "nlp", "--gpus", "8", "--walltime", "720h", "--cost", "0", "--", "true")
	if r.code != exitRejected || !strings.Contains(r.stderr+r.stdout, "below_price_floor") || !strings.Contains(r.stderr+r.stdout, "5184000") {
		t.Errorf("submit of cost 0: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	d.ok("submit", "--id", "fair", "--account", "nlp", "--gpus", "1", "--walltime", "1h", "--cost", "900", "--", "true")
	d.ok("prices", "set", "--default", "900", "--fixed-cost", "metered_only")
	if out := d.ok("prices", "show"); !strings.Contains(out, "fixed costs: refused") {
		t.Errorf("prices show printed:\n%s", out)
	}
	r = d.gpuq("submit", "--id", "named", "--account", "nlp", "--cost", "5000", "--", "true")
	if r.code != exitRejected || !strings.Contains(r.stderr+r.stdout, "metered_only") {
		t.Errorf("submit with a cost under metered_only: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if r := d.gpuq("prices", "set", "--fixed-cost", "cheap"); r.code == 0 {
		t.Errorf("prices set --fixed-cost cheap succeeded")
	}
}
