package scheduler

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// ErrStopped is returned by [Service.Run] when a test hook stopped it, as a
// crash would: nothing more was written and the lease was not released.
var ErrStopped = errors.New("scheduler: stopped by a test hook")

// Config configures a [Service]. Store, Lease, Log, Publisher and Hosts are
// required; every other field's zero value means its default.
type Config struct {
	Store      Store
	Lease      Lease
	CommandLog CommandLog
	Publisher  Publisher
	Hosts      HostWatcher

	// Names are the installation's subject names. Defaults to
	// subjects.Default.
	Names subjects.Names
	// Core tunes the decisions.
	Core CoreConfig
	// Logger receives the service's logs. Defaults to discarding them.
	Logger *slog.Logger
	// NowFunc is the clock for leases and decisions (never for the fold,
	// which uses each command's server timestamp). Defaults to time.Now.
	NowFunc func() time.Time
	// MaxBatch is the most commands one flush carries: the fold goes on
	// while a flush is written until the next holds this many. Defaults
	// to 1024.
	MaxBatch int
	// DecideInterval is how often the scheduler decides when no command
	// arrives, so retry delays end and lost hosts are noticed. Defaults to
	// 500ms.
	DecideInterval time.Duration
	// RetainApplied is how long applied commands stay in the log before the
	// scheduler trims them. Entries not yet applied are never trimmed.
	// Defaults to 24h; a negative value disables trimming.
	RetainApplied time.Duration
	// StepDownWait is how long a scheduler whose term ended (the lease
	// lost, a write fenced or failed) waits before contending again; it
	// doubles after each term in a row that fails before leading for a
	// lease TTL, up to 15s. Defaults to 1s.
	StepDownWait time.Duration
	// MaxMessageBytes is the largest effect message (body) the scheduler
	// sends; a command whose effect is larger is refused (see
	// [Store.Refuse]) rather than retried forever. Set it to what the
	// server accepts when its max_payload is below the default. Defaults to
	// wire.MaxMessageBytes less 4 KiB for the subject and headers.
	MaxMessageBytes int
	// Metrics receives what the service measures (see [Metrics]).
	// Defaults to nil: nothing is measured.
	Metrics Metrics
	// Facts, if set, receives the leader's read-optimised facts (see the
	// package doc, # Facts): its configuration, its latest pass, and why
	// each of the first FactWindow waiting jobs waits. Defaults to none.
	Facts FactStore
	// Name is this scheduler's name in the config fact. Defaults to "".
	Name string
	// FactWindow is the most waiting jobs one pass explains. Defaults to
	// 1000.
	FactWindow int
	// FactWrites is the most fact writes a second. Defaults to 200.
	FactWrites int
	// FactInterval is the least time between two passes that explain the
	// waiting jobs. Defaults to 1s.
	FactInterval time.Duration
	// Hooks are for tests.
	Hooks Hooks
}

// Hooks let tests observe a scheduler and stop it at exact points of a
// flush. A hook that returns an error makes [Service.Run] return
// [ErrStopped] at once, as if the process had been killed there: nothing more
// is written and the lease is not released.
type Hooks struct {
	// CutPersist is called with the number of records a flush is about to
	// write; if it returns n below that, only the first n are written and
	// the service stops.
	CutPersist func(lastSeq uint64, records int) int
	// AfterPersist runs after a flush's records are written, before its
	// effects are sent.
	AfterPersist func(lastSeq uint64) error
	// AfterEffects runs after a flush's effects are sent, before the
	// checkpoint moves.
	AfterEffects func(lastSeq uint64) error
	// Checkpointed runs after each checkpoint, with the checkpointed
	// sequence.
	Checkpointed func(seq uint64)
	// Leading runs when the service has loaded the view as leader.
	Leading func()
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("scheduler: Config.Store is required")
	case c.Lease == nil:
		return errors.New("scheduler: Config.Lease is required")
	case c.CommandLog == nil:
		return errors.New("scheduler: Config.Log is required")
	case c.Publisher == nil:
		return errors.New("scheduler: Config.Publisher is required")
	case c.Hosts == nil:
		return errors.New("scheduler: Config.Hosts is required")
	}
	if c.Names == (subjects.Names{}) {
		c.Names = subjects.Default
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.NowFunc == nil {
		c.NowFunc = time.Now
	}
	if c.MaxBatch <= 0 {
		c.MaxBatch = 1024
	}
	if c.DecideInterval <= 0 {
		c.DecideInterval = 500 * time.Millisecond
	}
	if c.RetainApplied == 0 {
		c.RetainApplied = 24 * time.Hour
	}
	if c.StepDownWait <= 0 {
		c.StepDownWait = time.Second
	}
	if c.MaxMessageBytes <= 0 {
		c.MaxMessageBytes = wire.MaxMessageBytes - 4<<10
	}
	if c.FactWindow <= 0 {
		c.FactWindow = 1000
	}
	if c.FactWrites <= 0 {
		c.FactWrites = 200
	}
	if c.FactInterval <= 0 {
		c.FactInterval = time.Second
	}
	if ttl := c.Lease.TTL(); ttl < time.Second {
		return fmt.Errorf("scheduler: lease TTL %v must be at least 1s", ttl)
	}
	return nil
}

// Service is the scheduler process: it contends for the leader lease and,
// while it holds it, folds the command log into the ledger and decides what
// runs where. Run's goroutine folds and decides; while it leads, three more
// of its own write its flushes (two stages, see pipeline.go) and store its
// decisions, and end with the term.
type Service struct {
	cfg Config
	log *slog.Logger
	// heldUntil is when the lease may lapse, as far as this leader knows:
	// the TTL from when its last renewal that succeeded was sent. The
	// flusher and the decisions' publisher write nothing past it, though
	// Run's goroutine is held up in a renewal meanwhile.
	heldUntil atomic.Pointer[time.Time]
}

// New returns a service, or an error naming the first bad field of cfg.
func New(cfg Config) (*Service, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, log: cfg.Logger.With("component", "scheduler")}, nil
}

// Run contends for the lease and leads while it holds it, until ctx ends.
// It never gives up on a failure that time may mend: while the lease cannot
// be reached (the server away, a lost quorum) it keeps trying with backoff;
// a leader whose term fails (the lease lost, a write fenced or timed out,
// the log or the hosts watch ended, the view not loaded) steps down and
// contends again, waiting longer after each term in a row that fails early.
// Each change of state is logged once, not once per try.
//
// Run returns nil when ctx ends, [ErrStopped] when a test hook stopped it,
// an error wrapping [ErrMisconfigured] for a setup no retry can mend, and
// one wrapping [ErrLogGap] when the command log has lost entries the ledger
// has not applied, found at the same place by gapTerms terms in a row: no
// scheduler can fold past them.
func (s *Service) Run(ctx context.Context) error {
	var st runState
	for {
		if err := s.contend(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.ErrorContext(ctx, "cannot contend for the leader lease; stopping", slog.Any("err", err))
			return fmt.Errorf("acquire the leader lease: %w", err)
		}
		began := s.cfg.NowFunc()
		err := s.lead(ctx, &st)
		if errors.Is(err, ErrStopped) {
			return err
		}
		s.refuse(ctx, err)
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if rerr := s.cfg.Lease.Release(rctx); rerr != nil {
			s.log.Log(ctx, st.level(slog.LevelWarn), "release the leader lease", slog.Any("err", rerr))
		}
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		if st.steady || s.cfg.NowFunc().Sub(began) >= s.cfg.Lease.TTL() {
			st.failed = 0 // the term led steadily before it failed
		}
		st.failed++
		st.steady = false
		var gap *logGap
		if errors.As(err, &gap) {
			if st.gapAt == gap.after {
				st.gaps++
			} else {
				st.gapAt, st.gaps = gap.after, 1
			}
			if st.gaps >= gapTerms {
				s.log.ErrorContext(ctx, "the command log has lost entries the ledger has not applied; no scheduler can fold past them, so this one stops (restore the entries, or rebuild the ledger from a log that has them)",
					slog.Uint64("missing_from", gap.after+1), slog.Uint64("missing_to", gap.next-1), slog.Int("terms", st.gaps))
				return err
			}
		} else {
			st.gaps = 0
		}
		wait := s.stepDownWait(st.failed)
		if st.failed == 1 {
			s.log.WarnContext(ctx, "stepped down; contending again", slog.Any("err", err), slog.Duration("wait", wait))
		} else {
			s.log.DebugContext(ctx, "stepped down again", slog.Any("err", err), slog.Int("terms", st.failed), slog.Duration("wait", wait))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// refuse records the refusal of the command whose outcome err says cannot
// be stored, if it says so: the next term answers that command with a
// rejection instead of applying it, so no single command can stop the fold.
// A refusal that cannot be recorded (the lease lost meanwhile, or it may
// have lapsed: the refusal is written only while the lease is surely held)
// is left to the next term, which meets the same command again.
func (s *Service) refuse(ctx context.Context, err error) {
	var tl *TooLargeError
	if !errors.As(err, &tl) || ctx.Err() != nil {
		return
	}
	why := tl.Error()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if rerr := (leased{s: s}).refuse(rctx, tl.Seq, why); rerr != nil {
		s.log.WarnContext(ctx, "cannot record the refusal of a command whose outcome the store refuses; the next term meets it again",
			slog.Uint64("seq", tl.Seq), slog.String("why", why), slog.Any("err", rerr))
		return
	}
	s.log.ErrorContext(ctx, "refusing a command: the store will not take its outcome; it is answered with a rejection and the fold moves on",
		slog.Uint64("seq", tl.Seq), slog.String("why", why))
}

// gapTerms is how many terms in a row must find the command log's gap at the
// same place before Run gives up on it: a gap a new follower does not see
// again was a fault of the reading, not of the log.
const gapTerms = 3

// stepDownWaitMax bounds the wait between terms that fail one after another.
const stepDownWaitMax = 15 * time.Second

// runState is what Run remembers across terms.
type runState struct {
	// failed counts the terms in a row that failed before leading
	// steadily; while it is above zero, the logs of each new term are
	// quieter.
	failed int
	// steady is set once the current term has led for a lease TTL.
	steady bool
	// gaps counts the terms in a row that found the log's gap after
	// gapAt.
	gaps  int
	gapAt uint64
}

// level is lvl, or Debug while terms keep failing early: the first failure
// and the first retry were logged, and each further retry is not news.
func (st *runState) level(lvl slog.Level) slog.Level {
	if st.failed >= 2 {
		return slog.LevelDebug
	}
	return lvl
}

// stepDownWait is the wait before contending again after failed terms in a
// row: StepDownWait, doubling with each, at most stepDownWaitMax.
func (s *Service) stepDownWait(failed int) time.Duration {
	d := s.cfg.StepDownWait
	for i := 1; i < failed && d < stepDownWaitMax; i++ {
		d *= 2
	}
	return min(d, max(stepDownWaitMax, s.cfg.StepDownWait))
}

// Backoff between tries to reach the lease while it cannot be reached.
const (
	contendRetryMin = 100 * time.Millisecond
	contendRetryMax = 5 * time.Second
)

// contend blocks until this scheduler holds the lease, ctx ends, or the
// lease turns out misconfigured. While another scheduler holds it, it tries
// again every quarter TTL (at most every 250ms); while the lease cannot be
// reached, it tries again with backoff for as long as it takes. It logs each
// change once: cannot reach the lease, reachable again, standing by.
func (s *Service) contend(ctx context.Context) error {
	poll := min(s.cfg.Lease.TTL()/4, 250*time.Millisecond)
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(contendRetryMin), backoff.WithMaxInterval(contendRetryMax),
		backoff.WithMaxElapsedTime(0))
	unreachable, standing := false, false
	for {
		held, err := s.cfg.Lease.TryAcquire(ctx)
		wait := poll
		switch {
		case err == nil:
			if unreachable {
				s.log.InfoContext(ctx, "lease reachable again")
				unreachable = false
				b.Reset()
			}
			if held {
				return nil
			}
			s.standing(StandingStandby)
			if !standing {
				s.log.InfoContext(ctx, "another scheduler leads; standing by")
				standing = true
			}
		case errors.Is(err, ErrMisconfigured):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			s.standing(StandingUnreachable)
			if !unreachable {
				s.log.WarnContext(ctx, "cannot reach the lease; retrying", slog.Any("err", err))
				unreachable = true
			}
			wait = b.NextBackOff()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// term is one leadership term: the state folded so far and what the next
// flush must write and send.
type term struct {
	s       *Service
	state   *ledger.State
	core    *Core
	applied uint64 // last sequence folded
	ahead   uint64 // the first flush must not end before this
	changed []ledger.Key
	marked  map[ledger.Key]bool
	msgs    []wire.Message
	caught  bool // the last folded entry was the log's last
	folded  int  // commands folded since the last batch was prepared
	// nonce ends the de-duplication id of every decision the term
	// publishes. It is secret to this term, so no other publisher on the
	// command stream can take a decision's id first and have it dropped
	// as a duplicate; within the term a decision made again keeps its id
	// and is stored once.
	nonce   string
	samples []sample
	// expectBy is set when the term stores new decisions on the log, which
	// the follower must then deliver: the term ends if nothing comes by then.
	expectBy time.Time
	// publishing and trimming are failing while their last try failed.
	publishing, trimming spell
	// refused are the commands to answer with a rejection instead of
	// applying, by sequence, with why (View.Refused).
	refused map[uint64]string
	// archived are the jobs archived since the last flush, by id: their
	// keys are deleted, each marked with the record it held.
	archived map[string]archivedJob
	m        termMetrics
}

// archivedJob is a job the fold archived: the command's sequence and the
// job's final record.
type archivedJob struct {
	seq uint64
	job *ledger.Job
}

// spell remembers whether something that is retried later is failing, so
// that a spell of failures is logged once (at warn) and its end once.
type spell bool

func (f *spell) failed(log *slog.Logger, msg string, args ...any) {
	if *f {
		log.Debug(msg, args...)
		return
	}
	*f = true
	log.Warn(msg, args...)
}

func (f *spell) ok(log *slog.Logger, msg string) {
	if *f {
		*f = false
		log.Info(msg)
	}
}

// logGap is a gap in the command log: entry next came after entry after.
type logGap struct{ after, next uint64 }

func (g *logGap) Error() string {
	return fmt.Sprintf("entry %d follows %d, so entries %d to %d are missing: %v", g.next, g.after, g.after+1, g.next-1, ErrLogGap)
}

func (g *logGap) Unwrap() error { return ErrLogGap }

type sample struct {
	seq uint64
	at  time.Time
}

// maxRepairs bounds the foreign values one term repairs before it loads
// the ledger; more wait for the next term.
const maxRepairs = 16

// followStallTimeout is how long a term waits for the command log to deliver
// anything after it stored decisions on it, before it takes its follower for
// stuck and ends.
const followStallTimeout = 15 * time.Second

// lead runs one term. It returns when ctx ends, the lease is lost, a write
// is fenced, or the log or a store fails.
func (s *Service) lead(ctx context.Context, st *runState) error {
	began := s.cfg.NowFunc()
	s.standing(StandingLeading)
	defer s.standing(StandingContending)
	s.log.Log(ctx, st.level(slog.LevelDebug), "lease acquired; loading the ledger")
	// The lease is renewed while the term starts (the load of a large
	// ledger outlasts a TTL); a renewal that finds it lost cancels tctx,
	// which abandons the load, and the term ends before it writes or sends
	// anything.
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ren := s.startRenewer(ctx, cancel)
	t, fol, hosts, err := s.startTerm(tctx, st)
	lastRenew, rerr := ren.stop()
	s.held(lastRenew)
	if fol != nil {
		defer fol.Stop()
	}
	switch {
	case rerr != nil:
		return rerr
	case err != nil:
		return err
	}
	s.log.Log(ctx, st.level(slog.LevelInfo), "leading", slog.Uint64("checkpoint", t.applied), slog.Uint64("ahead", t.ahead),
		slog.Int("accounts", len(t.state.Accounts)), slog.Int("jobs", len(t.state.Jobs)))
	if s.cfg.Hooks.Leading != nil {
		s.cfg.Hooks.Leading()
	}
	fl := s.startFlusher(tctx)
	dp := s.startDecisions(tctx, leased{s: s, halted: &fl.halted})
	defer func() {
		cancel(nil) // a batch or decisions in flight end with the term
		fl.stop()
		dp.stop()
	}()
	facts := s.startFacts(tctx, t.core, began)
	defer facts.end()
	tick := time.NewTicker(s.cfg.DecideInterval)
	defer tick.Stop()
	renewEvery := s.cfg.Lease.TTL() / 3
	nextTrim := s.cfg.NowFunc().Add(time.Minute)
	for {
		// While the flusher cannot take the next batch, it grows, up to
		// MaxBatch commands; then the fold waits for the flusher.
		entries := fol.C()
		if !fl.ready() && t.folded >= s.cfg.MaxBatch {
			entries = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-entries:
			if !ok {
				return fmt.Errorf("command log: %w", fol.Err())
			}
			if err := t.fold(e); err != nil {
				return err
			}
		drain:
			for drained := 1; drained < s.cfg.MaxBatch && (t.folded < s.cfg.MaxBatch || t.applied < t.ahead); drained++ {
				select {
				case e, ok := <-fol.C():
					if !ok {
						return fmt.Errorf("command log: %w", fol.Err())
					}
					if err := t.fold(e); err != nil {
						return err
					}
				default:
					break drain
				}
			}
		case u, ok := <-hosts:
			if !ok {
				return errors.New("the hosts watch ended")
			}
			t.host(u)
		case r := <-dp.out:
			dp.busy = false
			t.stored(r, s.cfg.NowFunc())
		case <-fl.free: // stage 1 may take the next batch
		case r := <-fl.out:
			fl.received()
			if r.err != nil {
				r = fl.failure(r)
				s.flushed(r)
				return r.err
			}
			s.flushed(r)
			t.checkpointed(r.seq)
		case <-tick.C:
			if err := fol.Err(); err != nil && len(fol.C()) == 0 {
				return fmt.Errorf("command log: %w", err)
			}
			if len(fol.C()) == 0 && len(t.changed) == 0 && len(t.msgs) == 0 {
				t.caught = true
			}
		}
		now := s.cfg.NowFunc()
		if !st.steady && now.Sub(began) >= s.cfg.Lease.TTL() {
			if st.failed >= 2 {
				s.log.InfoContext(ctx, "leading steadily again", slog.Int("failed_terms", st.failed))
			}
			st.steady, st.failed = true, 0
		}
		if !t.expectBy.IsZero() && now.After(t.expectBy) && !dp.busy && len(fol.C()) == 0 {
			return fmt.Errorf("the command log delivered nothing for %v after this term stored decisions on it: its follower is stuck", followStallTimeout)
		}
		// Every write is bounded, so a batch or a pass in flight this long
		// is stuck: end the term rather than lead in name only (the lease
		// is still renewed here, so no standby would take over).
		if d := fl.stalled(now); d > writeStallTimeout {
			return fmt.Errorf("a batch has been in flight for %v: its writes are stuck", d.Round(time.Second))
		}
		if dp.busy && now.Sub(dp.since) > writeStallTimeout {
			return fmt.Errorf("a pass's decisions have been in flight for %v: storing them is stuck", now.Sub(dp.since).Round(time.Second))
		}
		if now.Sub(lastRenew) >= renewEvery {
			if err := s.cfg.Lease.Renew(ctx); err != nil {
				return fmt.Errorf("renew the leader lease: %w", err)
			}
			lastRenew = now
			s.held(now)
		}
		if fl.ready() && t.applied >= t.ahead && (len(t.changed) > 0 || len(t.msgs) > 0) {
			b, err := t.prepare()
			if err != nil {
				return err
			}
			fl.send(b, now)
		}
		if fl.halted.Load() {
			// A batch failed: store nothing more, as a crash there would
			// not; its outcome says why.
			r := fl.failure(<-fl.out)
			s.flushed(r)
			return r.err
		}
		if t.caught && t.applied >= t.ahead {
			if !dp.busy {
				t.decide(dp, now)
			}
			facts.after(t, now) // after the pass; queues only, never waits on I/O
		}
		if s.cfg.RetainApplied > 0 && now.After(nextTrim) {
			t.trim(ctx, now)
			nextTrim = now.Add(time.Minute)
		}
		t.publish(now)
	}
}

// startTerm loads the view (repairing foreign values it finds, up to
// maxRepairs), indexes it in a new core, and starts following the command
// log and watching the hosts, all under ctx, which the lease's renewer
// cancels when the lease is lost. It writes nothing but the repairs, and
// none once ctx has ended. fol is non-nil whenever the log is followed, for
// the caller to stop.
func (s *Service) startTerm(ctx context.Context, st *runState) (_ *term, fol Follower, _ <-chan HostUpdate, _ error) {
	view, err := s.cfg.Store.Load(ctx)
	r, repairs := s.cfg.Store.(Repairer)
	for tries := 0; repairs && errors.Is(err, ErrForeignValue) && tries < maxRepairs && ctx.Err() == nil; tries++ {
		// A value another client put at a ledger key: put back the one
		// gpuq wrote, if the key's history has it, and load again.
		did, rerr := r.Repair(ctx, err)
		if rerr != nil {
			s.log.Log(ctx, st.level(slog.LevelError), "a ledger key holds a value gpuq did not write, and it cannot be repaired; no scheduler can load the ledger until it is",
				slog.Any("err", rerr))
			return nil, nil, nil, fmt.Errorf("load the ledger view: %w", err)
		}
		s.log.ErrorContext(ctx, "a ledger key held a value gpuq did not write; repaired it from the key's history", slog.Any("found", err), slog.String("repair", did))
		view, err = s.cfg.Store.Load(ctx)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("load the ledger view: %w", err)
	}
	t := &term{s: s, state: view.State, core: NewCore(s.cfg.Core), applied: view.Checkpoint,
		ahead: view.Ahead, marked: map[ledger.Key]bool{}, refused: view.Refused, nonce: rand.Text()}
	t.core.Load(t.state)
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	fol, err = s.cfg.CommandLog.Follow(ctx, view.Checkpoint)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("follow the command log: %w", err)
	}
	hosts, err := s.cfg.Hosts.Watch(ctx)
	if err != nil {
		return nil, fol, nil, fmt.Errorf("watch hosts: %w", err)
	}
	return t, fol, hosts, nil
}

// fold applies one log entry to the term's state.
func (t *term) fold(e LogEntry) error {
	if e.Seq != t.applied+1 {
		return &logGap{after: t.applied, next: e.Seq}
	}
	t.expectBy = time.Time{}
	cmd, err := wire.DecodeCommand(t.s.cfg.Names, e.Subject, e.Data)
	if err != nil {
		var de *wire.DecodeError
		if !errors.As(err, &de) {
			return fmt.Errorf("decode entry %d: %w", e.Seq, err)
		}
		cmd = de.Command()
		t.s.log.Debug("invalid command", slog.Uint64("seq", e.Seq), slog.String("subject", e.Subject), slog.Any("err", err))
	}
	if why, ok := t.refused[e.Seq]; ok {
		acct, job := address(cmd)
		if j := t.state.Jobs[job]; acct == "" && j != nil {
			acct = j.Account
		}
		cmd = ledger.Invalid{Account: acct, Job: job, Reason: ledger.ReasonTooLarge,
			Message: fmt.Sprintf("%s refused and not applied: %s", cmd.Kind(), why)}
	}
	began := time.Now()
	res := t.state.Apply(cmd, e.Seq, e.Time)
	t.logRejections(cmd, e.Seq, res)
	t.core.Observe(t.state, cmd, res)
	t.observe(e, cmd, res, began)
	for _, eff := range res.Effects {
		if a, ok := eff.(ledger.ArchivedJob); ok {
			if t.archived == nil {
				t.archived = map[string]archivedJob{}
			}
			t.archived[a.Job.ID] = archivedJob{seq: e.Seq, job: a.Job}
		}
	}
	for _, k := range res.Changed {
		if !t.marked[k] {
			t.marked[k] = true
			t.changed = append(t.changed, k)
		}
	}
	for i, eff := range res.Effects {
		msg, err := wire.EncodeEffect(t.s.cfg.Names, e.Seq, e.Time, i, eff)
		if err != nil {
			return fmt.Errorf("encode effect %d of entry %d: %w", i, e.Seq, err)
		}
		if len(msg.Data) > t.s.cfg.MaxMessageBytes {
			return &TooLargeError{What: msg.Subject, Seq: e.Seq,
				Err: fmt.Errorf("its effect %d takes %d bytes, more than the %d the scheduler sends", i, len(msg.Data), t.s.cfg.MaxMessageBytes)}
		}
		t.msgs = append(t.msgs, msg)
	}
	t.applied = e.Seq
	t.caught = e.Pending == 0
	t.folded++
	return nil
}

// address returns the account and job a command is about, where it names
// them, for the rejection that replaces a refused command.
func address(cmd ledger.Command) (account, job string) {
	switch c := cmd.(type) {
	case ledger.Submit:
		return c.Account, c.ID
	case ledger.Cancel:
		return c.Account, c.Job
	case ledger.Modify:
		return c.Account, c.Job
	case ledger.Admin:
		return c.Account, ""
	case ledger.Admit:
		return c.Account, ""
	case ledger.Report:
		return "", c.Job
	case ledger.Dispatch:
		return "", c.Job
	case ledger.Lost:
		return "", c.Job
	case ledger.Unplaceable:
		return "", c.Job
	case ledger.Archive:
		return "", c.Job
	case ledger.Seal:
		return c.Account, ""
	case ledger.Invalid:
		return c.Account, c.Job
	}
	return "", ""
}

// splitHistory returns the history records among msgs, and the rest, each in
// order.
func splitHistory(n subjects.Names, msgs []wire.Message) (history, rest []wire.Message) {
	filter := n.HistoryFilter()
	for _, m := range msgs {
		if subjects.Match(filter, m.Subject) {
			history = append(history, m)
		} else {
			rest = append(rest, m)
		}
	}
	return history, rest
}

// batch is one flush: the records of the keys that changed and the effects
// of the commands folded since the last one, encoded on the service
// goroutine and carried out in order on the term's flusher.
type batch struct {
	applied uint64 // the last sequence folded into it: its checkpoint
	recs    []Record
	// history are the final records of archived jobs, sent before any
	// record is written; rest the other effects, sent after.
	history, rest []wire.Message
	// The flusher's: the keys of recs, each true where one of them is a
	// removal; those of recs written in stage 2 (see pipeline.go); when
	// stage 1 took the batch.
	keys  map[string]bool
	later []Record
	began time.Time
}

// outcome is how b fared, err nil once it is checkpointed.
func (b *batch) outcome(err error) flushed {
	return flushed{seq: b.applied, err: err, took: time.Since(b.began), records: len(b.recs), effects: len(b.history) + len(b.rest)}
}

// flushed is the outcome of a batch: its checkpoint, or why it failed,
// with what it wrote and how long it took.
type flushed struct {
	seq              uint64
	err              error
	took             time.Duration
	records, effects int
}

// prepare takes what was folded since the last batch into a new one and
// starts the next: the records are encoded now, as the state stands, so
// the fold can go on while the batch is written.
func (t *term) prepare() (*batch, error) {
	b := &batch{applied: t.applied, recs: make([]Record, 0, len(t.changed))}
	for _, k := range t.changed {
		rec, err := t.record(k)
		if err != nil {
			return nil, err
		}
		b.recs = append(b.recs, rec)
	}
	b.history, b.rest = splitHistory(t.s.cfg.Names, t.msgs)
	t.changed, t.msgs = t.changed[:0], t.msgs[:0] // splitHistory copied them
	t.folded = 0
	clear(t.marked)
	clear(t.archived)
	return b, nil
}

// held records a renewal of the lease sent at renewed that succeeded.
func (s *Service) held(renewed time.Time) {
	until := renewed.Add(s.cfg.Lease.TTL())
	s.heldUntil.Store(&until)
}

// stillHeld returns an error once the lease may have lapsed: a write
// after that could be a deposed leader's.
func (s *Service) stillHeld() error {
	until := s.heldUntil.Load()
	if until == nil || !s.cfg.NowFunc().Before(*until) {
		return errors.New("the lease may have lapsed: its renewal is late, so this term writes nothing more")
	}
	return nil
}

// writeStallTimeout is how long a batch or a pass of decisions may be in
// flight before the term takes its writes for stuck and ends: well beyond
// what every bounded step of a flush (records, effects with their retries,
// the checkpoint) may take together.
const writeStallTimeout = 2 * time.Minute

// checkpointed records that the flusher checkpointed seq: the log may be
// trimmed up to it once RetainApplied has passed.
func (t *term) checkpointed(seq uint64) {
	now := t.s.cfg.NowFunc()
	if len(t.samples) == 0 || now.Sub(t.samples[len(t.samples)-1].at) >= time.Minute {
		t.samples = append(t.samples, sample{seq: seq, at: now})
	}
}

// record encodes the current version of key k.
func (t *term) record(k ledger.Key) (Record, error) {
	switch k.Kind {
	case ledger.KeyAccount:
		a := t.state.Accounts[k.ID]
		v, err := ledger.MarshalAccount(a)
		return Record{Key: subjects.AccountKey(k.ID), Seq: a.Seq, Value: v}, err
	case ledger.KeyJob:
		j := t.state.Jobs[k.ID]
		if j == nil {
			a, ok := t.archived[k.ID]
			if !ok {
				return Record{}, fmt.Errorf("job %s changed but neither in the state nor archived", k.ID)
			}
			v, err := ledger.MarshalJob(a.job)
			return Record{Key: subjects.JobKey(k.ID), Seq: a.seq, Value: v, Delete: true}, err
		}
		v, err := ledger.MarshalJob(j)
		return Record{Key: subjects.JobKey(k.ID), Seq: j.Seq, Value: v}, err
	case ledger.KeyPricing:
		v, err := ledger.MarshalPricing(t.state.Pricing)
		return Record{Key: subjects.PricingKey, Seq: t.state.Pricing.Seq, Value: v}, err
	}
	return Record{}, fmt.Errorf("unknown key kind %d", k.Kind)
}

// host applies a hosts-bucket change.
func (t *term) host(u HostUpdate) {
	if u.Host == nil {
		t.s.log.Info("host gone", slog.String("worker", u.Name))
		t.core.RemoveHost(u.Name, t.s.cfg.NowFunc())
		return
	}
	t.core.SetHost(*u.Host, t.s.cfg.NowFunc())
}

// decisions are the decisions of one pass, on their way to the log.
type decisions struct {
	msgs []wire.Message
	sent []ledger.Command
	// expects is set when sending them set the term's expectBy, and
	// applied is the last sequence folded then.
	expects bool
	applied uint64
}

// decisionsStored is how a pass's decisions fared: how many the log stored
// anew, or why they were not stored.
type decisionsStored struct {
	d      *decisions
	stored int
	err    error
}

// decisionPublisher stores a term's decisions on the log on a goroutine of
// its own, one pass at a time, so the service goroutine folds meanwhile.
type decisionPublisher struct {
	in    chan *decisions
	out   chan decisionsStored
	busy  bool      // a pass is in flight
	since time.Time // when the pass in flight was sent
	done  chan struct{}
}

// startDecisions starts the term's decisions' publisher, which stores them
// through w (nothing once a batch failed) until stop.
func (s *Service) startDecisions(ctx context.Context, w leased) *decisionPublisher {
	p := &decisionPublisher{in: make(chan *decisions, 1), out: make(chan decisionsStored, 1), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for d := range p.in {
			stored, err := w.publish(ctx, d.msgs)
			p.out <- decisionsStored{d: d, stored: stored, err: err} // room for it: one pass in flight at most
		}
	}()
	return p
}

// stop ends the publisher and waits for it; the caller has cancelled the
// context of a pass in flight.
func (p *decisionPublisher) stop() {
	close(p.in)
	<-p.done
}

// decide hands the core's decisions to p, which must not be busy, to be
// stored on the log; [term.stored] takes the outcome.
func (t *term) decide(p *decisionPublisher, now time.Time) {
	cmds := t.core.Decide(t.state, now)
	if len(cmds) == 0 {
		return
	}
	d := &decisions{msgs: make([]wire.Message, 0, len(cmds)), applied: t.applied}
	for _, c := range cmds {
		msg, err := wire.EncodeCommand(t.s.cfg.Names, c)
		if err != nil {
			t.s.log.Error("encode a decision", slog.Any("err", err))
			t.core.Abandon(t.state, c)
			continue
		}
		d.msgs = append(d.msgs, wire.WithNonce(msg, t.nonce))
		d.sent = append(d.sent, c)
	}
	if len(d.msgs) == 0 {
		return
	}
	// The decisions come back through the follower, perhaps before their
	// acknowledgements do: the follower must deliver something by then
	// (counted once they are stored, see stored).
	if t.expectBy.IsZero() {
		t.expectBy, d.expects = now.Add(followStallTimeout), true
	}
	p.busy, p.since = true, now
	p.in <- d
}

// stored takes the outcome of a pass's decisions. Decisions that could not
// be published are abandoned, to be made again on a later pass.
func (t *term) stored(r decisionsStored, now time.Time) {
	d := r.d
	// Only decisions stored anew come back through the follower: ones the
	// log already had (decided again by this term inside the duplicate
	// window) bring nothing to wait for. Nothing folded since they were
	// sent means nothing has cleared the wait they set.
	if d.expects && t.applied == d.applied {
		if r.err != nil || r.stored == 0 {
			t.expectBy = time.Time{}
		} else {
			t.expectBy = now.Add(followStallTimeout) // counted from when they were stored
		}
	}
	if r.err != nil {
		if !errors.Is(r.err, errHalted) { // else a batch failed: the term ends, and says why
			t.publishing.failed(t.s.log, "cannot publish decisions; deciding again later", slog.Int("decisions", len(d.msgs)), slog.Any("err", r.err))
		}
		for _, c := range d.sent {
			t.core.Abandon(t.state, c)
		}
		return
	}
	t.publishing.ok(t.s.log, "publishing decisions again")
	t.decided(d.sent)
	t.s.log.Debug("decided", slog.Int("decisions", len(d.sent)))
}

// trim drops log entries that were applied longer than RetainApplied ago.
func (t *term) trim(ctx context.Context, now time.Time) {
	cut := -1
	for i, smp := range t.samples {
		if now.Sub(smp.at) >= t.s.cfg.RetainApplied {
			cut = i
		}
	}
	if cut < 0 {
		return
	}
	if err := t.s.cfg.CommandLog.Trim(ctx, t.samples[cut].seq); err != nil {
		t.trimming.failed(t.s.log, "cannot trim the command log; trying again later", slog.Any("err", err))
		return
	}
	t.trimming.ok(t.s.log, "trimming the command log again")
	t.samples = append(t.samples[:0], t.samples[cut+1:]...)
}
