// Package bench measures a gpuq installation from outside, the way a user
// sees it, with the workload of the peer benchmarks (../shared/peers and
// bench/peers in the repository): jobs that run `true` on one GPU each.
//
// [Run] goes through four phases, against whatever scheduler and workers
// the server has:
//
//   - idle: one job at a time, the next submitted when the last has
//     settled: submit → started and submit → settled latencies.
//   - e2e: N jobs from concurrent submitters while the workers run them:
//     submissions/s (N over the time the submit calls took), end-to-end
//     jobs/s (N over first submit → last job settled), latencies.
//   - backlog: N jobs queued behind a gate (they wait on a job held for
//     credits, with afterany), then the gate is cancelled: drain jobs/s (N
//     over cancel → last job settled).
//   - js: the JetStream limit of the same server, in a scratch stream and
//     bucket of its own: async publishes/s and pipelined KV
//     compare-and-swap updates/s, so the job rates can be read as ratios.
//
// Every job is a job of an account of the bench's own, gpuq-bench-<hex>,
// created with just the credits the run needs (creating it takes an
// admin's rights), or of an account the caller names ([Config.Account]),
// where each tenant is a NATS account of its own and only it may submit
// its jobs. What the bench learns about its jobs it learns from their
// events (one ordered consumer on the account's job events), never by
// polling. At the end it cancels whatever of its jobs has not ended, takes
// the remaining credits of an account it created back (gpuq has no way to
// delete an account) and deletes its scratch stream and bucket.
//
// Its job commands (submit, cancel) go over the wire the way
// [client.Client.Submit] sends them (wire.EncodeSubmit, a message id with
// a nonce, a publish to the command stream), and their answers come
// through the same one follower that times the jobs' starts and ends.
// (client.Submit's calls now share a follower too; the bench keeps its own
// so one consumer serves both the answers and the timings.)
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// AccountPrefix starts the name of every account a bench creates.
const AccountPrefix = "gpuq-bench-"

// Config says what a [Run] does. Zero values take the defaults.
type Config struct {
	// Jobs is the number of jobs of the e2e phase and of the backlog phase
	// each (default 5000; negative skips both phases).
	Jobs int
	// Probes is the number of idle-latency probes (default 50; negative
	// skips the phase).
	Probes int
	// Submitters is the number of concurrent submitters (default 8).
	Submitters int
	// Warmup is the number of jobs run, unmeasured, before the first phase
	// (default 8; negative: none).
	Warmup int
	// JSOps is the number of async publishes, and of KV updates, of the
	// JetStream phase (default 50000; negative skips it).
	JSOps int
	// Account, when set, is an existing account to run the jobs in, one the
	// connection may submit to, with the credits they cost (1 each); the
	// bench then creates no account and leaves its credits alone. Empty
	// creates gpuq-bench-<random>, which takes an admin's rights.
	Account string
	// Command is what each job runs (default: true).
	Command []string
	// AnswerTimeout bounds the wait for the scheduler's answer to each
	// command (default 30s).
	AnswerTimeout time.Duration
	// PhaseTimeout bounds the wait for one phase's jobs to settle (default
	// 10 minutes).
	PhaseTimeout time.Duration
	// Progress, if set, is called with a line saying how far the run is,
	// at each phase's start and about once a second.
	Progress func(line string)
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0
		}
	}
	def(&c.Jobs, 5000)
	def(&c.Probes, 50)
	def(&c.Warmup, 8)
	def(&c.JSOps, 50000)
	if c.Submitters <= 0 {
		c.Submitters = 8
	}
	if len(c.Command) == 0 {
		c.Command = []string{"true"}
	}
	if c.PhaseTimeout <= 0 {
		c.PhaseTimeout = 10 * time.Minute
	}
	if c.AnswerTimeout <= 0 {
		c.AnswerTimeout = 30 * time.Second
	}
	if c.Progress == nil {
		c.Progress = func(string) {}
	}
	return c
}

// Result is what a [Run] measured. Rates are per second, latencies in
// milliseconds; a phase that was skipped is nil.
type Result struct {
	Account    string
	Jobs       int
	Probes     int
	Submitters int
	Idle       *Idle
	E2E        *E2E
	Backlog    *Backlog
	JS         *JS
	// Succeeded is the number of the bench's jobs that succeeded (warm-up
	// included); Charged is what the account was charged for them, read
	// from its record. Each job costs 1 credit, so they must be equal.
	Succeeded int
	Charged   ledger.Credits
	// InvariantOK: every job of the bench succeeded, the account was
	// charged exactly once for each, and (in an account the bench created)
	// nothing was left reserved.
	InvariantOK bool
	// Cleanup says what the clean-up left behind ("" when nothing).
	Cleanup string
	// JSSkipped says why the JetStream phase could not run (the
	// connection may not create a stream or bucket), "" when it ran.
	JSSkipped string
	// Created: the bench created Account (else it was given one).
	Created bool
}

// Idle is the idle phase: one job at a time.
type Idle struct {
	Probes               int
	StartP50, StartP99   float64
	SettleP50, SettleP99 float64
	SettleP90, StartMax  float64
	StartMissing         int // probes whose started event never came (settled straight away)
}

// E2E is the end-to-end phase.
type E2E struct {
	SubmitPerS, E2EPerS  float64
	WallS                float64
	SubmitCallP50        float64
	SubmitCallP99        float64
	StartP50, StartP99   float64
	SettleP50, SettleP99 float64
	SettleMax            float64
}

// Backlog is the backlog phase.
type Backlog struct {
	SubmitPerS, DrainPerS float64
	WallS                 float64
}

// JS is the JetStream limit of the server.
type JS struct {
	PublishPerS float64
	KVCASPerS   float64
	Replicas    int
}

// ErrNotPermitted is wrapped by the error of a run whose connection may not
// create the bench's account: a bench needs an admin's credentials.
var ErrNotPermitted = errors.New("bench: not permitted")

// Run benchmarks the installation that c talks to over nc. It returns
// what it measured even when a later phase fails, with that phase's error.
// The clean-up runs whatever happens, on a context of its own.
func Run(ctx context.Context, nc *nats.Conn, c *client.Client, cfg Config) (*Result, error) {
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	tag := randHex(4)
	b := &run{cfg: cfg, c: c, js: js, n: c.Names(), tag: "gb" + tag, account: cfg.Account,
		jobs: map[string]*job{}, changed: make(chan struct{}, 1),
		waiting: map[akey]chan answer{}, early: map[akey]answer{}, answered: map[akey]bool{},
		settledN: map[string]int{}, failed: map[string]string{}}
	total := cfg.Warmup + cfg.Probes + 2*cfg.Jobs // each job costs 1
	if b.account == "" {
		b.account, b.created = AccountPrefix+tag, true
		b.balance = ledger.Credits(total)
		_, err = c.Admin(ctx, ledger.Admin{Account: b.account, ID: "bench-create", Op: ledger.OpCreate, Balance: b.balance})
		var rej *client.RejectedError
		if errors.As(err, &rej) {
			return nil, fmt.Errorf("create the bench's account %s: %w", b.account, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: create the bench's account %s: %v (a bench creates an account of its own, "+
				"which takes an admin's credentials, or give it an account of yours to submit to)", ErrNotPermitted, b.account, err)
		}
	} else {
		a, err := c.Account(ctx, b.account)
		if err != nil {
			return nil, fmt.Errorf("read the account %s to bench in: %w", b.account, err)
		}
		if a.Available() < ledger.Credits(total) {
			return nil, fmt.Errorf("account %s has %d credits available; the bench's %d jobs cost 1 each", b.account, a.Available(), total)
		}
		b.balance = a.Balance
	}
	res := &Result{Account: b.account, Created: b.created, Jobs: cfg.Jobs, Probes: cfg.Probes, Submitters: cfg.Submitters}
	defer func() {
		res.Cleanup = b.cleanup()
	}()
	if err := b.follow(ctx); err != nil {
		return res, err
	}
	err = b.phases(ctx, res)
	if err == nil {
		err = b.check(ctx, res)
	}
	return res, err
}

func (b *run) phases(ctx context.Context, res *Result) error {
	cfg := b.cfg
	if cfg.Warmup > 0 {
		cfg.Progress(fmt.Sprintf("warm-up: %d jobs", cfg.Warmup))
		ids := b.ids("w", cfg.Warmup)
		if _, _, err := b.submitAll(ctx, ids, nil); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if err := b.waitSettled(ctx, "warm-up", ids); err != nil {
			return err
		}
	}
	if cfg.Probes > 0 {
		idle, err := b.idle(ctx)
		if err != nil {
			return err
		}
		res.Idle = idle
	}
	if cfg.Jobs > 0 {
		e2e, err := b.e2e(ctx)
		if err != nil {
			return err
		}
		res.E2E = e2e
		bl, err := b.backlog(ctx)
		if err != nil {
			return err
		}
		res.Backlog = bl
	}
	if cfg.JSOps > 0 {
		cfg.Progress(fmt.Sprintf("jetstream: %d async publishes, %d KV updates", cfg.JSOps, cfg.JSOps))
		lim, err := JetStreamLimit(ctx, b.js, b.n, b.tag, cfg.JSOps)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Where gpuq's account is the only one with JetStream (deploy/),
			// no user may make a stream: the jobs' figures stand alone.
			res.JSSkipped = err.Error()
			cfg.Progress("jetstream: skipped: " + err.Error())
		}
		res.JS = lim
	}
	return nil
}

// run is one bench run's state.
type run struct {
	cfg     Config
	c       *client.Client
	js      jetstream.JetStream
	n       subjects.Names
	tag     string // job ids start with it
	account string
	created bool           // the bench created the account
	balance ledger.Credits // the account's balance before the first job

	mu   sync.Mutex
	jobs map[string]*job
	// waiting are the commands waiting for their answers, early the
	// answers that came before their command's ack, answered the answers
	// given (any later event of the same key is not one).
	waiting  map[akey]chan answer
	early    map[akey]answer
	answered map[akey]bool
	// settledN counts the settled jobs of each phase (phaseOf), failed
	// names the first of each that did not succeed.
	settledN map[string]int
	failed   map[string]string
	// changed is signalled (without blocking) when a job settles.
	changed    chan struct{}
	followErr  error
	stopFollow func()
}

// job is what the bench knows of one of its jobs. Times are this
// process's clock.
type job struct {
	submitted time.Time
	answered  time.Time // the submit call returned
	started   time.Time
	settled   time.Time
	final     ledger.EventType
}

func (b *run) ids(phase string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%s-%d", b.tag, phase, i)
	}
	return ids
}

// follow starts the one follower of the account's events. Its consumer
// delivers what is published from now on, and it exists once Messages
// returns (as client.Submit relies on), before the first job is
// submitted: no event of the bench's jobs can slip past.
func (b *run) follow(ctx context.Context) error {
	filter := b.n.AccountEvents(b.account)
	cons, err := b.js.OrderedConsumer(ctx, b.n.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, NamePrefix: client.ConsumerName(), DeliverPolicy: jetstream.DeliverNewPolicy,
		InactiveThreshold: 10 * time.Second}) // gone soon after the bench, as the client's consumers are
	if err != nil {
		return fmt.Errorf("follow %s: %w", filter, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("follow %s: %w", filter, err)
	}
	done := make(chan struct{})
	var once sync.Once
	b.stopFollow = func() {
		once.Do(func() {
			it.Stop()
			<-done
		})
	}
	invalid, accountEv := b.n.InvalidEvent(b.account), b.n.AccountEvent(b.account)
	go func() {
		defer close(done)
		for {
			m, err := it.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					b.fail(fmt.Errorf("follow %s: %w", filter, err))
				}
				return
			}
			switch m.Subject() {
			case accountEv:
				continue
			case invalid:
				ev, err := wire.DecodeInvalidEvent(m.Data())
				if err != nil {
					b.fail(fmt.Errorf("event on %s: %w", m.Subject(), err))
					return
				}
				b.answer(akey{ev.Seq, ev.Job}, answer{invalid: &ev})
				continue
			}
			ev, err := wire.DecodeJobEvent(m.Data())
			if err != nil {
				b.fail(fmt.Errorf("event on %s: %w", m.Subject(), err))
				return
			}
			b.event(ev, time.Now())
		}
	}()
	return nil
}

func (b *run) fail(err error) {
	b.mu.Lock()
	if b.followErr == nil {
		b.followErr = err
	}
	b.mu.Unlock()
	b.signal()
}

func (b *run) signal() {
	select {
	case b.changed <- struct{}{}:
	default:
	}
}

// answer is the scheduler's answer to one command of the bench: the first
// event the command caused (its seq is the command's), or its rejection as
// invalid.
type answer struct {
	job     wire.JobEvent
	invalid *wire.InvalidEvent
}

// akey names the answer to a command: the command's seq and the job it
// is about (one command, such as the cancel of the backlog's gate, may
// cause events of many jobs).
type akey struct {
	seq uint64
	job string
}

// answer hands a to the command waiting for k, or keeps it until the
// command's publisher asks for it (an answer may come before the publish's
// ack). Only the first event of k is an answer.
func (b *run) answer(k akey, a answer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch, ok := b.waiting[k]; ok {
		delete(b.waiting, k)
		b.answered[k] = true
		ch <- a
		return
	}
	if _, dup := b.early[k]; !dup && !b.answered[k] {
		b.early[k] = a
	}
}

// event records what ev says about a job of the bench, and hands it to
// the command that caused it as its answer if it is waiting for one.
func (b *run) event(ev wire.JobEvent, at time.Time) {
	b.mu.Lock()
	j := b.jobs[ev.Job]
	if j == nil {
		// An event can come before the answer, never before the command
		// was sent: submit records the job first.
		j = &job{}
		b.jobs[ev.Job] = j
	}
	switch {
	case ev.Type == ledger.EventStarted && j.started.IsZero():
		j.started = at
	case client.Final(ev) && j.settled.IsZero():
		j.settled, j.final = at, ev.Type
		ph := phaseOf(ev.Job)
		b.settledN[ph]++
		if ev.Type != ledger.EventSucceeded && b.failed[ph] == "" {
			b.failed[ph] = ev.Job
		}
		b.signal()
	}
	b.mu.Unlock()
	switch ev.Type {
	case ledger.EventAccepted, ledger.EventHeld, ledger.EventRejected, ledger.EventIgnored,
		ledger.EventCancelled, ledger.EventCancelRequested:
		// What a submit or a cancel is answered with; the rest (dispatched,
		// started, succeeded, ...) answers none of the bench's commands.
		b.answer(akey{ev.Seq, ev.Job}, answer{job: ev})
	}
}

// command publishes msg, a command about job, to the command log, and
// waits for the scheduler's answer through the follower: what
// client.Submit does, without a consumer of its own for each call (see
// the package doc).
func (b *run) command(ctx context.Context, msg wire.Message, job string) (answer, error) {
	msg = wire.WithNonce(msg, randHex(12))
	m := nats.NewMsg(msg.Subject)
	m.Data = msg.Data
	m.Header.Set(subjects.MsgIDHeader, msg.MsgID)
	ack, err := b.js.PublishMsg(ctx, m, jetstream.WithExpectStream(b.n.CmdStream()))
	if err != nil {
		return answer{}, fmt.Errorf("publish to %s: %w", msg.Subject, err)
	}
	k := akey{ack.Sequence, job}
	ch := make(chan answer, 1)
	b.mu.Lock()
	if a, ok := b.early[k]; ok {
		delete(b.early, k)
		b.answered[k] = true
		b.mu.Unlock()
		return a, nil
	}
	b.waiting[k] = ch
	b.mu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, b.cfg.AnswerTimeout)
	defer cancel()
	select {
	case a := <-ch:
		return a, nil
	case <-wctx.Done():
		b.mu.Lock()
		delete(b.waiting, k)
		b.mu.Unlock()
		if ctx.Err() != nil {
			return answer{}, ctx.Err()
		}
		return answer{}, fmt.Errorf("command %d: no answer from the scheduler within %v: %w", ack.Sequence, b.cfg.AnswerTimeout, client.ErrNoAnswer)
	}
}

// jobCommand sends msg, a command about a job, and returns its answer; an
// invalid command is an error.
func (b *run) jobCommand(ctx context.Context, msg wire.Message, job string) (wire.JobEvent, error) {
	a, err := b.command(ctx, msg, job)
	if err != nil {
		return wire.JobEvent{}, err
	}
	if a.invalid != nil {
		return wire.JobEvent{}, fmt.Errorf("rejected (%s): %s", a.invalid.Reason, a.invalid.Message)
	}
	return a.job, nil
}

// submitAll submits the jobs ids from the configured number of concurrent
// submitters, each job with the dependencies afterAny; it returns the time
// the first call began and the last one returned.
func (b *run) submitAll(ctx context.Context, ids []string, afterAny []string) (first, last time.Time, _ error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, b.cfg.Submitters)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first = time.Now()
	for range min(b.cfg.Submitters, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) || ctx.Err() != nil {
					return
				}
				if err := b.submit(ctx, ledger.Submit{ID: ids[i], Cost: 1, AfterAny: afterAny, Name: "gpuq bench"}, ledger.EventAccepted); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	last = time.Now()
	close(errs)
	return first, last, <-errs
}

// submit submits s, a job of the bench's account on 1 GPU that runs the
// bench's command, records when, and checks that the answer is want.
func (b *run) submit(ctx context.Context, s ledger.Submit, want ledger.EventType) error {
	s.Account, s.GPUs, s.Command = b.account, 1, b.cfg.Command
	msg, err := wire.EncodeSubmit(b.n, s)
	if err != nil {
		return fmt.Errorf("submit %s: %w", s.ID, err)
	}
	b.mu.Lock()
	j := b.jobs[s.ID]
	if j == nil {
		j = &job{}
		b.jobs[s.ID] = j
	}
	j.submitted = time.Now()
	b.mu.Unlock()
	ev, err := b.jobCommand(ctx, msg, s.ID)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("submit %s: %w (may this connection submit jobs of account %s? where each tenant is a "+
			"NATS account of its own (deploy/), only the tenant may: run the bench as one, with --account)", s.ID, err, b.account)
	}
	if err != nil {
		return fmt.Errorf("submit %s: %w", s.ID, err)
	}
	b.mu.Lock()
	j.answered = time.Now()
	b.mu.Unlock()
	if ev.Type != want {
		return fmt.Errorf("submit %s: %s (%s: %s), want %s", s.ID, ev.Type, ev.Reason, ev.Message, want)
	}
	return nil
}

// cancel cancels job id of the bench and returns the answer.
func (b *run) cancel(ctx context.Context, id string) (wire.JobEvent, error) {
	msg, err := wire.EncodeCancel(b.n, ledger.Cancel{Account: b.account, Job: id})
	if err != nil {
		return wire.JobEvent{}, fmt.Errorf("cancel %s: %w", id, err)
	}
	ev, err := b.jobCommand(ctx, msg, id)
	if err != nil {
		return ev, fmt.Errorf("cancel %s: %w", id, err)
	}
	return ev, nil
}

// waitSettled waits until every job of ids, all of one phase, has
// settled; it fails on the first that did not succeed. It counts what the
// follower counted (settled by phase), so a wait costs nothing per job.
func (b *run) waitSettled(ctx context.Context, what string, ids []string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.PhaseTimeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ph := phaseOf(ids[0])
	// The jobs of ph that settled before these were submitted (the idle
	// probes wait one at a time).
	b.mu.Lock()
	before := b.settledN[ph]
	for _, id := range ids {
		if j := b.jobs[id]; j != nil && !j.settled.IsZero() {
			before--
		}
	}
	b.mu.Unlock()
	for {
		b.mu.Lock()
		n, err := b.settledN[ph]-before, b.followErr
		if id := b.failed[ph]; id != "" && err == nil {
			err = fmt.Errorf("%s: job %s ended %s, want succeeded (see gpuq job %s)", what, id, b.jobs[id].final, id)
		}
		b.mu.Unlock()
		if err != nil {
			return err
		}
		if n >= len(ids) {
			return nil
		}
		select {
		case <-b.changed:
		case <-tick.C:
			if len(ids) > 1 {
				b.cfg.Progress(fmt.Sprintf("%s: %d of %d jobs settled", what, n, len(ids)))
			}
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.Canceled) {
				return fmt.Errorf("%s: interrupted with %d of %d jobs settled: %w", what, n, len(ids), ctx.Err())
			}
			return fmt.Errorf("%s: %d of %d jobs settled within %v: %w", what, n, len(ids), b.cfg.PhaseTimeout, ctx.Err())
		}
	}
}

// phaseOf is the phase of the bench's job id: <tag>-<phase>-<n>, or
// <tag>-gate.
func phaseOf(id string) string {
	_, rest, _ := strings.Cut(id, "-")
	ph, _, _ := strings.Cut(rest, "-")
	return ph
}

// times returns submit → started and submit → settled of ids in ms, and
// the last settle time.
func (b *run) times(ids []string) (start, settle []float64, missing int, last time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		j := b.jobs[id]
		if j.started.IsZero() {
			missing++
		} else {
			start = append(start, ms(j.started.Sub(j.submitted)))
		}
		settle = append(settle, ms(j.settled.Sub(j.submitted)))
		if j.settled.After(last) {
			last = j.settled
		}
	}
	return start, settle, missing, last
}

func (b *run) idle(ctx context.Context) (*Idle, error) {
	cfg := b.cfg
	ids := b.ids("i", cfg.Probes)
	for i, id := range ids {
		cfg.Progress(fmt.Sprintf("idle: probe %d of %d", i+1, len(ids)))
		if err := b.submit(ctx, ledger.Submit{ID: id, Cost: 1, Name: "gpuq bench"}, ledger.EventAccepted); err != nil {
			return nil, fmt.Errorf("idle: %w", err)
		}
		if err := b.waitSettled(ctx, "idle", ids[i:i+1]); err != nil {
			return nil, err
		}
	}
	start, settle, missing, _ := b.times(ids)
	return &Idle{Probes: len(ids), StartP50: pct(start, 50), StartP99: pct(start, 99), StartMax: pct(start, 100),
		SettleP50: pct(settle, 50), SettleP90: pct(settle, 90), SettleP99: pct(settle, 99), StartMissing: missing}, nil
}

func (b *run) e2e(ctx context.Context) (*E2E, error) {
	cfg := b.cfg
	cfg.Progress(fmt.Sprintf("e2e: %d jobs from %d submitters", cfg.Jobs, cfg.Submitters))
	ids := b.ids("e", cfg.Jobs)
	first, last, err := b.submitAll(ctx, ids, nil)
	if err != nil {
		return nil, fmt.Errorf("e2e: %w", err)
	}
	if err := b.waitSettled(ctx, "e2e", ids); err != nil {
		return nil, err
	}
	start, settle, _, settledAt := b.times(ids)
	calls := b.calls(ids)
	wall := settledAt.Sub(first).Seconds()
	return &E2E{
		SubmitPerS: rate(len(ids), last.Sub(first)), E2EPerS: rate(len(ids), settledAt.Sub(first)), WallS: round(wall, 3),
		SubmitCallP50: pct(calls, 50), SubmitCallP99: pct(calls, 99),
		StartP50: pct(start, 50), StartP99: pct(start, 99),
		SettleP50: pct(settle, 50), SettleP99: pct(settle, 99), SettleMax: pct(settle, 100),
	}, nil
}

// calls returns how long each submit call of ids took, in ms.
func (b *run) calls(ids []string) []float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]float64, 0, len(ids))
	for _, id := range ids {
		out = append(out, ms(b.jobs[id].answered.Sub(b.jobs[id].submitted)))
	}
	return out
}

func (b *run) backlog(ctx context.Context) (*Backlog, error) {
	cfg := b.cfg
	gate := b.tag + "-gate"
	cfg.Progress(fmt.Sprintf("backlog: %d jobs queued behind %s", cfg.Jobs, gate))
	// The gate costs more than any account can have, and is held for
	// credits (Hold) rather than rejected: it never runs, so every job
	// after it (afterany) waits, reserved and pending, until it is
	// cancelled.
	if err := b.submit(ctx, ledger.Submit{ID: gate, Cost: ledger.MaxCredits, Hold: true, Name: "gpuq bench gate"}, ledger.EventHeld); err != nil {
		return nil, fmt.Errorf("backlog: the gate: %w", err)
	}
	ids := b.ids("b", cfg.Jobs)
	first, last, err := b.submitAll(ctx, ids, []string{gate})
	if err != nil {
		return nil, fmt.Errorf("backlog: %w", err)
	}
	b.mu.Lock()
	for _, id := range ids {
		if j := b.jobs[id]; !j.settled.IsZero() {
			b.mu.Unlock()
			return nil, fmt.Errorf("backlog: job %s ended %s before its gate was cancelled", id, j.final)
		}
	}
	b.mu.Unlock()
	cfg.Progress(fmt.Sprintf("backlog: draining %d jobs", cfg.Jobs))
	t0 := time.Now()
	if ev, err := b.cancel(ctx, gate); err != nil {
		return nil, fmt.Errorf("backlog: %w", err)
	} else if ev.Type != ledger.EventCancelled {
		return nil, fmt.Errorf("backlog: cancel the gate %s: %s (%s), want cancelled", gate, ev.Type, ev.Message)
	}
	if err := b.waitSettled(ctx, "backlog", ids); err != nil {
		return nil, err
	}
	_, _, _, settledAt := b.times(ids)
	return &Backlog{SubmitPerS: rate(len(ids), last.Sub(first)), DrainPerS: rate(len(ids), settledAt.Sub(t0)),
		WallS: round(settledAt.Sub(t0).Seconds(), 3)}, nil
}

// check reads the account back: it was charged once for each job that
// succeeded (1 credit each) and holds no reservation (in an account the
// bench was given, nothing else may have moved it meanwhile).
func (b *run) check(ctx context.Context, res *Result) error {
	b.mu.Lock()
	for _, j := range b.jobs {
		if j.final == ledger.EventSucceeded {
			res.Succeeded++
		}
	}
	want := len(b.jobs)
	if b.cfg.Jobs > 0 {
		want-- // the gate, cancelled
	}
	b.mu.Unlock()
	// The account's record trails its events by at most one flush.
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := b.c.Account(ctx, b.account)
		if err != nil {
			return fmt.Errorf("read the bench's account: %w", err)
		}
		res.Charged = b.balance - a.Balance
		// What others reserve in an account the bench was given is theirs.
		res.InvariantOK = (a.Reserved == 0 || !b.created) && res.Charged == ledger.Credits(res.Succeeded) && res.Succeeded == want
		if res.InvariantOK || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !res.InvariantOK && b.created {
		// In an account of the user's own, other jobs or a refill may
		// move the balance too: there it is reported, not an error.
		return fmt.Errorf("ledger check: %d of %d jobs succeeded, account %s charged %d", res.Succeeded, want, b.account, res.Charged)
	}
	return nil
}

// cleanup cancels the jobs of the bench that have not ended, waits for
// them to end, and takes the account's remaining credits back. It returns
// what it could not clean up, or "".
func (b *run) cleanup() string {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b.mu.Lock()
	var open []string
	for id, j := range b.jobs {
		if j.settled.IsZero() {
			open = append(open, id)
		}
	}
	b.mu.Unlock()
	slices.Sort(open)
	var problems []string
	if len(open) > 0 {
		b.cfg.Progress(fmt.Sprintf("clean-up: cancelling %d jobs", len(open)))
		var next atomic.Int64
		var wg sync.WaitGroup
		var pmu sync.Mutex
		for range min(b.cfg.Submitters, len(open)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < len(open); i = int(next.Add(1)) - 1 {
					ev, err := b.cancel(ctx, open[i])
					if err != nil {
						pmu.Lock()
						problems = append(problems, fmt.Sprintf("cancel %s: %v", open[i], err))
						pmu.Unlock()
						continue
					}
					if ev.Type == ledger.EventIgnored && (ev.Reason == ledger.ReasonUnknownJob || ev.Reason == ledger.ReasonAlreadyTerminal) {
						// Ended, or never known (its submission did not
						// reach the fold): no event is coming.
						b.event(wire.JobEvent{Job: open[i], Type: ledger.EventCancelled}, time.Now())
					}
				}
			}()
		}
		wg.Wait()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		err := b.waitEnded(wctx, open)
		wcancel()
		if err != nil {
			problems = append(problems, err.Error())
		}
	}
	if b.stopFollow != nil {
		b.stopFollow()
	}
	if !b.created {
		return strings.Join(problems, "; ")
	}
	// Take back what is left, once nothing is reserved.
	for try := 0; ; try++ {
		a, err := b.c.Account(ctx, b.account)
		if err != nil {
			problems = append(problems, fmt.Sprintf("read account %s: %v", b.account, err))
			break
		}
		if a.Reserved == 0 {
			if a.Balance > 0 {
				if _, err := b.c.Admin(ctx, ledger.Admin{Account: b.account, ID: "bench-close", Op: ledger.OpGrant, Amount: -a.Balance}); err != nil {
					problems = append(problems, fmt.Sprintf("take back %d credits of %s: %v", a.Balance, b.account, err))
				}
			}
			break
		}
		if try == 100 {
			problems = append(problems, fmt.Sprintf("account %s still has %d reserved", b.account, a.Reserved))
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return strings.Join(problems, "; ")
}

// waitEnded waits until each of ids has settled, however it ended.
func (b *run) waitEnded(ctx context.Context, ids []string) error {
	for {
		b.mu.Lock()
		n := 0
		for _, id := range ids {
			if !b.jobs[id].settled.IsZero() {
				n++
			}
		}
		b.mu.Unlock()
		if n == len(ids) {
			return nil
		}
		select {
		case <-b.changed:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("clean-up: %d of %d cancelled jobs ended: %w", n, len(ids), ctx.Err())
		}
	}
}

func randHex(n int) string {
	p := make([]byte, n)
	if _, err := rand.Read(p); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(p)
}
