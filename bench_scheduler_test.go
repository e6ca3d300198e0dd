package gpuq_test

// The scheduler's throughput and latency against the JetStream limit of the
// same server, measured in the same run: one embedded server on file
// storage, one scheduler with production timings, and workers that cost
// nothing (jslimit.Worker: orders through the real worker bus, started and
// done reports over the wire, nothing run), and no reader of the events
// besides. What is left is the scheduler and the server under it. Every
// stored message is counted, per stream, so the writes per lifecycle are a
// figure of each run.
//
//	go test -run '^$' -bench 'Lifecycles|DispatchLatency' -benchtime 20000x .
//
// -bench.child runs the server in a child process instead (these and
// BenchmarkSubmitAccepted), as a deployment's runs: then its collections
// and its threads are its own, and every hop between it and the scheduler
// crosses processes.

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/jslimit"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Rig sizes: enough free GPUs that capacity never limits the rate.
const (
	rigHosts = 8
	rigGPUs  = 64
)

var benchChild = flag.Bool("bench.child", false,
	"run the benchmarks' nats-server in a child process, as a deployment's runs beside the scheduler (default: in the benchmark's process)")

// benchServer is the server a benchmark's cluster runs on: embedded, or in
// a child process with -bench.child.
func benchServer(b *testing.B) *natstest.Server {
	if *benchChild {
		return natstest.StartChild(b)
	}
	return natstest.Start(b)
}

// lifecycleRig is a scheduler with free workers on one embedded server.
type lifecycleRig struct {
	c       *cluster
	workers []*jslimit.Worker
	wait    func(t testing.TB, seq uint64)
	// received, if set, is called as a worker takes an order.
	mu       sync.Mutex
	received map[string]time.Time
	// checkpoints counts the scheduler's flushes.
	checkpoints atomic.Int64
}

func newLifecycleRig(b *testing.B, track bool) *lifecycleRig {
	b.Helper()
	c := newClusterOn(b, benchServer(b), natsbus.SetupConfig{})
	hook, wait := waitCheckpoint()
	r := &lifecycleRig{c: c, wait: wait}
	counted := func(seq uint64) { r.checkpoints.Add(1); hook(seq) }
	c.startScheduler("bench", schedOpts{hooks: scheduler.Hooks{Checkpointed: counted}, tune: func(cfg *scheduler.Config) {
		// Production timings: the harness's are shortened for tests.
		cfg.DecideInterval, cfg.FactInterval = 0, 0
	}})
	c.createAccountAlone("a", ledger.MaxCredits)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	beat := func() {
		for h := range rigHosts {
			c.registerHost(fmt.Sprintf("h%d", h), rigGPUs)
		}
	}
	beat()
	wg.Add(1)
	go func() { // the heartbeats state no TTL, so they count a minute
		defer wg.Done()
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				beat()
			}
		}
	}()
	if track {
		r.received = map[string]time.Time{}
	}
	for h := range rigHosts {
		w, err := jslimit.NewWorker(c.js, c.n, fmt.Sprintf("h%d", h))
		if err != nil {
			b.Fatal(err)
		}
		if track {
			w.Received = func(o ledger.DispatchOrder) {
				now := time.Now()
				r.mu.Lock()
				if _, ok := r.received[o.Job]; !ok {
					r.received[o.Job] = now
				}
				r.mu.Unlock()
			}
		}
		r.workers = append(r.workers, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil {
				b.Errorf("worker: %v", err)
			}
		}()
	}
	return r
}

// done is how many attempts the workers reported done.
func (r *lifecycleRig) done() int64 {
	var n int64
	for _, w := range r.workers {
		n += w.Done.Load()
	}
	return n
}

// submits encodes n submissions of account a with ids prefix-0…, one GPU
// each, running `true`.
func submits(b *testing.B, n subjects.Names, prefix string, count int) []*nats.Msg {
	b.Helper()
	msgs := make([]*nats.Msg, count)
	for i := range msgs {
		m, err := wire.EncodeSubmit(n, ledger.Submit{Account: "a", ID: fmt.Sprintf("%s-%d", prefix, i), GPUs: 1, Cost: 1,
			Command: []string{"true"}, Walltime: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = nats.NewMsg(m.Subject)
		msgs[i].Data = m.Data
		msgs[i].Header.Set(subjects.MsgIDHeader, m.MsgID)
	}
	return msgs
}

// streamSeqs is each stream's last sequence: how many messages it has
// stored in its life, buckets' included.
func streamSeqs(b *testing.B, js jetstream.JetStream) map[string]uint64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[string]uint64{}
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out[info.Config.Name] = info.State.LastSeq
	}
	if err := l.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// writesPer reports the messages stored per job between before and after,
// in total and per stream, as metrics and in the log.
func writesPer(b *testing.B, before, after map[string]uint64, jobs int) float64 {
	b.Helper()
	var total uint64
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(after)) {
		d := after[name] - before[name]
		if d == 0 || strings.HasPrefix(name, "JSLIMIT_") || strings.HasPrefix(name, "KV_jslimit_") {
			continue
		}
		total += d
		parts = append(parts, fmt.Sprintf("%s %.2f", name, float64(d)/float64(jobs)))
	}
	per := float64(total) / float64(jobs)
	b.Logf("stored writes per job: %.2f (%s)", per, strings.Join(parts, ", "))
	return per
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// publishAll publishes msgs asynchronously, at most window unacknowledged
// (a sliding window: each publish past it first waits for the oldest
// acknowledgement), and returns the last stored sequence.
func publishAll(b *testing.B, js jetstream.JetStream, msgs []*nats.Msg) uint64 {
	b.Helper()
	const window = 1024
	var last uint64
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	next := 0
	await := func() {
		select {
		case ack := <-futs[next].Ok():
			last = max(last, ack.Sequence)
		case err := <-futs[next].Err():
			b.Fatal(err)
		}
		next++
	}
	for _, m := range msgs {
		for len(futs)-next >= window {
			await()
		}
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
	}
	for next < len(futs) {
		await()
	}
	return last
}

// lastCmdSeq is the command stream's last sequence.
func lastCmdSeq(b *testing.B, c *cluster) uint64 {
	b.Helper()
	s, err := c.js.Stream(c.ctx(), c.n.CmdStream())
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(c.ctx())
	if err != nil {
		b.Fatal(err)
	}
	return info.State.LastSeq
}

// BenchmarkLifecycles measures whole job lifecycles per second (submit,
// reserve, dispatch, started, done, settle) through one scheduler with
// workers that cost nothing, beside the JetStream limit of the same server
// measured in the same run: b.N submissions are published pipelined, and
// the clock stops when every job was reported done and the scheduler has
// checkpointed past the last report (its settlement written, its events
// and journal entries sent). The account is checked at the end: nothing
// reserved, nothing running.
//
// Metrics: jobs/s; flushes/job (the scheduler's checkpoints per job: each
// flush writes the account record and the checkpoint once); writes/job (every stored message of every stream,
// submissions and reports included, per job); cpu-µs/job (the whole
// process: server, scheduler, workers and client); limit-pub/s and
// limit-cas/s (jslimit.Measure on the same server, the mean of a
// measurement before the run and one after); and %limit-pub, the stored
// writes per second as a share of limit-pub/s: the lifecycles per second
// as a share of those the server could store at this many writes each.
func BenchmarkLifecycles(b *testing.B) {
	r := newLifecycleRig(b, false)
	lim, err := jslimit.Measure(context.Background(), r.c.js)
	if err != nil {
		b.Fatal(err)
	}
	msgs := submits(b, r.c.n, fmt.Sprintf("life%d", b.N), b.N)
	before := streamSeqs(b, r.c.js)
	cpu0 := cpuTime(b)
	flushes0 := r.checkpoints.Load()
	b.ResetTimer()
	publishAll(b, r.c.js, msgs)
	deadline := time.Now().Add(2*time.Minute + time.Duration(b.N)*time.Millisecond)
	for r.done() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs done", r.done(), b.N)
		}
		time.Sleep(200 * time.Microsecond)
	}
	r.wait(b, lastCmdSeq(b, r.c))
	b.StopTimer()
	cpu := cpuTime(b) - cpu0
	// The limit again, after: the machine's load drifts, and the mean of
	// the two brackets the run.
	lim2, err := jslimit.Measure(context.Background(), r.c.js)
	if err != nil {
		b.Fatal(err)
	}
	lim.PublishPerSec, lim.CASPerSec = (lim.PublishPerSec+lim2.PublishPerSec)/2, (lim.CASPerSec+lim2.CASPerSec)/2
	per := writesPer(b, before, streamSeqs(b, r.c.js), b.N)
	rate := float64(b.N) / b.Elapsed().Seconds()
	acct, err := r.c.c.Account(r.c.ctx(), "a")
	if err != nil {
		b.Fatal(err)
	}
	if acct.Reserved != 0 {
		b.Errorf("account a holds %d reserved after every job ended, want 0", acct.Reserved)
	}
	b.ReportMetric(rate, "jobs/s")
	b.ReportMetric(float64(r.checkpoints.Load()-flushes0)/float64(b.N), "flushes/job")
	b.ReportMetric(per, "writes/job")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/job")
	b.ReportMetric(lim.PublishPerSec, "limit-pub/s")
	b.ReportMetric(lim.CASPerSec, "limit-cas/s")
	b.ReportMetric(100*rate*per/lim.PublishPerSec, "%limit-pub")
}

// BenchmarkDispatchLatency offers submissions at a steady 1,000 a second
// and measures each one's time from its publish to its dispatch order
// reaching the worker (submit → reserve → decide → dispatch folded →
// order sent), through one scheduler with workers that cost nothing.
// Metrics: p50-ms and p99-ms of that time, and the rate actually offered.
func BenchmarkDispatchLatency(b *testing.B) {
	const rate = 1000
	r := newLifecycleRig(b, true)
	msgs := submits(b, r.c.n, fmt.Sprintf("lat%d", b.N), b.N)
	sent := make([]time.Time, b.N)
	b.ResetTimer()
	start := time.Now()
	futs := make(chan jetstream.PubAckFuture, 4096)
	acked := make(chan error, 1)
	go func() {
		var err error
		for f := range futs {
			select {
			case <-f.Ok():
			case e := <-f.Err():
				if err == nil {
					err = e
				}
			}
		}
		acked <- err
	}()
	for i, m := range msgs {
		if d := time.Until(start.Add(time.Duration(i) * time.Second / rate)); d > 0 {
			time.Sleep(d)
		}
		sent[i] = time.Now()
		f, err := r.c.js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futs <- f
	}
	close(futs)
	if err := <-acked; err != nil {
		b.Fatal(err)
	}
	offered := float64(b.N) / time.Since(start).Seconds()
	deadline := time.Now().Add(time.Minute)
	for r.done() < int64(b.N) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs done", r.done(), b.N)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	lat := make([]time.Duration, 0, b.N)
	r.mu.Lock()
	for i := range msgs {
		at, ok := r.received[fmt.Sprintf("lat%d-%d", b.N, i)]
		if !ok {
			b.Fatalf("job %d was never dispatched", i)
		}
		lat = append(lat, at.Sub(sent[i]))
	}
	r.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(offered, "offered/s")
}
