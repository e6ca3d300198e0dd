package natsstore_test

// A takeover of a ledger of pending jobs (the figure is 1,000,000):
// how long a new leader takes from the start of its Load to a core ready to
// dispatch, and the heap the leader then holds per pending job (the store's
// revisions, the state, the core's indexes) beyond the job's command.
// -bench.pending sets the jobs (default 20,000). The nats-server runs in a
// child process (natstest.StartChild), as a deployment's runs beside the
// scheduler, so that neither its heap nor its CPU counts as the leader's.
// cpu-ns/job is the leader's CPU time per job, steadier than the wall time
// on a shared machine; server-cpu-ns/job is the child nats-server's (in
// 10ms ticks).
// GPUQ_HEAP_PROFILE=file writes a heap profile while the leader's view is
// held, for what the bytes are; GPUQ_LOAD_CPU_PROFILE=file a CPU profile of
// the load alone.
//
//	go test ./internal/natsstore -run XXX -bench TakeoverPending -benchtime 2x -bench.pending=100000

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

func TestMain(m *testing.M) {
	if natstest.ServeChild() {
		return
	}
	os.Exit(m.Run())
}

// setupChild is setup with the server in a child process
// (natstest.StartChild), stopped when the benchmark ends.
func setupChild(b *testing.B, cfg natsbus.SetupConfig) (jetstream.JetStream, jetstream.KeyValue, *os.Process) {
	b.Helper()
	srv := natstest.StartChild(b)
	_, js := srv.JetStream(b)
	ctx := context.Background()
	if err := natsbus.Setup(ctx, js, subjects.Default, cfg); err != nil {
		b.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, subjects.Default.LedgerBucket())
	if err != nil {
		b.Fatal(err)
	}
	return js, kv, srv.Process()
}

var benchPending = flag.Int("bench.pending", 20000, "pending jobs in the scale benchmarks")

// pendingCommand is every benchmark job's command; commandBytes what it
// holds on the heap (the slice's two string headers and the two strings'
// bytes, in their size classes), which the per-job figure leaves out.
var pendingCommand = []string{"python", "train.py"}

const commandBytes = 2*16 + 8 + 8

// writePending stores n pending jobs of account a, as the fold leaves them,
// and a checkpoint after them.
func writePending(b *testing.B, ctx context.Context, s *natsstore.Store, n int) {
	b.Helper()
	st := ledger.New()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	var seq uint64 = 1
	st.Apply(ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: ledger.MaxCredits}, seq, at)
	recs := make([]scheduler.Record, 0, 1000)
	flush := func() {
		if err := s.Write(ctx, recs); err != nil {
			b.Fatal(err)
		}
		recs = recs[:0]
	}
	for i := range n {
		seq++
		id := fmt.Sprintf("pend-%07d", i)
		res := st.Apply(ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 1, Priority: i % 10, Command: pendingCommand,
			Walltime: time.Hour, MaxAttempts: 3}, seq, at)
		if len(res.Changed) == 0 {
			b.Fatalf("submit %s: nothing changed", id)
		}
		data, err := ledger.MarshalJob(st.Jobs[id])
		if err != nil {
			b.Fatal(err)
		}
		recs = append(recs, scheduler.Record{Key: subjects.JobKey(id), Seq: seq, Value: data})
		if len(recs) == cap(recs) {
			flush()
		}
	}
	data, err := ledger.MarshalAccount(st.Accounts["a"])
	if err != nil {
		b.Fatal(err)
	}
	recs = append(recs, scheduler.Record{Key: subjects.AccountKey("a"), Seq: seq, Value: data})
	flush()
	if err := s.Checkpoint(ctx, seq); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkTakeoverPending(b *testing.B) {
	n := *benchPending
	b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
		js, kv, server := setupChild(b, natsbus.SetupConfig{})
		ctx := context.Background()
		s := natsstore.New(js, kv)
		if _, err := s.Load(ctx); err != nil {
			b.Fatal(err)
		}
		writePending(b, ctx, s, n)
		var held float64
		var cpu, serverCPU time.Duration
		b.ResetTimer()
		for b.Loop() {
			b.StopTimer()
			base := heapNow()
			cpu0, server0 := cpuTime(), childCPUTime(b, server)
			stop := startCPUProfile(b)
			b.StartTimer()
			s := natsstore.New(js, kv)
			view, err := s.Load(ctx)
			if err != nil {
				b.Fatal(err)
			}
			core := scheduler.NewCore(scheduler.CoreConfig{})
			core.Load(view.State)
			b.StopTimer()
			stop()
			cpu += cpuTime() - cpu0
			serverCPU += childCPUTime(b, server) - server0
			if len(view.State.Jobs) != n {
				b.Fatalf("loaded %d jobs, want %d", len(view.State.Jobs), n)
			}
			held = (float64(heapNow()) - float64(base)) / float64(n)
			if f := os.Getenv("GPUQ_HEAP_PROFILE"); f != "" {
				out, err := os.Create(f)
				if err != nil {
					b.Fatal(err)
				}
				if err := pprof.WriteHeapProfile(out); err != nil {
					b.Fatal(err)
				}
				out.Close()
			}
			runtime.KeepAlive(s)
			runtime.KeepAlive(view)
			runtime.KeepAlive(core)
			b.StartTimer()
		}
		b.ReportMetric(held-commandBytes, "B/job-beyond-command")
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(n), "cpu-ns/job")
		b.ReportMetric(float64(serverCPU.Nanoseconds())/float64(b.N)/float64(n), "server-cpu-ns/job")
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/job")
	})
}

// cpuTime is the CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childCPUTime is the CPU time process p (the child nats-server) has used,
// from /proc, in clock ticks of 10ms.
func childCPUTime(b *testing.B, p *os.Process) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's closing parenthesis: utime and stime
	// are the 12th and 13th of them.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		b.Fatalf("/proc/%d/stat: %q", p.Pid, data)
	}
	var ticks int64
	for _, s := range f[11:13] {
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			b.Fatalf("/proc/%d/stat: %v", p.Pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// startCPUProfile starts a CPU profile of the load alone, into the file
// GPUQ_LOAD_CPU_PROFILE names (with -test.cpuprofile the profile also
// holds the ledger's writing); the returned func stops it.
func startCPUProfile(b *testing.B) (stop func()) {
	b.Helper()
	f := os.Getenv("GPUQ_LOAD_CPU_PROFILE")
	if f == "" {
		return func() {}
	}
	out, err := os.Create(f)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := out.Close(); err != nil {
			b.Error(err)
		}
	}
}

func heapNow() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
