package ledger_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// BenchmarkDependencyEnd measures the fold of a submission and its cancel in an account
// that has jobs waiting on a dependency among n jobs: the scan for
// dependants is O(jobs) and runs only in such an account.
func BenchmarkDependencyEnd(b *testing.B) {
	for _, tc := range []struct {
		n       int
		waiting bool
	}{{1_000, false}, {1_000, true}, {10_000, false}, {10_000, true}} {
		n := tc.n
		b.Run(fmt.Sprintf("jobs=%d/waiting=%v", n, tc.waiting), func(b *testing.B) {
			s := ledger.New()
			at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			seq := uint64(0)
			apply := func(c ledger.Command) ledger.Result {
				seq++
				return s.Apply(c, seq, at)
			}
			apply(ledger.Admin{Account: "a", ID: "c", Op: ledger.OpCreate, Balance: ledger.MaxCredits})
			for i := range n {
				apply(ledger.Submit{Account: "a", ID: fmt.Sprintf("j%d", i), GPUs: 1, Cost: 1, Command: []string{"x"}})
			}
			// One job waits on a job that never ends, so the account scans.
			if tc.waiting {
				apply(ledger.Submit{Account: "a", ID: "waiter", GPUs: 1, Cost: 1, Command: []string{"x"}, After: []string{"j0"}})
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("k%d", i)
				apply(ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 1, Command: []string{"x"}})
				apply(ledger.Cancel{Account: "a", Job: id}) // an end: the scan runs
			}
		})
	}
}
