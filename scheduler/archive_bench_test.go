package scheduler_test

// Heap held by the scheduler's state and core per finished job in the
// ledger, and what is left per job once archived. -bench.jobs sets the
// number of jobs (default 20,000; the figure is 1,000,000).

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
)

var benchJobs = flag.Int("bench.jobs", 20000, "jobs in the archive benchmarks")

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func BenchmarkHeapPerJob(b *testing.B) {
	n := *benchJobs
	for b.Loop() {
		l := ledgertest.NewLog(b)
		l.Create("a", ledger.MaxCredits)
		base := heapNow()
		core := scheduler.NewCore(scheduler.CoreConfig{JobRetention: time.Hour})
		for i := range n {
			id := fmt.Sprintf("job-%07d", i)
			l.State.Apply(ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 1, Command: []string{"python", "train.py"}}, l.Seq+1, l.Now)
			l.Seq++
			l.State.Apply(ledger.Dispatch{Job: id, Attempt: 1, Host: "h1"}, l.Seq+1, l.Now)
			l.Seq++
			l.State.Apply(ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: id, Attempt: 1, Devices: []string{"GPU-0"}}, l.Seq+1, l.Now)
			l.Seq++
			l.State.Apply(ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: id, Attempt: 1, Runtime: time.Minute}, l.Seq+1, l.Now)
			l.Seq++
		}
		core.Load(l.State)
		held := heapNow()
		l.Advance(2 * time.Hour)
		for {
			cmds := core.Decide(l.State, l.Now)
			if len(cmds) == 0 {
				break
			}
			for _, c := range cmds {
				l.Seq++
				res := l.State.Apply(c, l.Seq, l.Now)
				core.Observe(l.State, c, res)
			}
		}
		if len(l.State.Jobs) != 0 {
			b.Fatalf("%d jobs left after archiving", len(l.State.Jobs))
		}
		after := heapNow()
		b.ReportMetric(float64(held-base)/float64(n), "B/job-held")
		b.ReportMetric((float64(after)-float64(base))/float64(n), "B/job-archived")
		runtime.KeepAlive(core)
	}
}
