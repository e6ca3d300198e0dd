package scheduler

import (
	"flag"
	"fmt"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

var benchLoadJobs = flag.Int("bench.load", 200000, "pending jobs in BenchmarkCoreLoad")

// BenchmarkCoreLoad measures Core.Load of a ledger of -bench.load pending
// jobs (default 200,000; a takeover of the 1,000,000 runs it after
// the store's load), of 10 accounts, as a takeover holds them.
func BenchmarkCoreLoad(b *testing.B) {
	n := *benchLoadJobs
	s := ledger.New()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	seq := uint64(0)
	for i := range 10 {
		seq++
		s.Apply(ledger.Admin{Account: fmt.Sprintf("a%d", i), ID: "c", Op: ledger.OpCreate, Balance: ledger.MaxCredits}, seq, at)
	}
	for i := range n {
		seq++
		s.Apply(ledger.Submit{Account: fmt.Sprintf("a%d", i%10), ID: fmt.Sprintf("pend-%07d", i), GPUs: 1, Cost: 1, Priority: i % 10,
			Command: []string{"x"}}, seq, at)
	}
	b.ResetTimer()
	for b.Loop() {
		core := NewCore(CoreConfig{})
		core.Load(s)
		if got := core.queue.Len(); got != n {
			b.Fatalf("queued %d, want %d", got, n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/job")
}
