// Tests of the account-cap rule on its own: which caps block, in which
// order, counting decisions not yet applied, and what each block says.
package ledger_test

import (
	"testing"

	"github.com/gpuq/gpuq/ledger"
)

func TestCapBlocks(t *testing.T) {
	t.Parallel()
	acct := func(jobs, gpus, maxJobs, maxGPUs int) *ledger.Account {
		return &ledger.Account{ID: "a", RunningJobs: jobs, RunningGPUs: gpus,
			Limits: ledger.Limits{MaxRunningJobs: maxJobs, MaxRunningGPUs: maxGPUs}}
	}
	tests := []struct {
		name    string
		a       *ledger.Account
		decided ledger.Running
		gpus    int
		want    []string // reason: message
	}{
		{"no caps", acct(100, 800, 0, 0), ledger.Running{}, 8, nil},
		{"no account", nil, ledger.Running{}, 1, nil},
		{"below both", acct(1, 2, 2, 4), ledger.Running{}, 2, nil},
		{"at the job cap", acct(2, 2, 2, 0), ledger.Running{}, 1,
			[]string{"max_running_jobs: account a already runs 2 jobs, its cap"}},
		{"past the job cap (lowered)", acct(3, 3, 2, 0), ledger.Running{}, 1,
			[]string{"max_running_jobs: account a already runs 3 jobs, more than its cap of 2"}},
		{"past the GPU cap", acct(1, 3, 0, 4), ledger.Running{}, 2,
			[]string{"max_running_gpus: account a runs 3 GPUs; 2 more would pass its cap of 4"}},
		{"wider than the GPU cap", acct(0, 0, 0, 4), ledger.Running{}, 5,
			[]string{"max_running_gpus: the job needs 5 GPUs, more than account a's cap of 4: it cannot start until the cap is raised"}},
		{"decided counts", acct(1, 1, 2, 4), ledger.Running{Jobs: 1, GPUs: 2}, 2, []string{
			"max_running_jobs: account a already runs 2 jobs, its cap",
			"max_running_gpus: account a runs 3 GPUs; 2 more would pass its cap of 4"}},
	}
	for _, tt := range tests {
		var got []string
		for _, b := range ledger.CapBlocks(tt.a, tt.decided, tt.gpus) {
			got = append(got, string(b.Reason)+": "+b.Message())
		}
		if len(got) != len(tt.want) {
			t.Errorf("%s: CapBlocks = %q, want %q", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: CapBlocks[%d] = %q, want %q", tt.name, i, got[i], tt.want[i])
			}
		}
	}
}
