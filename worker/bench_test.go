package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// BenchmarkWorkerPerJob runs a real worker (8 go-nvml mock H100s, the real
// natsbus worker bus) on jobs that run `true`, and measures jobs/s end to
// end and the CPU each job costs the worker process.
//
// So that the worker's CPU can be told apart, the embedded nats-server
// (internal/natstest) and the driver that plays the scheduler run in a
// child process: this test binary again, running TestWorkerBenchDriver.
// The driver keeps one job per GPU in flight: for each job it writes the
// job's record to the ledger bucket (dispatched to the host, as the
// scheduler does before it orders) and publishes its dispatch order, and it
// orders the next job on each done report. The benchmark process holds the
// worker alone, so getrusage(RUSAGE_SELF) is the worker's own CPU
// ("worker-cpu-us/job"), RUSAGE_CHILDREN the jobs' processes, reaped as
// they end ("child-cpu-us/job"), and the driver reports the CPU of the
// server and itself ("server+driver-cpu-us/job"). "worker/child" is the
// first over the second: the worker's cost in units of the `true` it
// runs, which holds still while this machine's speed wanders within one
// boot of the VM, but not from one boot to the next (exec's cost moves
// more than the rest: 1.15 on one boot, 0.39 on another, for the same
// code); across boots, compare with BenchmarkWorkerFloor run beside it.
//
// "fresh" starts with an empty state directory; "started-50k" with the
// record of 50,000 attempts started before (in the form older workers
// wrote, which every version reads), as a worker has after days of short
// jobs; "jobroot-shm" puts the attempts' directories on tmpfs (/dev/shm),
// which shows what making and removing them on the disk costs; "cgroup"
// runs each attempt in a cgroup of its own (Config.Cgroup), which the
// sweep at its end reads in place of /proc, where this process may make
// cgroups (root, or a delegated cgroup).
func BenchmarkWorkerPerJob(b *testing.B) {
	b.Run("fresh", func(b *testing.B) { benchWorker(b, 0, "", "") })
	b.Run("started-50k", func(b *testing.B) { benchWorker(b, 50_000, "", "") })
	b.Run("cgroup", func(b *testing.B) {
		base := worker.CgroupTestBase()
		if base == "" {
			b.Skip("this process cannot make cgroups")
		}
		dir := filepath.Join(base, fmt.Sprintf("gpuq-bench-%d", os.Getpid()))
		defer func() { _ = syscall.Rmdir(dir) }() // the worker removed its cgroups below it
		benchWorker(b, 0, "", dir)
	})
	b.Run("jobroot-shm", func(b *testing.B) {
		if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
			b.Skip("no /dev/shm")
		}
		dir, err := os.MkdirTemp("/dev/shm", "gpuq-bench-")
		if err != nil {
			b.Skip(err)
		}
		defer func() { _ = os.RemoveAll(dir) }() // the benchmark is over
		benchWorker(b, 0, filepath.Join(dir, "jobs"), "")
	})
}

// benchWorker runs the benchmark with a record of started attempts
// before it, the job root in jobRoot ("" for the default), and the
// attempts' cgroups below cgroup ("" for none).
func benchWorker(b *testing.B, started int, jobRoot, cgroup string) {
	gpu, err := nvmlgpu.Simulate("bench-h1", "dgxh100", 8)
	if err != nil {
		b.Skipf("no mock GPUs: %v", err) // a build without cgo
	}
	defer func() { _ = gpu.Close() }() // the benchmark is over
	drv, bus := startDriverBus(b)
	state := b.TempDir()
	if started > 0 {
		seedStarted(b, bus, state, started)
	}
	w, err := worker.New(worker.Config{Host: "h1", GPU: gpu, Bus: bus, StateDir: state, JobRoot: jobRoot, Cgroup: cgroup,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run = %v", err)
		}
	}()
	measureJobs(b, drv)
}

// measureJobs has the driver run a first round, which brings the worker
// up (its consumer, its first reads), then b.N jobs, and reports what
// they cost.
func measureJobs(b *testing.B, drv *driver) {
	drv.run(b, 8)

	self0, child0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	b.ResetTimer()
	start := time.Now()
	srv := drv.run(b, b.N)
	wall := time.Since(start)
	b.StopTimer()
	reportCPU(b, wall, rusage(syscall.RUSAGE_SELF)-self0, rusage(syscall.RUSAGE_CHILDREN)-child0)
	b.ReportMetric(float64(srv.Microseconds())/float64(b.N), "server+driver-cpu-us/job")
}

// reportCPU reports the rate of b.N jobs run in wall, and the CPU this
// process (self) and the jobs' processes (child) spent on each.
func reportCPU(b *testing.B, wall, self, child time.Duration) {
	n := float64(b.N)
	b.ReportMetric(n/wall.Seconds(), "jobs/s")
	b.ReportMetric(float64(self.Microseconds())/n, "worker-cpu-us/job")
	b.ReportMetric(float64(child.Microseconds())/n, "child-cpu-us/job")
	// The worker's CPU over its jobs' own: the VM's speed changes from
	// minute to minute, and both move with it, so this is the figure to
	// compare across runs on one boot of the VM (see
	// BenchmarkWorkerPerJob).
	if child > 0 {
		b.ReportMetric(float64(self)/float64(child), "worker/child")
	}
}

// BenchmarkWorkerFloor runs BenchmarkWorkerPerJob's jobs, driver and
// measures on the least a worker must do for each job to speak the wire
// as gpuq's does, through the same bus (natsbus.WorkerBus): read the
// order, read the job's record, store the started report, ack, start
// `true` with its two output pipes read to their end, wait for it, store
// the end marker if it wrote anything (`true` does not), and the done
// report. It keeps no record of started
// attempts, claims no GPU, makes no directory or cgroup, sweeps nothing,
// confirms nothing and retries nothing: it is no worker anyone should run,
// and its CPU per job is the floor under gpuq's worker on this machine,
// measured by the same rusage, so "worker/child" of the two can be put side
// by side. What BenchmarkWorkerPerJob costs beyond it is what the worker's
// safety and bookkeeping cost. "exec" runs each job's command; "wire" runs
// nothing and reports each job exited 0 at once, which leaves what the
// wire alone costs. "spawn" runs `true` as "exec" does, 8 at a time,
// with no server, driver or wire: what starting a process, reading its
// two pipes and waiting for it alone cost this process.
func BenchmarkWorkerFloor(b *testing.B) {
	b.Run("exec", func(b *testing.B) { benchFloor(b, runFloor) })
	b.Run("wire", func(b *testing.B) {
		benchFloor(b, func([]string) (int, time.Duration, int64, error) { return 0, 0, 0, nil })
	})
	b.Run("spawn", benchSpawn)
}

// benchSpawn runs b.N `true`s through runFloor, 8 at a time, and reports
// their CPU as measureJobs does.
func benchSpawn(b *testing.B) {
	if _, _, _, err := runFloor([]string{"true"}); err != nil {
		b.Fatal(err)
	}
	self0, child0 := rusage(syscall.RUSAGE_SELF), rusage(syscall.RUSAGE_CHILDREN)
	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var runs sync.WaitGroup
	var errs [8]error
	for i := range errs {
		runs.Go(func() {
			for errs[i] == nil && next.Add(1) <= int64(b.N) {
				_, _, _, errs[i] = runFloor([]string{"true"})
			}
		})
	}
	runs.Wait()
	wall := time.Since(start)
	b.StopTimer()
	if err := errors.Join(errs[:]...); err != nil {
		b.Fatal(err)
	}
	reportCPU(b, wall, rusage(syscall.RUSAGE_SELF)-self0, rusage(syscall.RUSAGE_CHILDREN)-child0)
}

// benchFloor runs BenchmarkWorkerFloor with each job run by run, which
// also says how many bytes it wrote.
func benchFloor(b *testing.B, run func(command []string) (code int, runtime time.Duration, wrote int64, err error)) {
	drv, bus := startDriverBus(b)
	ctx, cancel := context.WithCancel(context.Background())
	failed := make(chan error, 1)
	fail := func(err error) {
		if ctx.Err() != nil {
			return // the benchmark is over: a report stored may not have its answer yet
		}
		select {
		case failed <- err:
		default:
		}
	}
	var jobs sync.WaitGroup
	orders := bus.Orders(ctx, func(error) {})
	loop := make(chan struct{})
	go func() {
		defer close(loop)
		for o := range orders {
			d, ok := o.Effect.(ledger.DispatchOrder)
			if !ok {
				fail(fmt.Errorf("order %+v (%v)", o.Effect, o.Err))
				continue
			}
			if j, err := bus.Job(ctx, d.Job); err != nil || j == nil || j.Attempt != d.Attempt {
				fail(fmt.Errorf("record of %s: %+v, %v", d.Job, j, err))
				continue
			}
			r := ledger.Report{Host: "h1", Job: d.Job, Attempt: d.Attempt}
			started := r
			started.Type, started.Devices, started.Model = ledger.ReportStarted, []string{"GPU-floor"}, "floor"
			if err := bus.Report(ctx, started); err != nil {
				fail(err)
				continue
			}
			if err := o.Ack(ctx); err != nil {
				fail(err)
			}
			jobs.Go(func() {
				code, runtime, wrote, err := run(d.Command)
				if err != nil {
					fail(err)
					return
				}
				if wrote > 0 { // else the record says how it ended
					end := fmt.Sprintf("exit %d after %v", code, runtime.Round(time.Millisecond))
					if err := bus.Log(ctx, wire.LogChunk{Account: d.Account, Job: d.Job, Host: "h1", Attempt: d.Attempt, Seq: 1,
						End: end, Data: []byte("gpuq: " + end + "\n")}); err != nil {
						fail(err)
					}
				}
				r.Type, r.ExitCode, r.Runtime = ledger.ReportDone, code, runtime
				if err := bus.Report(ctx, r); err != nil {
					fail(err)
				}
			})
		}
	}()
	defer func() {
		cancel()
		<-loop // orders closes once ctx ends
		jobs.Wait()
		select {
		case err := <-failed:
			b.Error(err)
		default:
		}
	}()
	measureJobs(b, drv)
}

// runFloor starts command with its output on two pipes, reads both to
// their end, and waits for it: the least a worker does to run a job and
// stream its output (where the program was found, and /dev/null, are
// kept from job to job, as the worker keeps them). It returns how many
// bytes the job wrote.
func runFloor(command []string) (int, time.Duration, int64, error) {
	path, err := floorPath(command[0])
	if err != nil {
		return 0, 0, 0, err
	}
	null, err := floorNull()
	if err != nil {
		return 0, 0, 0, err
	}
	var rs, ws [2]*os.File
	for i := range 2 {
		if rs[i], ws[i], err = os.Pipe(); err != nil {
			for _, f := range append(rs[:i], ws[:i]...) {
				_ = f.Close() // unused
			}
			return 0, 0, 0, err
		}
	}
	start := time.Now()
	p, err := os.StartProcess(path, command, &os.ProcAttr{Files: []*os.File{null, ws[0], ws[1]}})
	for i := range 2 {
		_ = ws[i].Close() // the child's copy is the one written
	}
	if err != nil {
		return 0, 0, 0, errors.Join(err, rs[0].Close(), rs[1].Close())
	}
	var copied sync.WaitGroup
	var wrote atomic.Int64
	var errs [2]error
	for i, r := range rs {
		copied.Go(func() {
			n, err := io.Copy(io.Discard, r) // what a worker would stream
			wrote.Add(n)
			errs[i] = errors.Join(err, r.Close())
		})
	}
	ps, err := p.Wait()
	copied.Wait()
	if err := errors.Join(err, errs[0], errs[1]); err != nil {
		return 0, 0, 0, err
	}
	return ps.ExitCode(), time.Since(start), wrote.Load(), nil
}

// floorPaths are the programs runFloor found, by name.
var floorPaths sync.Map

// floorPath is where exec.LookPath finds name, looked up once.
func floorPath(name string) (string, error) {
	if p, ok := floorPaths.Load(name); ok {
		return p.(string), nil
	}
	p, err := exec.LookPath(name)
	if err == nil {
		floorPaths.Store(name, p)
	}
	return p, err
}

// floorNull is /dev/null, open for runFloor's jobs to read.
var floorNull = sync.OnceValues(func() (*os.File, error) { return os.Open(os.DevNull) })

// startDriverBus starts the driver and returns it with host h1's bus on a
// connection to its server, closed when the benchmark ends.
func startDriverBus(b *testing.B) (*driver, *natsbus.WorkerBus) {
	b.Helper()
	drv := startDriver(b)
	nc, err := nats.Connect(drv.url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	bus, err := natsbus.NewWorkerBus(js, subjects.Default, "h1", nil)
	if err != nil {
		b.Fatal(err)
	}
	return drv, bus
}

// seedStarted writes a record of n attempts started in the last days, of
// the installation bus reads from, in the form older workers wrote
// (started.json: one JSON object).
func seedStarted(b *testing.B, bus *natsbus.WorkerBus, dir string, n int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inst, err := bus.Installation(ctx)
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	old := map[string]time.Time{}
	for i := range n {
		old[fmt.Sprintf("old-%d/1", i)] = now.Add(-time.Duration(i) * 10 * time.Second)
	}
	data, err := json.Marshal(map[string]any{"installation": inst, "started": old})
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "started.json"), data, 0o600); err != nil {
		b.Fatal(err)
	}
}

// rusage is the user and system CPU of who.
func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// driver is the child process holding the server and the scheduler's part.
type driver struct {
	cmd *exec.Cmd
	in  io.Writer
	out *bufio.Scanner
	url string
}

const driverEnv = "GPUQ_WORKER_BENCH_DRIVER"

func startDriver(b *testing.B) *driver {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestWorkerBenchDriver$", "-test.v=false")
	cmd.Env = append(os.Environ(), driverEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	d := &driver{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	b.Cleanup(func() {
		_ = in.Close() // the driver ends at the end of its input
		if err := cmd.Wait(); err != nil {
			b.Errorf("driver: %v", err)
		}
	})
	d.url = strings.TrimPrefix(d.line(b), "url ")
	return d
}

// line reads the driver's next line of its protocol.
func (d *driver) line(b *testing.B) string {
	b.Helper()
	for d.out.Scan() {
		if l := d.out.Text(); strings.HasPrefix(l, "url ") || strings.HasPrefix(l, "done ") || strings.HasPrefix(l, "fail ") {
			return l
		}
	}
	b.Fatalf("the driver ended: %v", d.out.Err())
	return ""
}

// run has the driver run n jobs and returns the CPU it used meanwhile.
func (d *driver) run(b *testing.B, n int) time.Duration {
	b.Helper()
	if _, err := fmt.Fprintf(d.in, "run %d\n", n); err != nil {
		b.Fatal(err)
	}
	l := d.line(b)
	if strings.HasPrefix(l, "fail ") {
		b.Fatal(l)
	}
	ns, err := strconv.ParseInt(strings.TrimPrefix(l, "done "), 10, 64)
	if err != nil {
		b.Fatal(l)
	}
	return time.Duration(ns)
}

// TestWorkerBenchDriver is BenchmarkWorkerPerJob's child process; it
// skips unless run as one.
func TestWorkerBenchDriver(t *testing.T) {
	if os.Getenv(driverEnv) == "" {
		t.Skip("the driver of BenchmarkWorkerPerJob")
	}
	srv := natstest.Start(t)
	_, js := srv.JetStream(t)
	ctx := context.Background()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, natsbus.SetupConfig{}); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("url %s\n", srv.URLs())
	in := bufio.NewScanner(os.Stdin)
	round := 0
	for in.Scan() {
		count, err := strconv.Atoi(strings.TrimPrefix(in.Text(), "run "))
		if err != nil {
			t.Fatalf("driver: %q", in.Text())
		}
		round++
		cpu0 := rusage(syscall.RUSAGE_SELF)
		if err := driveJobs(ctx, js, kv, n, round, count); err != nil {
			fmt.Printf("fail %v\n", err)
			continue
		}
		fmt.Printf("done %d\n", rusage(syscall.RUSAGE_SELF)-cpu0)
	}
}

// driveJobs runs count jobs on host h1, one per GPU at a time, as a
// scheduler would order them.
func driveJobs(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue, n subjects.Names, round, count int) error {
	const gpus = 8
	cons, err := js.OrderedConsumer(ctx, n.CmdStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{n.Report("h1")}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return err
	}
	it, err := cons.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	seq := uint64(round) << 32
	next := 0
	order := func() error {
		next++
		seq++
		id := fmt.Sprintf("r%d-j%d", round, next)
		rec, err := ledger.MarshalJob(&ledger.Job{ID: id, Account: "a", GPUs: 1, Command: []string{"true"},
			Walltime: time.Minute, MaxAttempts: 3, State: ledger.StateDispatched, Attempt: 1, JobOutcome: &ledger.JobOutcome{Host: "h1"}})
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, subjects.JobKey(id), rec); err != nil {
			return err
		}
		m, err := wire.EncodeEffect(n, seq, time.Now(), 0, ledger.DispatchOrder{Host: "h1", Job: id, Account: "a",
			Attempt: 1, GPUs: 1, Command: []string{"true"}, Walltime: time.Minute})
		if err != nil {
			return err
		}
		msg := nats.NewMsg(m.Subject)
		msg.Data = m.Data
		msg.Header.Set(subjects.MsgIDHeader, m.MsgID)
		for k, v := range m.Header {
			msg.Header.Set(k, v)
		}
		_, err = js.PublishMsg(ctx, msg)
		return err
	}
	for range min(gpus, count) {
		if err := order(); err != nil {
			return err
		}
	}
	for ended := 0; ended < count; {
		m, err := it.Next()
		if err != nil {
			return err
		}
		r, err := wire.DecodeReport("h1", m.Data())
		if err != nil {
			return err
		}
		switch r.Type {
		case ledger.ReportRejected:
			return fmt.Errorf("%s attempt %d rejected: %s", r.Job, r.Attempt, r.Reason)
		case ledger.ReportDone:
			if r.ExitCode != 0 {
				return fmt.Errorf("%s exited %d", r.Job, r.ExitCode)
			}
			ended++
			if next < count {
				if err := order(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
