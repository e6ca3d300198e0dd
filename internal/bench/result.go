package bench

import (
	"math"
	"slices"
	"time"
)

// Fields returns r as the flat key → value map that gpuq bench --output
// json prints. Keys are the peers' (../shared/peers), flattened the way
// their run-all.sh flattens nested objects ("idle.start_ms_p50"), plus the
// three rates at the top level (e2e_jobs_per_s, drain_jobs_per_s,
// submit_jobs_per_s). A skipped phase's keys are absent.
func (r *Result) Fields() map[string]any {
	f := map[string]any{
		"account": r.Account, "jobs": r.Jobs, "probes": r.Probes, "submitters": r.Submitters,
		"succeeded": r.Succeeded, "charged": r.Charged, "invariant_ok": r.InvariantOK, "cleaned_up": r.Cleanup == "",
	}
	if r.Cleanup != "" {
		f["cleanup_left"] = r.Cleanup
	}
	if r.JSSkipped != "" {
		f["js_skipped"] = r.JSSkipped
	}
	f["account_created"] = r.Created
	if i := r.Idle; i != nil {
		f["idle.probes"] = i.Probes
		f["idle.start_ms_p50"], f["idle.start_ms_p99"], f["idle.start_ms_max"] = i.StartP50, i.StartP99, i.StartMax
		f["idle.settle_ms_p50"], f["idle.settle_ms_p90"], f["idle.settle_ms_p99"] = i.SettleP50, i.SettleP90, i.SettleP99
		f["idle.start_missing"] = i.StartMissing
	}
	if e := r.E2E; e != nil {
		f["e2e_jobs_per_s"], f["submit_jobs_per_s"] = e.E2EPerS, e.SubmitPerS
		f["e2e.e2e_jobs_per_s"], f["e2e.submit_jobs_per_s"], f["e2e.wall_s"] = e.E2EPerS, e.SubmitPerS, e.WallS
		f["e2e.submit_call_ms_p50"], f["e2e.submit_call_ms_p99"] = e.SubmitCallP50, e.SubmitCallP99
		f["e2e.start_ms_p50"], f["e2e.start_ms_p99"] = e.StartP50, e.StartP99
		f["e2e.settle_ms_p50"], f["e2e.settle_ms_p99"], f["e2e.settle_ms_max"] = e.SettleP50, e.SettleP99, e.SettleMax
	}
	if b := r.Backlog; b != nil {
		f["drain_jobs_per_s"] = b.DrainPerS
		f["backlog.drain_jobs_per_s"], f["backlog.submit_jobs_per_s"], f["backlog.wall_s"] = b.DrainPerS, b.SubmitPerS, b.WallS
	}
	if j := r.JS; j != nil {
		f["js.publish_per_s"], f["js.kv_cas_per_s"], f["js.replicas"] = j.PublishPerS, j.KVCASPerS, j.Replicas
		if r.E2E != nil && j.KVCASPerS > 0 {
			f["e2e_per_kv_cas"] = round(r.E2E.E2EPerS/j.KVCASPerS, 4)
		}
		if r.Backlog != nil && j.KVCASPerS > 0 {
			f["drain_per_kv_cas"] = round(r.Backlog.DrainPerS/j.KVCASPerS, 4)
		}
	}
	return f
}

// pct is the p-th percentile of v (nearest rank), 0 for none.
func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

// rate is n per d, per second, to a tenth.
func rate(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return round(float64(n)/d.Seconds(), 1)
}

func round(v float64, places int) float64 {
	p := math.Pow(10, float64(places))
	return math.Round(v*p) / p
}
