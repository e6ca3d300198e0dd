package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

func init() {
	register(&command{
		name:    "logs",
		summary: "print a job's output; -f follows it until the attempt ends",
		usage:   "logs [-f] [--attempt N] ID",
		example: `  gpuq logs train-42
  gpuq logs -f train-42          # follow the latest attempt until it ends`,
		run: runLogs,
	})
	register(&command{
		name:    "hosts",
		summary: "list live GPU hosts: GPUs free, claimed, busy and unhealthy, simulated or real",
		usage:   "hosts",
		example: `  gpuq hosts
  gpuq hosts --output json`,
		run: runHosts,
	})
	register(&command{
		name:    "why",
		summary: "say every reason a pending job is not running, as the scheduler saw it",
		usage:   "why [--wait D] ID",
		example: `  gpuq why train-42`,
		run:     runWhy,
	})
	register(&command{
		name:    "audit",
		summary: "recompute every balance from the journal and compare it with the ledger; say if the scheduler is stuck",
		usage:   "audit [--full] [--stuck-after D]",
		example: `  gpuq audit            # exit 0 when they agree and the fold keeps up, 5 with every difference printed
  gpuq audit --full     # read and check every account's whole journal, not only from its newest seal
  gpuq audit --stuck-after 30s   # a command unapplied for longer means the scheduler is stuck`,
		run: runAudit,
	})
}

func runLogs(ctx context.Context, e *env, args []string) error {
	c := find("logs")
	fs := e.flags(c)
	followFlag := fs.Bool("f", false, "follow the output until the attempt ends")
	attempt := fs.Int("attempt", 0, "the attempt to show (default: the latest)")
	job, s, err := e.jobArg(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	j, err := s.job(ctx, job)
	if err != nil {
		return err
	}
	want := *attempt
	if want == 0 {
		if j.Attempt == 0 {
			fmt.Fprintf(e.stderr, "job %s has not run yet (%s)\n", job, j.State)
			return nil
		}
		want = j.Attempt
	}
	host := attemptHost(j, want)
	if host == "" {
		return fmt.Errorf("job %s has no attempt %d on record (its latest is %d)", job, want, j.Attempt)
	}
	// Only chunks from the host the attempt ran on: another host's worker
	// can publish chunks that name this job, but only under its own host.
	cons, err := s.js.OrderedConsumer(ctx, s.n.LogsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{s.n.Log(j.Account, job, host)}, NamePrefix: client.ConsumerName()})
	if err != nil {
		return fmt.Errorf("read the output of job %s: %w", job, err)
	}
	chunks := []wire.LogChunk{} // JSON [] when there are none
	for {
		wait := 500 * time.Millisecond
		if *followFlag {
			wait = 5 * time.Second
		}
		batch, err := cons.Fetch(256, jetstream.FetchMaxWait(wait))
		if err != nil {
			return err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			ch, err := wire.DecodeLogChunk(s.n, m.Subject(), m.Headers().Get, m.Data())
			if err != nil {
				fmt.Fprintf(e.stderr, "gpuq: skipping a log message: %v\n", err)
				continue
			}
			if ch.Attempt != want {
				continue
			}
			if e.output == "json" {
				chunks = append(chunks, ch)
			} else if ch.End == "" {
				if ch.Stream == wire.Stderr {
					_, _ = e.stderr.Write(ch.Data) // the terminal went away; nothing to do
				} else {
					_, _ = e.stdout.Write(ch.Data)
				}
			}
			if ch.End != "" {
				if e.output == "json" {
					return printJSON(e.stdout, chunks)
				}
				fmt.Fprintf(e.stderr, "gpuq: attempt %d ended: %s\n", ch.Attempt, ch.End)
				return nil
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			return err
		}
		if got == 0 && !*followFlag {
			if e.output == "json" {
				return printJSON(e.stdout, chunks)
			}
			return nil // everything stored so far is printed; the attempt is still running
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// attemptHost returns the host attempt n of j ran on, or "" when the
// record names none.
func attemptHost(j *ledger.Job, n int) string {
	for _, a := range j.Attempts {
		if a.N == n {
			return a.Host
		}
	}
	if n == j.Attempt {
		return j.Host
	}
	return ""
}

// hostView is a host as hosts lists it.
type hostView struct {
	Host      string         `json:"host"`
	Simulated bool           `json:"simulated"`
	Draining  bool           `json:"draining"`
	GPUs      int            `json:"gpus"`
	Free      int            `json:"free"`
	Claimed   int            `json:"claimed"`
	Busy      int            `json:"busy"`
	Unhealthy int            `json:"unhealthy"`
	Model     string         `json:"model"`
	Running   []wire.Running `json:"running"`
	Seen      time.Time      `json:"seen"`
	Devices   []wire.Device  `json:"devices"`
}

// readHosts reads every live heartbeat, in one pass over the bucket: the
// latest value of each key, expired and deleted ones left out. It warns on
// warn about a heartbeat it cannot decode, and leaves that host out.
func readHosts(ctx context.Context, s *session, warn io.Writer) ([]wire.Host, error) {
	kv, err := s.bucket(ctx, s.n.HostsBucket())
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }() // a read-only watcher; nothing is lost if stopping fails
	// A heartbeat written while the watcher starts can come twice; the
	// later one is the newer.
	byKey := map[string]wire.Host{}
read:
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				break read // the end of the values stored when the watch began
			}
			h, err := wire.DecodeHost(e.Value())
			if err != nil {
				fmt.Fprintf(warn, "gpuq: leaving out host key %s: %v\n", e.Key(), err)
				continue
			}
			byKey[e.Key()] = h
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make([]wire.Host, 0, len(byKey))
	for _, h := range byKey {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, nil
}

func runHosts(ctx context.Context, e *env, args []string) error {
	c := find("hosts")
	fs := e.flags(c)
	s, err := e.noArgs(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	hosts, err := readHosts(ctx, s, e.stderr)
	if err != nil {
		return err
	}
	views := []hostView{}
	for _, h := range hosts {
		v := hostView{Host: h.Host, Simulated: h.Simulated, Draining: h.Draining, GPUs: len(h.Devices), Running: h.Running, Seen: h.Time, Devices: h.Devices}
		for _, d := range h.Devices {
			v.Model = d.Model
			switch {
			case !d.Healthy:
				v.Unhealthy++
			case d.Job != "":
				v.Claimed++
			case d.Busy:
				v.Busy++
			default:
				v.Free++
			}
		}
		views = append(views, v)
	}
	if e.output == "json" {
		return printJSON(e.stdout, views)
	}
	if len(views) == 0 {
		fmt.Fprintln(e.stdout, "no live hosts: no worker is heartbeating (start one with gpuq worker, or gpuq dev)")
		return nil
	}
	t := newTable(e.stdout, "HOST", "KIND", "MODEL", "GPUS", "FREE", "CLAIMED", "BUSY", "UNHEALTHY", "RUNNING", "SEEN")
	for _, v := range views {
		kind := "real"
		if v.Simulated {
			kind = "simulated"
		}
		if v.Draining {
			kind += ", draining"
		}
		var run []string
		for _, r := range v.Running {
			run = append(run, fmt.Sprintf("%s#%d", r.Job, r.Attempt))
		}
		t.row(v.Host, kind, dash(v.Model), v.GPUs, v.Free, v.Claimed, v.Busy, v.Unhealthy, dash(strings.Join(run, ",")), when(v.Seen))
	}
	return t.flush()
}

func runWhy(ctx context.Context, e *env, args []string) error {
	c := find("why")
	fs := e.flags(c)
	wait := fs.Duration("wait", 5*time.Second, "how long to wait for the scheduler to look at a job that changed a moment ago")
	job, s, err := e.jobArg(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	j, err := s.c.Job(ctx, job)
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no job %s", job)
	}
	if err != nil {
		return err
	}
	// The scheduler's own explanation, from the facts it publishes; a job
	// that changed after its latest pass is waited for a moment.
	deadline := time.Now().Add(*wait)
	ex, err := s.c.Explain(ctx, j.Account, job)
	for err == nil && ex.Status == client.NotSeen && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		ex, err = s.c.Explain(ctx, j.Account, job)
	}
	if err != nil {
		return err
	}
	type answer struct {
		Job         string            `json:"job"`
		State       ledger.JobState   `json:"state"`
		Reason      ledger.Reason     `json:"reason,omitempty"`
		Message     string            `json:"message,omitempty"`
		Status      string            `json:"status"`
		Blockers    []wire.Blocker    `json:"blockers"`
		Reservation *wire.Reservation `json:"reservation,omitempty"`
		AsOf        *time.Time        `json:"as_of,omitempty"` // the pass that computed the blockers
	}
	ans := answer{Job: ex.Job, State: ex.State, Reason: ex.Reason, Message: ex.Message, Status: string(ex.Status),
		Blockers: ex.Blockers, Reservation: ex.Reservation}
	if ex.Status == client.Explained {
		ans.AsOf = &ex.Fact.At
	}
	if e.output == "json" {
		return printJSON(e.stdout, ans)
	}
	switch {
	case ex.Status == client.NotWaiting:
		fmt.Fprintf(e.stdout, "job %s is %s", ex.Job, ex.State)
		if ex.Message != "" {
			fmt.Fprintf(e.stdout, ": %s", ex.Message)
		}
		fmt.Fprintln(e.stdout)
		return nil
	case ex.Status == client.NotSeen:
		fmt.Fprintf(e.stdout, "job %s is %s: the scheduler has not looked at it yet", ex.Job, ex.State)
		if ex.Pass == nil {
			fmt.Fprint(e.stdout, " (no scheduler has published a pass: is one running?)")
		} else {
			fmt.Fprintf(e.stdout, " (its latest published pass, at %s, folded the log through %d)", ex.Pass.At.Format(time.RFC3339), ex.Pass.Seq)
		}
		fmt.Fprintln(e.stdout)
		return nil
	case ex.Status == client.NotExplained:
		fmt.Fprintf(e.stdout, "job %s is %s and the scheduler's latest pass (at %s) did not explain it: it is being dispatched, "+
			"or it is further back in the queue than the first %d waiting jobs a pass explains (%d are queued)\n",
			ex.Job, ex.State, ex.Pass.At.Format(time.RFC3339), ex.Pass.Window, ex.Pass.Queued)
		return nil
	case len(ex.Blockers) == 0:
		fmt.Fprintf(e.stdout, "job %s is pending and nothing holds it back: the next decision dispatches it\n", ex.Job)
	default:
		fmt.Fprintf(e.stdout, "job %s is %s because:\n", ex.Job, ex.State)
		for _, b := range ex.Blockers {
			fmt.Fprintf(e.stdout, "  - %s [%s]\n", b.Message, b.Kind)
		}
	}
	fmt.Fprintf(e.stdout, "(as the scheduler saw it at %s, %s ago; its latest pass was at %s)\n", ex.Fact.At.Format(time.RFC3339),
		time.Since(ex.Fact.At).Round(time.Millisecond), ex.Pass.At.Format(time.RFC3339))
	return nil
}

// auditReport is what audit found.
type auditReport struct {
	Checkpoint  uint64   `json:"checkpoint"`
	Accounts    int      `json:"accounts"`
	Entries     int      `json:"entries"`
	OK          bool     `json:"ok"`
	Differences []string `json:"differences"`
	// From is where each account's journal was read from: "seals" (its
	// newest seal on) or "start" (--full). Read is how many journal
	// messages were read, Stored how many the journal stream holds (from
	// seals only), Whole the accounts read whole after all, and why.
	From   string   `json:"from"`
	Read   uint64   `json:"read"`
	Stored uint64   `json:"stored,omitempty"`
	Whole  []string `json:"whole,omitempty"`
	// LogLast is the command log's last sequence; Stuck is set when the
	// oldest command past the checkpoint has waited longer than
	// --stuck-after.
	LogLast uint64      `json:"log_last"`
	Stuck   *stuckFold  `json:"stuck,omitempty"`
	Refused []refusedAt `json:"refused,omitempty"`
}

// stuckFold is a command the scheduler has not applied for too long.
type stuckFold struct {
	Seq     uint64        `json:"seq"`
	Subject string        `json:"subject"`
	Since   time.Time     `json:"since"`
	Waited  time.Duration `json:"waited_ns"`
	Message string        `json:"message"`
}

// refusedAt is a command a scheduler found it could not store the outcome
// of, answered with a rejection when it is folded.
type refusedAt struct {
	Seq uint64 `json:"seq"`
	Why string `json:"why"`
}

// stuck reports the oldest command past the view's checkpoint if it was
// stored more than after ago (by the server's clock, which stamped it, as
// against now).
func stuck(ctx context.Context, s *session, view *scheduler.View, after time.Duration, now time.Time) (uint64, *stuckFold, error) {
	stream, err := s.js.Stream(ctx, s.n.CmdStream())
	if err != nil {
		return 0, nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, nil, err
	}
	last := info.State.LastSeq
	if last <= view.Checkpoint {
		return last, nil, nil
	}
	next := max(view.Checkpoint+1, info.State.FirstSeq)
	m, err := stream.GetMsg(ctx, next)
	if err != nil {
		return last, nil, fmt.Errorf("read command %d, the first past checkpoint %d: %w", next, view.Checkpoint, err)
	}
	waited := now.Sub(m.Time)
	if waited <= after {
		return last, nil, nil
	}
	return last, &stuckFold{Seq: next, Subject: m.Subject, Since: m.Time, Waited: waited,
		Message: fmt.Sprintf("the scheduler is stuck: command %d (%s), stored %s, has waited %v unapplied; the log's last command is %d and the checkpoint %d (is a scheduler running? see its log)",
			next, m.Subject, m.Time.UTC().Format(time.RFC3339), waited.Round(time.Second), last, view.Checkpoint)}, nil
}

func runAudit(ctx context.Context, e *env, args []string) error {
	c := find("audit")
	fs := e.flags(c)
	stuckAfter := fs.Duration("stuck-after", 2*time.Minute, "how long a command may wait unapplied before audit says the scheduler is stuck")
	full := fs.Bool("full", false, "read and check every account's whole journal from the start, not only from its newest seal")
	margin := fs.Duration("seal-margin", natsbus.SealMargin, "how long before each account's newest seal (by its command's time) to start reading its journal: the most the journal stream's server clock may run behind the command stream's")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if *margin < 0 {
		return usagef("--seal-margin %v: want 0 or more", *margin)
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	view, err := loadView(ctx, s)
	if err != nil {
		return err
	}
	rep, err := audit(ctx, s, view, *full, *margin)
	if err != nil {
		return err
	}
	rep.LogLast, rep.Stuck, err = stuck(ctx, s, view, *stuckAfter, time.Now())
	if err != nil {
		return err
	}
	for _, seq := range slices.Sorted(maps.Keys(view.Refused)) {
		rep.Refused = append(rep.Refused, refusedAt{Seq: seq, Why: view.Refused[seq]})
	}
	if rep.Stuck != nil {
		rep.OK = false
		rep.Differences = append(rep.Differences, rep.Stuck.Message)
	}
	if e.output == "json" {
		if err := printJSON(e.stdout, rep); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintf(e.stdout, "audit ok: %d accounts agree with %d journal entries up to command %d (%s)\n", rep.Accounts, rep.Entries, rep.Checkpoint, rep.readSummary())
		for _, w := range rep.Whole {
			fmt.Fprintf(e.stdout, "  note: %s\n", w)
		}
		for _, r := range rep.Refused {
			fmt.Fprintf(e.stdout, "  note: command %d is to be refused when folded: %s\n", r.Seq, r.Why)
		}
	} else {
		fmt.Fprintf(e.stdout, "audit FAILED: %d differences up to command %d (%s):\n", len(rep.Differences), rep.Checkpoint, rep.readSummary())
		for _, w := range rep.Whole {
			fmt.Fprintf(e.stdout, "  note: %s\n", w)
		}
		for _, d := range rep.Differences {
			fmt.Fprintf(e.stdout, "  - %s\n", d)
		}
	}
	if !rep.OK {
		return exitError{code: exitAudit}
	}
	return nil
}

// audit reads the journal (and what an older version left of it in the
// events stream) and checks it against the view as of its checkpoint
// (entries past it belong to a flush in progress): every account's hash
// chain, and the balances recomputed from it (see ledger.AuditJournal).
// Unless full, each account's journal is read only from its newest seal on
// (see natsbus.ReadJournalFromSeals), in time proportional to the journal
// since the seals; full reads every entry from the start.
func audit(ctx context.Context, s *session, view *scheduler.View, full bool, margin time.Duration) (auditReport, error) {
	rep := auditReport{Checkpoint: view.Checkpoint, Accounts: len(view.State.Accounts), Differences: []string{}, From: "seals"}
	var j natsbus.Journal
	var err error
	if full {
		rep.From = "start"
		j, err = natsbus.ReadJournal(ctx, s.js, s.n)
	} else {
		j, err = natsbus.ReadJournalFromSeals(ctx, s.js, s.n, view.State, view.Checkpoint, margin)
	}
	if err != nil {
		return rep, err
	}
	rep.Read, rep.Stored, rep.Whole = j.Read, j.Stored, j.Whole
	rep.Differences = append(rep.Differences, j.Bad...)
	n, errs := ledger.AuditJournal(view.State, view.Checkpoint, j.Chained, j.Legacy)
	rep.Entries = n
	for _, err := range errs {
		rep.Differences = append(rep.Differences, strings.Split(err.Error(), "\n")...)
	}
	if err := view.State.CheckInvariants(); err != nil {
		rep.Differences = append(rep.Differences, strings.Split(err.Error(), "\n")...)
	}
	rep.OK = len(rep.Differences) == 0
	return rep, nil
}

// readSummary says how much of the journal audit read.
func (r auditReport) readSummary() string {
	if r.From == "start" {
		return fmt.Sprintf("in full: %d journal messages read", r.Read)
	}
	return fmt.Sprintf("from seals: %d of %d journal messages read", r.Read, r.Stored)
}
