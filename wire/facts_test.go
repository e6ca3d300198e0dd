package wire_test

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/wire"
)

// TestDecodeFactsStrictly: a fact is checked, not trusted: one that names
// another job than its key, a state that does not wait, an empty blocker, a
// missing term, or a duration that does not parse is refused, saying why.
func TestDecodeFactsStrictly(t *testing.T) {
	t.Parallel()
	const good = `{"v":1,"job":"j","account":"a","state":"pending","blockers":[{"kind":"queue","message":"m"}],"term":"T","pass":3,"seq":9,"at":"2026-12-01T09:00:00Z"}`
	if f, err := wire.DecodeWaitFact("a", "j", []byte(good)); err != nil || f.Pass != 3 || len(f.Blockers) != 1 {
		t.Fatalf("DecodeWaitFact(good) = %+v, %v", f, err)
	}
	for _, tc := range []struct{ name, account, job, data, says string }{
		{"another job", "a", "k", good, "not the key's"},
		{"another account", "b", "j", good, "not the key's"},
		{"not waiting", "a", "j", strings.Replace(good, `"pending"`, `"running"`, 1), "not pending or held"},
		{"empty blocker", "a", "j", strings.Replace(good, `"kind":"queue"`, `"kind":""`, 1), "no kind or message"},
		{"no term", "a", "j", strings.Replace(good, `"term":"T"`, `"term":""`, 1), "missing term"},
		{"bad reservation", "a", "j", strings.Replace(good, `"term"`, `"reservation":{"host":"a.b","at":"2026-12-01T09:00:00Z"},"term"`, 1), "reservation"},
		{"version", "a", "j", strings.Replace(good, `"v":1`, `"v":2`, 1), "version"},
		{"not json", "a", "j", `{"v":1,`, "JSON"},
	} {
		if _, err := wire.DecodeWaitFact(tc.account, tc.job, []byte(tc.data)); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: DecodeWaitFact = %v, want an error saying %q", tc.name, err, tc.says)
		}
	}
	if _, err := wire.DecodePassFact([]byte(`{"v":1,"term":"T","pass":1,"seq":1,"at":"2026-12-01T09:00:00Z","queued":0,"window":0}`)); err == nil {
		t.Error("DecodePassFact took a pass fact without a window")
	}
	cf := wire.SchedulerFact{Term: "T", HalfLife: "1h", Retry: wire.RetryFact{Initial: "1s", Max: "1m"}, HostBackoff: wire.RetryFact{Initial: "1s", Max: "1m"},
		UnplaceableAfter: "1m", LostAfter: "30s", StartTimeout: "5m", DecisionTimeout: "30s", JobRetention: "168h", MaxExamine: 1, MaxArchives: 1,
		Facts: wire.FactsLimits{Window: 1, PerSecond: 1}}
	cf.Since = cf.Since.AddDate(2026, 0, 0)
	data, err := wire.EncodeFact(cf)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := wire.DecodeSchedulerFact(data); err != nil || got.HalfLife != "1h" {
		t.Errorf("DecodeSchedulerFact(EncodeFact(cf)) = %+v, %v", got, err)
	}
	cf.LostAfter = "soon"
	data, _ = wire.EncodeFact(cf)
	if _, err := wire.DecodeSchedulerFact(data); err == nil || !strings.Contains(err.Error(), `lost_after "soon" is not a duration`) {
		t.Errorf("DecodeSchedulerFact with a bad duration: %v", err)
	}
}
