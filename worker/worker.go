package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Order is one message from the host's dispatch subject.
type Order struct {
	// Effect is a ledger.DispatchOrder or a ledger.CancelOrder; nil when
	// the message could not be decoded, and then Err says why.
	Effect ledger.Effect
	Err    error
	// Ack tells the server the order is handled, without waiting for its
	// answer. An ack that is lost leaves the order to come back after the
	// consumer's ack wait; a dispatch that comes back is known by then
	// (running here, or moved on in the job's record, or in this host's
	// record of started attempts) and is acked again without running
	// twice. Ack returns an error only when the ack could not be sent.
	Ack func(ctx context.Context) error
	// Term removes an order that can never be handled.
	Term func(ctx context.Context, reason string) error
}

// ErrBadRecord reports a job record that cannot be decoded.
var ErrBadRecord = errors.New("worker: undecodable job record")

// Bus is the worker's link to JetStream. internal/natsbus implements it.
type Bus interface {
	// Orders delivers the host's orders, oldest first, until ctx ends, and
	// closes the channel only then. It rides out every failure of the
	// server or of the host's consumer, retrying with backoff for as long
	// as it takes; it calls lost with the error on each failure and with
	// nil each time it reads orders again (the worker logs the changes).
	Orders(ctx context.Context, lost func(error)) <-chan Order
	// Job reads job id's record from the ledger: nil when there is none,
	// an error wrapping ErrBadRecord when it cannot be decoded. Any other
	// error is a failure to reach the server, worth retrying.
	Job(ctx context.Context, id string) (*ledger.Job, error)
	// Report publishes r and returns once the server has stored it,
	// retrying with backoff; it fails only when ctx ends.
	Report(ctx context.Context, r ledger.Report) error
	// Log publishes one chunk of a job's output.
	Log(ctx context.Context, c wire.LogChunk) error
	// Beat writes the host's heartbeat, to expire after ttl.
	Beat(ctx context.Context, h wire.Heartbeat, ttl time.Duration) error
	// Leave removes the heartbeat: the host is gone.
	Leave(ctx context.Context) error
	// Installation names where orders come from, and changes when that
	// source is created anew (the streams are deleted and set up again).
	// The record of attempts started here belongs to one installation.
	// The worker retries it until it answers.
	Installation(ctx context.Context) (string, error)
}

// Config configures a [Worker]. Host, GPU and Bus are required; every other
// field's zero value means its default.
type Config struct {
	Host string // this host's name, a subject token
	GPU  GPU
	Bus  Bus

	// Logger receives the worker's logs. Defaults to discarding them.
	Logger *slog.Logger
	// StateDir holds the record of attempts started here. The worker makes
	// it mode 0700 and refuses one that is not its own. Defaults to
	// <tmp>/gpuq-worker-<host>.
	StateDir string
	// JobRoot holds one directory per running attempt,
	// <JobRoot>/<job>.<attempt>, mode 0700: the attempt's working
	// directory, HOME and TMPDIR. The worker makes the root its own (mode
	// 0711 with JobUIDs, so each attempt's user reaches only its own
	// directory; 0700 without), and clears what an earlier life left in
	// it at start. With JobUIDs every directory above it must be
	// searchable by all users. Defaults to <StateDir>-jobs, or with
	// JobUIDs, when a directory above that is not searchable by all,
	// /tmp/gpuq-jobs-<host>-<hash of StateDir>.
	JobRoot string
	// KeepAttemptDirs keeps an attempt's directory after it ends (handed
	// back to the worker's user, so no later attempt can read it), and
	// what is in the job root at start. Defaults to false: each is
	// emptied once the attempt's processes are gone, and, without a job
	// uid pool, kept under a spare name for a later attempt (which it is
	// as fresh to as a new one), or removed.
	KeepAttemptDirs bool
	// JobUIDs is the pool of ids the attempts run as, one per attempt, as
	// both uid and gid, with no supplementary groups: an attempt then
	// cannot read the worker's files or another attempt's, nor signal
	// them, and every process of the attempt is found and killed by its
	// uid. It needs the worker to run as root (on Linux), and ids no user
	// or group of /etc/passwd or /etc/group has, that no other worker on
	// the host uses: the worker kills every process of these ids that it
	// did not start at start. Defaults to none: jobs run as the worker's
	// own user, which the worker logs at start with what it means.
	JobUIDs IDRange
	// Cgroup is a cgroup v2 directory for the worker alone (made if
	// missing; under systemd, a directory below the service's own cgroup
	// with Delegate=yes). Each attempt then runs in a cgroup of its own
	// below it, which every process the attempt starts is born in and
	// cannot leave without write access to the worker's cgroup files:
	// the sweep at its end finds all of them at a fixed cost (one read
	// where the /proc sweep lists every process of the host), and kills
	// them with one write. At start the worker kills and removes what is
	// below it. Linux 5.14 or later. Defaults to "": an attempt's
	// processes are found through /proc (see sandbox_linux.go).
	Cgroup string
	// HeartbeatInterval is how often the worker writes its heartbeat.
	// Defaults to 2s.
	HeartbeatInterval time.Duration
	// HeartbeatTTL is how long a heartbeat lasts without renewal: whole
	// seconds, at least twice HeartbeatInterval. Defaults to 10s.
	HeartbeatTTL time.Duration
	// MaxUsedMiB is the memory a device may have in use and still count as
	// free (the driver's own context uses some). Defaults to 1024.
	MaxUsedMiB int64
	// KillGrace is how long a stopped job has between SIGTERM and SIGKILL.
	// Defaults to 10s.
	KillGrace time.Duration
	// DrainTimeout is how long a stopping worker lets running jobs finish
	// before stopping them. Defaults to 5m.
	DrainTimeout time.Duration
	// ReportTimeout bounds the retries of a report once the worker is
	// stopping. Defaults to 30s.
	ReportTimeout time.Duration
	// RecordWait is how long a dispatch waits for the job's record in the
	// ledger to show its attempt (the scheduler writes it before it sends
	// the order, but a replica's read can lag the write) before the order
	// is dropped as stale. Time the server is unreachable does not count.
	// Defaults to 10s.
	RecordWait time.Duration
	// MaxLogBytes caps the output kept per attempt. Defaults to 16 MiB.
	MaxLogBytes int
	// LogChunkBytes and LogFlush bound a log chunk's size and age.
	// Default to 64 KiB and 200ms.
	LogChunkBytes int
	LogFlush      time.Duration
	// Metrics receives what the worker measures (see [Metrics]). Defaults
	// to nil: nothing is measured.
	Metrics Metrics
}

func (c *Config) validate() error {
	if err := subjects.CheckToken("host", c.Host); err != nil {
		return fmt.Errorf("worker: Config.Host: %w", err)
	}
	if c.GPU == nil || c.Bus == nil {
		return errors.New("worker: Config.GPU and Config.Bus are required")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(os.TempDir(), "gpuq-worker-"+c.Host)
	}
	if c.JobRoot != "" && filepath.Clean(c.JobRoot) == filepath.Clean(c.StateDir) {
		return errors.New("worker: Config.JobRoot must not be the StateDir: jobs must not reach the worker's state")
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 2 * time.Second
	}
	if c.HeartbeatTTL == 0 {
		c.HeartbeatTTL = 10 * time.Second
	}
	if c.HeartbeatTTL%time.Second != 0 || c.HeartbeatTTL < 2*c.HeartbeatInterval || c.HeartbeatTTL < time.Second {
		return fmt.Errorf("worker: HeartbeatTTL %v must be whole seconds, at least 1s and at least twice HeartbeatInterval %v", c.HeartbeatTTL, c.HeartbeatInterval)
	}
	if c.MaxUsedMiB <= 0 {
		c.MaxUsedMiB = 1024
	}
	if c.KillGrace <= 0 {
		c.KillGrace = 10 * time.Second
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 5 * time.Minute
	}
	if c.ReportTimeout <= 0 {
		c.ReportTimeout = 30 * time.Second
	}
	if c.RecordWait <= 0 {
		c.RecordWait = 10 * time.Second
	}
	if c.MaxLogBytes <= 0 {
		c.MaxLogBytes = 16 << 20
	}
	if c.LogChunkBytes <= 0 || c.LogChunkBytes > 512<<10 {
		c.LogChunkBytes = 64 << 10
	}
	if c.LogFlush <= 0 {
		c.LogFlush = 200 * time.Millisecond
	}
	return nil
}

// Worker runs the jobs dispatched to one host: it claims their GPUs, runs
// each as a child process group, reports started and done, streams output,
// and heartbeats the host's devices and running attempts.
type Worker struct {
	cfg    Config
	log    *slog.Logger
	claims *Claims
	state  *startedLog
	jobs   *sandbox
	abort  chan struct{}
	once   sync.Once

	// Each kind of call to the server logs its outages once.
	heartbeats, orders, records, output *outage
	// leftovers follows the sweeps of processes attempts leave behind.
	leftovers *outage

	mu      sync.Mutex
	running map[Attempt]*attempt
	drain   bool
	wg      sync.WaitGroup
	// gos runs the goroutines of each attempt (its run, its output
	// copiers, its record and reports), kept from one attempt to the next.
	gos *goPool
}

// attempt is one attempt from its started report until its done report is
// stored. It stays in the heartbeat all that time.
type attempt struct {
	spec   Spec
	jail   *jail
	proc   *process
	cancel string // why it was asked to stop before it started, if so
	infra  bool
}

// New returns a worker, or an error naming the first bad field of cfg.
func New(cfg Config) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// A job of the worker's own user must not read its environment (its
	// NATS credentials), memory or open files.
	if err := hideWorker(); err != nil {
		return nil, fmt.Errorf("worker: %w", err)
	}
	state, err := openStartedLog(filepath.Join(cfg.StateDir, "started.jsonl"), 8*24*time.Hour)
	if err != nil {
		return nil, err
	}
	jobs, err := newSandbox(&cfg)
	if err != nil {
		return nil, errors.Join(err, state.close())
	}
	log := cfg.Logger.With("component", "worker", "worker", cfg.Host)
	state.warn = func(err error) {
		log.Warn("the record of started attempts keeps its expired lines", slog.Any("err", err))
	}
	walks := newOutage(log, "cannot remove what ended attempts' users left in the shared directories; their job uids stay out of the pool, retrying",
		"removed what ended attempts' users left in the shared directories; their job uids are back in the pool")
	jobs.walked = func(err error) {
		if err != nil {
			walks.fail(err)
		} else {
			walks.ok()
		}
	}
	return &Worker{cfg: cfg, log: log,
		claims: NewClaims(cfg.GPU, cfg.MaxUsedMiB), state: state, jobs: jobs, abort: make(chan struct{}),
		leftovers:  newOutage(log, "processes of an attempt survive SIGKILL; its GPUs stay held, and retrying", "the processes left by attempts are gone"),
		heartbeats: newOutage(log, "heartbeat not stored; retrying every beat (running jobs go on)", "heartbeat stored again"),
		orders:     newOutage(log, "cannot read orders; retrying until the server answers (running jobs go on)", "reading orders again"),
		records:    newOutage(log, "cannot read job records to confirm orders; retrying (no order starts unconfirmed)", "reading job records again"),
		output:     newOutage(log, "job output not stored; dropping it until the server answers", "storing job output again"),
		running:    map[Attempt]*attempt{}, gos: newGoPool()}, nil
}

// Abort stops the worker at once: running jobs are killed without their
// grace period. It is what a second signal does. Run still returns only
// after their reports are sent (or ReportTimeout passes).
func (w *Worker) Abort() { w.once.Do(func() { close(w.abort) }) }

// Run takes orders until ctx ends, then drains: it takes no new work,
// heartbeats as draining, lets running jobs finish for up to DrainTimeout,
// stops the rest (reported as infrastructure failures, so they are retried
// and not charged), removes its heartbeat and returns.
//
// Run rides out every outage of the server: it waits for the orders stream
// at start, retries the order stream, heartbeats and reports for as long
// as it takes, logging each outage once when it begins and once when it
// ends, and keeps running jobs running meanwhile. It returns an error only
// when it cannot start for a reason of its own (the GPUs cannot be read,
// the state directory cannot be written), and nil when stopped. A Worker
// runs once.
func (w *Worker) Run(ctx context.Context) error {
	// Run runs once: its record of started attempts is closed when it
	// returns, once every dispatch has (deferred first, so run last).
	defer func() {
		if err := w.state.close(); err != nil {
			w.log.Warn("close the record of started attempts", slog.Any("err", err))
		}
	}()
	defer w.gos.close() // each attempt's goroutines have ended by then
	// bg outlives ctx, so a draining worker can still report; an Abort
	// gives reports in flight ReportTimeout more, then ends them too.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	// run ends when the worker is told to stop, by ctx or by Abort: no
	// new order is taken or confirmed after that.
	run, stopRun := context.WithCancel(ctx)
	defer stopRun()
	go func() {
		select {
		case <-w.abort:
			stopRun()
			select {
			case <-time.After(w.cfg.ReportTimeout):
				stopBg()
			case <-bg.Done():
			}
		case <-bg.Done():
		}
	}()
	devs, err := w.cfg.GPU.Devices()
	if err != nil {
		return fmt.Errorf("worker %s: read the GPUs: %w", w.cfg.Host, err)
	}
	w.metrics().Opened(w.cfg.GPU.Simulated(), len(devs))
	if err := w.jobs.register(w.cfg.Host); err != nil {
		return err
	}
	defer w.jobs.unregister()
	w.jobs.describe(w.log)
	// What attempts of an earlier life left (a worker killed with SIGKILL
	// leaves every process that left its job's process group) is killed
	// before any heartbeat offers the GPUs as free.
	if err := untilGone(run, w.leftovers, w.jobs.reclaim); err != nil {
		w.log.Info("worker stopped before it could start")
		return nil
	}
	// What a pool uid left when an earlier life was killed between its
	// attempt's end and the walk goes before the uid is used again; only
	// now, with no process of an earlier attempt left to make more.
	w.jobs.cleanAll()
	if err := w.jobs.clearRoot(); err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.Host, err)
	}
	var inst string
	found := newOutage(w.log, "cannot find the orders stream; waiting for the server and a scheduler to set it up", "found the orders stream")
	if err := retry(run, found, func(ctx context.Context) error {
		var err error
		inst, err = w.cfg.Bus.Installation(ctx)
		return err
	}); err != nil {
		w.log.Info("worker stopped before it could start")
		return nil
	}
	if dropped, err := w.state.bind(inst); err != nil {
		return fmt.Errorf("worker %s: %w", w.cfg.Host, err)
	} else if dropped > 0 {
		w.log.WarnContext(ctx, "the record of started attempts belongs to an earlier installation; starting it afresh",
			slog.Int("dropped", dropped), slog.String("installation", inst))
	}
	orderCtx, stopOrders := context.WithCancel(run)
	defer stopOrders()
	orders := w.cfg.Bus.Orders(orderCtx, func(err error) {
		if err != nil && orderCtx.Err() == nil {
			w.orders.fail(err)
		} else if err == nil {
			w.orders.ok()
		}
	})
	w.log.InfoContext(ctx, "worker started", slog.Int("gpus", len(devs)), slog.Bool("simulated", w.cfg.GPU.Simulated()))
	// The heartbeat has its own context: it must stop before Leave, or a
	// beat after Leave writes the host back for HeartbeatTTL.
	hbCtx, stopHeartbeat := context.WithCancel(bg)
	defer stopHeartbeat()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeat(hbCtx)
	}()
	var health sync.WaitGroup
	health.Add(1)
	go func() {
		defer health.Done()
		if err := w.cfg.GPU.WatchHealth(bg, w.unhealthy); err != nil {
			w.log.Error("GPU health watch ended; Xid and ECC errors are no longer detected", slog.Any("err", err))
		}
	}()

	var held *Order // taken while a batch was gathered, and not of it
loop:
	for {
		var o Order
		if held != nil {
			o, held = *held, nil
		} else {
			var ok bool
			select {
			case <-run.Done():
				break loop
			case o, ok = <-orders:
				if !ok {
					break loop
				}
			}
		}
		batch, next, closed := gather(o, orders)
		w.handle(run, bg, batch)
		if closed {
			break loop
		}
		held = next
	}
	stopOrders()
	w.mu.Lock()
	w.drain = true
	w.mu.Unlock()
	w.beat(bg)
	w.drainJobs()
	w.wg.Wait()
	if err := w.jobs.close(); err != nil {
		w.log.Warn("remove the job root", slog.Any("err", err))
	}
	stopHeartbeat()
	<-hbDone
	lctx, cancel := context.WithTimeout(bg, w.cfg.ReportTimeout)
	if err := w.cfg.Bus.Leave(lctx); err != nil {
		w.log.Warn("remove the heartbeat", slog.Any("err", err))
	}
	cancel()
	stopBg()
	health.Wait()
	w.log.Info("worker stopped")
	return nil
}

// drainJobs waits for running jobs up to DrainTimeout, then stops them.
func (w *Worker) drainJobs() {
	deadline := time.NewTimer(w.cfg.DrainTimeout)
	defer deadline.Stop()
	done := make(chan struct{})
	go func() {
		w.wg.Wait()
		close(done)
	}()
	if n := w.count(); n > 0 {
		w.log.Info("draining", slog.Int("running", n), slog.Duration("timeout", w.cfg.DrainTimeout))
	}
	select {
	case <-done:
		return
	case <-deadline.C:
		w.stopAll("the worker drained past its timeout", false)
	case <-w.abort:
		w.stopAll("the worker was stopped", true)
	}
	select {
	case <-done:
	case <-w.abort:
		w.stopAll("the worker was stopped", true)
	}
}

func (w *Worker) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// stopAll stops every running attempt as an infrastructure failure.
func (w *Worker) stopAll(reason string, now bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range w.running {
		a.stop(reason, true, now)
	}
}

// stop asks the attempt's process to end, or marks it so it ends as soon as
// it starts. Holds w.mu.
func (a *attempt) stop(reason string, infra, now bool) {
	if a.proc == nil {
		if a.cancel == "" {
			a.cancel, a.infra = reason, infra
		}
		return
	}
	if now {
		a.proc.kill(reason, infra)
	} else {
		a.proc.stop(reason, infra)
	}
}

// maxBatch bounds the dispatch orders handled together (the orders
// reader pulls 16 at a time).
const maxBatch = 16

// gather returns first with the dispatch orders that wait behind it on
// orders now, taken without waiting, as one batch of at most maxBatch: only
// dispatches, of distinct jobs (a redelivered order, or a later attempt
// that supersedes an earlier one, is handled after the batch it would
// join, as it would be one order at a time). An order taken that may not
// join is returned as next, to be handled after the batch; closed says
// that orders is closed.
func gather(first Order, orders <-chan Order) (batch []Order, next *Order, closed bool) {
	batch = []Order{first}
	if !batchable(first) {
		return batch, nil, false
	}
	for len(batch) < maxBatch {
		select {
		case o, ok := <-orders:
			if !ok {
				return batch, nil, true
			}
			if !batchable(o) || slices.ContainsFunc(batch, func(b Order) bool {
				return b.Effect.(ledger.DispatchOrder).Job == o.Effect.(ledger.DispatchOrder).Job
			}) {
				return batch, &o, false
			}
			batch = append(batch, o)
		default:
			return batch, nil, false
		}
	}
	return batch, nil, false
}

// batchable reports whether o is a dispatch order, which may be handled in
// a batch with others.
func batchable(o Order) bool {
	_, ok := o.Effect.(ledger.DispatchOrder)
	return o.Err == nil && ok
}

// handle acts on a batch of orders: one order, or dispatches of distinct
// jobs (see gather). Each is confirmed and claimed in order; the attempts
// of the batch that may start are recorded on disk together (one flush)
// and reported started together, then each whose report is stored is
// started, in order. A dispatch is acked
// only once its started or rejected report is stored, or once it is known
// to be stale. Waits that may end with the worker's stop (confirming an
// order) use run; reports use ctx, which outlives it.
func (w *Worker) handle(run, ctx context.Context, batch []Order) {
	var cs []*confirmed
	for _, o := range batch {
		if o.Err != nil {
			w.log.Error("undecodable order; dropping it", slog.Any("err", o.Err))
			if err := o.Term(ctx, o.Err.Error()); err != nil {
				w.log.Warn("drop the undecodable order", slog.Any("err", err))
			}
			continue
		}
		switch ord := o.Effect.(type) {
		case ledger.DispatchOrder:
			c, ack := w.confirm(run, ctx, ord)
			if c != nil {
				c.order = o
				cs = append(cs, c)
				continue
			}
			if !ack {
				continue // not acked: the order comes back to this or the next process
			}
		case ledger.CancelOrder:
			w.cancelOrder(ord)
		}
		w.ack(ctx, o)
	}
	if len(cs) == 0 {
		return
	}
	for i, ok := range w.start(ctx, cs) {
		if ok {
			w.ack(ctx, cs[i].order)
		}
	}
}

// ack acks o. Nothing waits for the server's answer: an order whose ack
// is lost comes back, to be known by then (see Order.Ack).
func (w *Worker) ack(ctx context.Context, o Order) {
	if err := o.Ack(ctx); err != nil {
		w.log.Warn("ack an order; it comes back after the ack wait", slog.Any("err", err))
	}
}

// cancelOrder stops the attempt the order names if it runs here, whether
// the job was cancelled or the attempt is no longer current (it started
// here after the scheduler had moved on).
func (w *Worker) cancelOrder(o ledger.CancelOrder) {
	a := Attempt{o.Job, o.Attempt}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.running[a]; r != nil {
		w.log.Info("cancelling", slog.String("job_id", a.Job), slog.Int("attempt", a.N))
		r.stop("cancelled", false, false)
	}
}

// confirmed is a dispatch order confirmed current, its GPUs claimed, on
// its way to its record and start (see start).
type confirmed struct {
	order   Order
	ord     ledger.DispatchOrder
	a       Attempt
	log     *slog.Logger
	claimed []Device
}

// confirm confirms one dispatch order and claims its GPUs. It returns the
// attempt to start, or nil and whether the order is to be acked: it is
// not when the worker is stopping and could not confirm the order or
// store its rejected report.
func (w *Worker) confirm(run, ctx context.Context, o ledger.DispatchOrder) (*confirmed, bool) {
	a := Attempt{o.Job, o.Attempt}
	log := w.log.With(slog.String("job_id", a.Job), slog.Int("attempt", a.N))
	w.mu.Lock()
	_, known := w.running[a]
	for other, r := range w.running {
		if other.Job == a.Job && other.N < a.N {
			log.Warn("a newer attempt supersedes a running one", slog.Int("old_attempt", other.N))
			r.stop(fmt.Sprintf("superseded by attempt %d", a.N), true, false)
		}
	}
	w.mu.Unlock()
	if known {
		return nil, true // redelivered while running: it is already here
	}
	current, why, err := w.current(run, a)
	if err != nil {
		return nil, false // stopping before the order was confirmed: the next process confirms it
	}
	if !current {
		// The scheduler has moved on (the attempt was declared lost while
		// this worker was away, and retried elsewhere): running it now
		// would run the job twice. A report would be ignored, as every
		// report for an attempt that is not current is.
		log.Warn("order no longer current; dropped without running it", slog.String("why", why))
		return nil, true
	}
	if w.state.has(a) {
		// This host took the attempt before a restart. Whatever became of
		// it, running it again could run it twice: refuse it, so a
		// dispatched attempt is retried now, and a running one is found
		// missing from the heartbeat and declared lost.
		log.Warn("dispatch of an attempt this host took before a restart; refusing to run it twice")
		return nil, w.report(ctx, ledger.Report{Type: ledger.ReportRejected, Host: w.cfg.Host, Job: a.Job, Attempt: a.N,
			Reason: "the worker restarted after taking this attempt; it is not run twice"})
	}
	claimed, err := w.claims.Claim(a, o.GPUs)
	if err != nil {
		// Busy: the host has the GPUs, but they are in use (a job here has
		// not been reported done yet, or something else uses them). The
		// ledger does not spend an attempt on that.
		busy := errors.Is(err, ErrGPUsBusy)
		log.Warn("cannot start", slog.Bool("busy", busy), slog.Any("err", err))
		return nil, w.report(ctx, ledger.Report{Type: ledger.ReportRejected, Host: w.cfg.Host, Job: a.Job, Attempt: a.N,
			Reason: truncate(err.Error()), Busy: busy})
	}
	return &confirmed{ord: o, a: a, log: log, claimed: claimed}, false
}

// start records the attempts of cs on disk, all with one flush, then
// sends their started reports together, and starts each whose report is
// stored, in order. It returns for each whether its order is to be acked:
// not when the worker is stopping and could not store the attempt's
// started or rejected report.
func (w *Worker) start(ctx context.Context, cs []*confirmed) []bool {
	// The record of the attempts (a write flushed to disk) and their
	// places (directories made) are made at once: each waits on the disk,
	// and both are done before the started reports.
	as := make([]Attempt, len(cs))
	for i, c := range cs {
		as[i] = c.a
	}
	recorded := make(chan error, 1)
	w.gos.Go(func() { recorded <- w.state.addAll(as, time.Now()) })
	jails := make([]*jail, len(cs))
	perrs := make([]error, len(cs))
	for i, c := range cs {
		jails[i], perrs[i] = w.jobs.prepare(c.a)
	}
	rerr := <-recorded
	oks := make([]bool, len(cs))
	rs := make([]*attempt, len(cs))
	for i, c := range cs {
		rs[i], oks[i] = w.place(ctx, c, jails[i], perrs[i], rerr)
	}
	// The started reports of the batch are stored side by side (their
	// publishes share the connection's writes); no attempt starts before
	// its own is stored. Reports of distinct jobs need no order.
	stored := make([]bool, len(cs))
	var sent sync.WaitGroup
	for i, r := range rs {
		switch {
		case r == nil:
		case len(rs) == 1:
			stored[i] = w.report(ctx, w.startedReport(cs[i], r)) // alone: no goroutine of its own
		default:
			sent.Add(1)
			w.gos.Go(func() {
				defer sent.Done()
				stored[i] = w.report(ctx, w.startedReport(cs[i], r))
			})
		}
	}
	sent.Wait()
	for i, r := range rs {
		if r != nil {
			oks[i] = w.launch(ctx, cs[i], r, stored[i])
		}
	}
	return oks
}

// startedReport is the started report of r, confirmed as c.
func (w *Worker) startedReport(c *confirmed, r *attempt) ledger.Report {
	return ledger.Report{Type: ledger.ReportStarted, Host: w.cfg.Host, Job: c.a.Job, Attempt: c.a.N, Devices: r.spec.Devices,
		Model: c.claimed[0].Model}
}

// place readies one attempt to start, given its place (jail, or perr) and
// whether its record failed (rerr): it returns the attempt, running from
// now on (in the heartbeat), or nil when it is refused, with whether the
// order is to be acked (its rejected report was stored).
func (w *Worker) place(ctx context.Context, c *confirmed, jail *jail, perr, rerr error) (*attempt, bool) {
	a, log, o, claimed := c.a, c.log, c.ord, c.claimed
	if err := rerr; err != nil {
		if perr == nil {
			if rerr := w.jobs.release(jail); rerr != nil {
				log.Warn("release the attempt's place", slog.Any("err", rerr))
			}
		}
		w.claims.Release(a)
		return nil, w.report(ctx, ledger.Report{Type: ledger.ReportRejected, Host: w.cfg.Host, Job: a.Job, Attempt: a.N, Reason: truncate(err.Error())})
	}
	if perr != nil {
		w.claims.Release(a)
		log.Error("cannot make the attempt's place", slog.Any("err", perr))
		return nil, w.report(ctx, ledger.Report{Type: ledger.ReportRejected, Host: w.cfg.Host, Job: a.Job, Attempt: a.N, Reason: truncate(perr.Error())})
	}
	if err := w.jobs.checkWorkdir(jail, o.Workdir); err != nil {
		// The job's own error, not the host's: refused, so it is retried
		// (on a host where the directory may exist) and never charged.
		log.Warn("cannot start in the job's workdir", slog.Any("err", err))
		if rerr := w.jobs.release(jail); rerr != nil {
			log.Warn("release the attempt's place", slog.Any("err", rerr))
		}
		w.claims.Release(a)
		return nil, w.report(ctx, ledger.Report{Type: ledger.ReportRejected, Host: w.cfg.Host, Job: a.Job, Attempt: a.N, Reason: truncate(err.Error())})
	}
	devs := make([]string, len(claimed))
	for i, d := range claimed {
		devs[i] = d.UUID
	}
	r := &attempt{jail: jail, spec: Spec{Attempt: a, Account: o.Account, Command: o.Command, Env: o.Env, Devices: devs,
		Walltime: o.Walltime, Dir: jail.dir, Workdir: o.Workdir, ArrayID: o.ArrayID, ArrayIndex: o.ArrayIndex}}
	w.mu.Lock()
	w.running[a] = r
	w.mu.Unlock()
	return r, false
}

// launch starts r once its started report is stored, and returns whether
// its order is to be acked: not when the report was not stored.
func (w *Worker) launch(ctx context.Context, c *confirmed, r *attempt, stored bool) bool {
	a, log := c.a, c.log
	if !stored {
		// Stopping, and the ledger does not know the attempt started: do
		// not start it. The unacked order comes back to the next process,
		// which refuses it (the attempt is in this host's record), so the
		// scheduler retries it.
		if err := w.jobs.release(r.jail); err != nil {
			log.Warn("release the attempt's place", slog.Any("err", err))
		}
		w.claims.Release(a)
		w.mu.Lock()
		delete(w.running, a)
		w.mu.Unlock()
		return false
	}
	log.Debug("starting", slog.Any("gpu_uuid", r.spec.Devices))
	w.metrics().AttemptStarted()
	w.wg.Add(1)
	w.gos.Go(func() { w.run(ctx, r) })
	return true
}

// current reads the job's record until it says whether attempt a, sent to
// this host, is still the job's current attempt. The scheduler writes the
// record (this attempt, dispatched to this host) before it sends the order,
// so any other attempt or state or host means the order is stale. A record
// that is missing or shows an earlier attempt may be a replica's lagging
// read: it is read again for up to RecordWait, then the order is stale.
// While the server cannot be reached the read is retried for as long as it
// takes: no order starts unconfirmed. current returns an error only when
// run ends first.
func (w *Worker) current(run context.Context, a Attempt) (bool, string, error) {
	bo := retryBackoff(20*time.Millisecond, time.Second)
	// behind sums the time between answers that did not show the attempt
	// yet; lastLag is the time of the previous answer if it was one.
	var behind time.Duration
	var lastLag time.Time
	for {
		rctx, cancel := context.WithTimeout(run, 5*time.Second)
		j, err := w.cfg.Bus.Job(rctx, a.Job)
		cancel()
		if run.Err() != nil {
			return false, "", run.Err()
		}
		now := time.Now()
		var lag string
		switch {
		case err != nil && !errors.Is(err, ErrBadRecord):
			w.records.fail(err)
		case err != nil:
			w.records.ok()
			lag = err.Error()
		case j == nil:
			w.records.ok()
			lag = "the ledger has no record of the job"
		case j.Attempt < a.N:
			w.records.ok()
			lag = fmt.Sprintf("the job's record is at attempt %d", j.Attempt)
		default:
			w.records.ok()
			if j.Attempt == a.N && j.Host() == w.cfg.Host && j.State == ledger.StateDispatched {
				return true, "", nil
			}
			host := j.Host()
			if host == "" {
				host = "no host"
			}
			return false, fmt.Sprintf("the job's record shows attempt %d %s on %s", j.Attempt, j.State, host), nil
		}
		if lag == "" {
			lastLag = time.Time{} // unreachable: this time does not count
		} else {
			if !lastLag.IsZero() {
				behind += now.Sub(lastLag)
			}
			lastLag = now
			if behind >= w.cfg.RecordWait {
				return false, fmt.Sprintf("%s after %v", lag, w.cfg.RecordWait), nil
			}
		}
		if !sleep(run, bo.NextBackOff()) {
			return false, "", run.Err()
		}
	}
}

// run runs one attempt to its end and reports it. Its GPUs are freed as
// soon as every process of the attempt is gone, before the done report:
// the scheduler places other work on them the moment the report is
// stored, and would find them still held. Processes that survive the sweep
// keep the GPUs held (and the attempt in the heartbeat) while the sweep is
// retried. The attempt stays in the heartbeat until the report is stored.
func (w *Worker) run(ctx context.Context, r *attempt) {
	defer w.wg.Done()
	a := r.spec.Attempt
	log := w.log.With(slog.String("job_id", a.Job), slog.Int("attempt", a.N))
	out := newOutput(ctx, w, a, r.spec.Account)
	proc, err := startProcess(w.jobs, w.gos, r.jail, r.spec, out.stdout, out.stderr, w.cfg.KillGrace, log)
	var o Outcome
	if err != nil {
		out.note(fmt.Sprintf("gpuq: cannot start %q: %v\n", r.spec.Command[0], err))
		o = Outcome{ExitCode: 127}
		if err := w.jobs.release(r.jail); err != nil {
			log.Warn("release the attempt's place", slog.Any("err", err))
		}
		w.claims.Release(a)
		out.close(o)
	} else {
		w.mu.Lock()
		r.proc = proc
		pending, infra := r.cancel, r.infra
		w.mu.Unlock()
		if pending != "" {
			proc.stop(pending, infra)
		}
		o = proc.wait(r.spec.Walltime)
		// The output is whole once wait returns: its end marker is sent
		// while the attempt is swept (through /proc, which takes a while;
		// a cgroup's sweep reads one file, and a goroutine to overlap it
		// would cost more than it saves), and stored before the done
		// report.
		closed := make(chan struct{})
		if r.jail != nil && r.jail.cg != nil {
			out.close(o) // the sweep reads one file: nothing to overlap
			close(closed)
		} else {
			w.gos.Go(func() { defer close(closed); out.close(o) })
		}
		err := untilGone(ctx, w.leftovers, proc.sweep)
		proc.reap()
		if err != nil {
			// The worker is ending; its next life kills them (see
			// reclaim) before it offers the GPUs.
			log.Error("stopping with processes of the attempt left; its GPUs are not freed and it is not reported", slog.Any("err", err))
			<-closed
			w.mu.Lock()
			delete(w.running, a)
			w.mu.Unlock()
			return
		}
		if err := w.jobs.release(r.jail); err != nil {
			log.Warn("release the attempt's place", slog.Any("err", err))
		}
		w.claims.Release(a)
		<-closed
	}
	w.metrics().AttemptEnded(attemptEnd(o, proc != nil), o.Runtime)
	rep := ledger.Report{Type: ledger.ReportDone, Host: w.cfg.Host, Job: a.Job, Attempt: a.N, ExitCode: o.ExitCode, Runtime: o.Runtime}
	if o.Infra {
		rep.Infra = truncate(o.Stopped)
	}
	w.log.Info("ended", slog.String("job_id", a.Job), slog.Int("attempt", a.N), slog.Int("exit_code", o.ExitCode),
		slog.Duration("runtime", o.Runtime), slog.String("stopped", o.Stopped))
	w.report(ctx, rep)
	w.mu.Lock()
	delete(w.running, a)
	w.mu.Unlock()
}

// report sends r, retrying until it is stored, and reports whether it was.
// While the worker runs it retries for as long as it takes; once it is
// stopping, for ReportTimeout.
func (w *Worker) report(ctx context.Context, r ledger.Report) bool {
	w.mu.Lock()
	stopping := w.drain
	w.mu.Unlock()
	if stopping {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.cfg.ReportTimeout)
		defer cancel()
	}
	if err := w.cfg.Bus.Report(ctx, r); err != nil {
		w.log.Error("report not stored; the scheduler will find the attempt lost", slog.String("job_id", r.Job),
			slog.Int("attempt", r.Attempt), slog.String("type", string(r.Type)), slog.Any("err", err))
		return false
	}
	return true
}

// unhealthy handles a device failure: the device is never offered again,
// and a job on it ends as an infrastructure failure.
func (w *Worker) unhealthy(uuid, reason string) {
	a, held := w.claims.MarkUnhealthy(uuid, reason)
	w.log.Error("GPU unhealthy", slog.String("gpu_uuid", uuid), slog.String("reason", reason))
	if !held {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if r := w.running[a]; r != nil {
		r.stop(fmt.Sprintf("%s on %s", reason, uuid), true, false)
	}
}

// heartbeat writes the heartbeat every interval until ctx ends.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		w.beat(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat writes one heartbeat: every device with its state and holder, and the
// running attempts.
func (w *Worker) beat(ctx context.Context) {
	h := w.Host()
	bctx, cancel := context.WithTimeout(ctx, w.cfg.HeartbeatInterval)
	defer cancel()
	switch err := w.cfg.Bus.Beat(bctx, h, w.cfg.HeartbeatTTL); {
	case err == nil:
		w.heartbeats.ok()
		w.metrics().Beat(h, nil)
	case ctx.Err() == nil:
		w.heartbeats.fail(err)
		w.metrics().Beat(h, err)
	}
}

// Host returns the heartbeat the worker would write now.
func (w *Worker) Host() wire.Heartbeat {
	h := wire.Heartbeat{Host: w.cfg.Host, Simulated: w.cfg.GPU.Simulated(), Time: time.Now()}
	snap, err := w.claims.Snapshot()
	if err != nil {
		w.log.Error("read the GPUs for the heartbeat; offering none", slog.Any("err", err))
	}
	for _, s := range snap {
		d := wire.Device{UUID: s.UUID, Model: s.Model, MemoryMiB: s.MemoryMiB, Healthy: s.Healthy,
			Job: s.Holder.Job, Attempt: s.Holder.N}
		if s.Holder == (Attempt{}) && s.Why != "" {
			d.Busy, d.Reason = s.Healthy, s.Why
		}
		h.Devices = append(h.Devices, d)
	}
	w.mu.Lock()
	h.Draining = w.drain
	for a := range w.running {
		h.Running = append(h.Running, wire.Running{Job: a.Job, Attempt: a.N})
	}
	w.mu.Unlock()
	sort.Slice(h.Running, func(i, j int) bool { return h.Running[i].Job < h.Running[j].Job })
	return h
}

// truncate makes s a reason the ledger accepts: valid UTF-8 (JSON would
// turn each stray byte into a 3-byte U+FFFD) of at most MaxReasonBytes,
// cut on a character boundary and marked "..." when it is too long.
func truncate(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= ledger.MaxReasonBytes {
		return s
	}
	cut := ledger.MaxReasonBytes - len("...")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
