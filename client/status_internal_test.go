package client

// nearCap on hand-made accounts: each cap is near at NearCapPercent and
// past it, not below it, and a cap of zero is no cap.

import (
	"slices"
	"testing"

	"github.com/gpuq/gpuq/ledger"
)

func TestNearCap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		a    ledger.Account
		want []string
	}{
		{"idle", ledger.Account{ID: "a", Balance: 100}, nil},
		{"no caps", ledger.Account{ID: "a", Balance: 100, RunningJobs: 50, RunningGPUs: 400}, nil},
		{"jobs below", ledger.Account{ID: "a", Balance: 100, RunningJobs: 3, Limits: ledger.Limits{MaxRunningJobs: 4}}, nil},
		{"jobs at 80%", ledger.Account{ID: "a", Balance: 100, RunningJobs: 4, Limits: ledger.Limits{MaxRunningJobs: 5}}, []string{"running_jobs 4/5"}},
		{"gpus full", ledger.Account{ID: "a", Balance: 100, RunningGPUs: 8, Limits: ledger.Limits{MaxRunningGPUs: 8}}, []string{"running_gpus 8/8"}},
		{"reserved below", ledger.Account{ID: "a", Balance: 100, Reserved: 79}, nil},
		{"reserved at 80%", ledger.Account{ID: "a", Balance: 100, Reserved: 80}, []string{"reserved 80 of balance 100"}},
		{"empty", ledger.Account{ID: "a"}, []string{"reserved 0 of balance 0"}},
		{"held", ledger.Account{ID: "a", Balance: 100, HeldJobs: []string{"j"}}, []string{"held 1 until it can pay"}},
		{"all", ledger.Account{ID: "a", Balance: 10, Reserved: 10, RunningJobs: 1, RunningGPUs: 2, HeldJobs: []string{"j", "k"},
			Limits: ledger.Limits{MaxRunningJobs: 1, MaxRunningGPUs: 2}},
			[]string{"running_jobs 1/1", "running_gpus 2/2", "reserved 10 of balance 10", "held 2 until it can pay"}},
	}
	for _, c := range cases {
		got, ok := nearCap(&c.a)
		if ok != (len(c.want) > 0) || !slices.Equal(got.Why, c.want) && len(c.want) > 0 {
			t.Errorf("%s: nearCap = %v, %v; want %v", c.name, got.Why, ok, c.want)
		}
		if got.Available != c.a.Available() || got.Held != len(c.a.HeldJobs) {
			t.Errorf("%s: nearCap = %+v", c.name, got)
		}
	}
}
