package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

func init() {
	register(&command{
		name:    "submit",
		summary: "submit a job: reserve its cost and queue it",
		usage:   "submit [--id ID] [--name NAME] [--account A] [--priority P] [--gpus N] [--cost C] [--walltime D] [--hold] [--gpu-model MODEL] [--workdir DIR] [--array 0-99] [--env K=V]... [--after ID,…] [--after-any ID,…] [--dry-run] [--wait] -- CMD ARGS…",
		example: `  gpuq submit --account vision --gpus 2 --cost 120 --walltime 2h -- python train.py --epochs 10
  gpuq submit --id train-42 --account vision --gpus 1 --cost 10 --wait -- sh -c 'nvidia-smi -L'
  gpuq submit --account vision --gpus 8 --walltime 4h -- python train.py   # metered: no --cost
  gpuq submit --account vision --gpus 2 --cost 500 --hold -- python eval.py # wait for credits
  gpuq submit --account vision --gpus 8 --cost 90 --gpu-model "NVIDIA H200 141GB HBM3e" -- python train.py
  gpuq submit --id sweep --array 0-99 --account vision --cost 5 -- sh -c 'python train.py --seed $GPUQ_ARRAY_INDEX'
  # --id makes a retried submit safe: the same id and terms are one job
  # without --cost the job is metered: it reserves gpus × walltime × the highest
  #   price (gpuq prices show) and is charged the runtime it uses
  # --hold waits for credits (refill or grant) instead of being rejected
  # --wait follows the job and exits 0 when it succeeds, 3 when it fails or is cancelled
  # --array submits one task per index, ids sweep-0 … sweep-99, each reserving its own cost;
  #   it prints every task's answer and exits 4 if any was rejected (the others stay submitted)
  gpuq submit --account vision --cost 5 --after train-42 -- python eval.py
  # --after waits for jobs of the account to succeed (one that fails fails this one,
  #   dependency_failed, and releases its reservation); --after-any for them to end
  gpuq submit --account vision --gpus 8 --walltime 4h --dry-run -- python train.py
  # --dry-run submits nothing: the exact reservation, whether the account can pay
  #   (refill included) and an estimated start; --output json for scripts`,
		run: runSubmit,
	})
	register(&command{
		name:    "cancel",
		summary: "cancel a job; a running one is stopped on its host and settled when its worker reports",
		usage:   "cancel ID [--account A] | cancel --array ID [--account A]",
		example: `  gpuq cancel train-42
  gpuq cancel --array sweep   # every unfinished task of the array, one cancel each`,
		run: runCancel,
	})
	register(&command{
		name:    "jobs",
		summary: "list jobs, newest first",
		usage:   "jobs [--account A] [--state S] [--array ID] [--since T] [--until T] [--limit N] [--watch [--interval D]]",
		example: `  gpuq jobs --account vision --state pending
  gpuq jobs --output json --limit 1000
  gpuq jobs --array sweep --limit 0   # the tasks of job array sweep
  gpuq jobs --since 2026-11-01 --until 2026-12-01 --account vision   # archived ones too
  gpuq jobs --watch --account vision     # print the list again each time it changes; Ctrl-C stops
  gpuq jobs --watch --output json        # a JSON line (the list) each time it changes
  # --since/--until filter by end time (a date, or RFC 3339) and read the history of
  #   archived jobs as well; jobs still unfinished count as ending after any --since`,
		run: runJobs,
	})
	register(&command{
		name:    "job",
		summary: "show one job: state, attempts, host, devices, reserved and charged credits, times",
		usage:   "job ID [--account A]",
		example: `  gpuq job train-42
  gpuq job train-42 --output json
  # a job archived out of the ledger is read from its history; a tenant names its account`,
		run: runJob,
	})
}

// envFlags collects repeated --env K=V flags.
type envFlags map[string]string

func (f envFlags) String() string { return fmt.Sprint(map[string]string(f)) }
func (f envFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want K=V, got %q", v)
	}
	f[k] = val
	return nil
}

func runSubmit(ctx context.Context, e *env, args []string) error {
	c := find("submit")
	fs := e.flags(c)
	s := ledger.Submit{}
	env := envFlags{}
	fs.StringVar(&s.ID, "id", "", "job id, the idempotency key (default: a fresh one)")
	fs.StringVar(&s.Account, "account", os.Getenv("GPUQ_ACCOUNT"), "account to charge, or $GPUQ_ACCOUNT")
	fs.IntVar(&s.Priority, "priority", 0, "priority, -1000 to 1000; higher runs first")
	fs.IntVar(&s.GPUs, "gpus", 1, "GPUs the job needs")
	cost := fs.Int64("cost", 0, "credits to reserve, charged on success; leave out for a metered job")
	fs.BoolVar(&s.Hold, "hold", false, "if the account cannot pay yet, wait for credits instead of being rejected")
	fs.DurationVar(&s.Walltime, "walltime", ledger.DefaultWalltime, "longest the job may run")
	fs.IntVar(&s.MaxAttempts, "max-attempts", ledger.DefaultMaxAttempts, "attempts when a host is lost or fails")
	fs.Var(env, "env", "an environment variable for the job, K=V (repeatable)")
	fs.StringVar(&s.GPUModel, "gpu-model", "", "run only on hosts whose every GPU is this model, as NVML names it (gpuq hosts shows them), ignoring case")
	fs.StringVar(&s.Workdir, "workdir", "", "the job's working directory on its host, an absolute path that must exist there (default: the attempt's own directory)")
	fs.StringVar(&s.Name, "name", "", "a display name for the job, shown by gpuq job and gpuq jobs (printable text, at most 128 bytes)")
	wait := fs.Bool("wait", false, "follow the job until it ends")
	array := fs.String("array", "", "submit a job array: one task per index (0-99, 1,3,5-7; at most 1000), ids ID-INDEX, each with GPUQ_ARRAY_INDEX")
	fs.Var((*idList)(&s.After), "after", "run only after these jobs succeeded (afterok): ID[,ID] (repeatable)")
	fs.Var((*idList)(&s.AfterAny), "after-any", "run only after these jobs ended, however (afterany): ID[,ID] (repeatable)")
	dry := fs.Bool("dry-run", false, "submit nothing: print what it would reserve, whether the account can pay, and an estimated start")
	cmd, err := e.parse(c, fs, args)
	if err != nil {
		return err
	}
	switch {
	case s.Account == "":
		return usagef("--account is required (or set $GPUQ_ACCOUNT)")
	case len(cmd) == 0:
		return usagef("give the command after --, as in: gpuq submit --cost 10 -- python train.py")
	}
	s.Command = cmd
	switch {
	case flagSet(fs, "cost") && *cost < 0:
		return usagef("--cost must be 0 or more (leave it out for a metered job), not %d", *cost)
	case flagSet(fs, "cost"):
		s.Cost = ledger.Credits(*cost)
	default:
		s.Metered = true
	}
	if len(env) > 0 {
		s.Env = env
	}
	if s.ID == "" {
		s.ID = newID("job")
	}
	if err := s.Validate(); err != nil {
		return usagef("%v", err) // an out-of-range value is a usage error, before connecting
	}
	if *dry && (flagSet(fs, "array") || *wait) {
		return usagef("--dry-run submits nothing: it quotes one job, without --array or --wait")
	}
	if flagSet(fs, "array") {
		return submitArray(ctx, e, s, *array, *wait)
	}
	sess, err := e.session()
	if err != nil {
		return err
	}
	defer sess.close()
	if *dry {
		return dryRun(ctx, e, sess, s)
	}
	ev, err := sess.c.Submit(ctx, s)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		if e.output == "json" && ev.Type != "" {
			if perr := printJSON(e.stdout, ev); perr != nil {
				return perr
			}
		}
		return exitError{exitRejected, fmt.Errorf("job %s rejected (%s): %s", s.ID, rej.Reason, rej.Message)}
	}
	if err != nil {
		return err
	}
	if !*wait {
		if e.output == "json" {
			return printJSON(e.stdout, ev)
		}
		fmt.Fprintf(e.stdout, "%s %s: %s\n", ev.Type, s.ID, ev.Message)
		return nil
	}
	if e.output != "json" && ev.Type == ledger.EventHeld {
		fmt.Fprintf(e.stdout, "held %s: %s\n", s.ID, ev.Message)
	}
	from := ev.Seq
	if ev.Type == ledger.EventIgnored {
		// The same terms were submitted before: follow that job from its
		// own submission, which may have ended already.
		if e.output != "json" {
			fmt.Fprintf(e.stdout, "%s %s: %s\n", ev.Type, s.ID, ev.Message)
		}
		j, err := sess.job(ctx, s.ID)
		if err != nil {
			return err
		}
		from = j.SubmitSeq
	}
	return follow(ctx, e, sess, s.Account, s.ID, from)
}

// follow prints each event of a job as it happens until it ends, and
// returns an exitError with exitJobFailed unless it succeeded.
func follow(ctx context.Context, e *env, s *session, account, job string, fromSeq uint64) error {
	final, err := s.c.Watch(ctx, account, job, fromSeq, func(ev wire.JobEvent) error {
		if e.output == "json" {
			return printJSON(e.stdout, ev)
		}
		fmt.Fprintf(e.stdout, "%s  %-16s %s\n", ev.Time.Local().Format("15:04:05"), ev.Type, eventLine(ev))
		return nil
	})
	if err != nil {
		return err
	}
	if e.output != "json" {
		switch {
		case final.Type == ledger.EventSucceeded:
			fmt.Fprintf(e.stdout, "job %s succeeded: charged %d, balance %d\n", job, final.Charged, final.Balance)
		case final.Charged > 0:
			// A metered job that fails or is cancelled pays the price
			// table's failure percent of its runtime.
			fmt.Fprintf(e.stdout, "job %s %s (%s): charged %d, balance %d\n", job, final.Type, final.Reason, final.Charged, final.Balance)
		default:
			fmt.Fprintf(e.stdout, "job %s %s (%s): nothing charged, balance %d\n", job, final.Type, final.Reason, final.Balance)
		}
	}
	if final.Type != ledger.EventSucceeded {
		return exitError{code: exitJobFailed, err: fmt.Errorf("job %s %s: %s", job, final.Type, final.Message)}
	}
	return nil
}

func eventLine(ev wire.JobEvent) string {
	var parts []string
	if ev.Message != "" {
		parts = append(parts, ev.Message)
	}
	if ev.Reason != "" && ev.Type != ledger.EventAccepted {
		parts = append(parts, "("+string(ev.Reason)+")")
	}
	if ev.Type == ledger.EventStarted && len(ev.Devices) > 0 {
		parts = append(parts, "on "+strings.Join(ev.Devices, ","))
	}
	return strings.Join(parts, " ")
}

func runCancel(ctx context.Context, e *env, args []string) error {
	c := find("cancel")
	fs := e.flags(c)
	account := fs.String("account", "", "the job's account (default: read from the job)")
	array := fs.String("array", "", "cancel every unfinished task of this job array instead of one job")
	if hasArrayFlag(args) {
		return runCancelArray(ctx, e, c, fs, account, array, args)
	}
	job, s, err := e.jobArg(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	if *account == "" {
		j, err := s.job(ctx, job)
		if err != nil {
			return err
		}
		*account = j.Account
	}
	ev, err := s.c.Cancel(ctx, *account, job)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		return exitError{exitRejected, fmt.Errorf("cancel %s: %s (%s)", job, rej.Message, rej.Reason)}
	}
	if err != nil {
		return err
	}
	// A cancel of a job already ending or ended is done; one that named no
	// such job in the account did nothing, and says so with exitRejected.
	refused := ev.Type == ledger.EventIgnored && (ev.Reason == ledger.ReasonAccountMismatch || ev.Reason == ledger.ReasonUnknownJob)
	if e.output == "json" {
		if err := printJSON(e.stdout, ev); err != nil {
			return err
		}
	} else if !refused {
		fmt.Fprintf(e.stdout, "%s %s: %s\n", ev.Type, job, ev.Message)
	}
	if refused {
		return exitError{exitRejected, fmt.Errorf("cancel %s: %s (%s)", job, ev.Message, ev.Reason)}
	}
	return nil
}

// loadState reads the ledger as of the scheduler's checkpoint
// (client.Snapshot).
func loadState(ctx context.Context, s *session) (*ledger.State, error) {
	snap, err := s.c.Snapshot(ctx)
	if err != nil {
		return nil, bucketHint(err)
	}
	return snap.State, nil
}

// jobStates are the states a job can be in, in the order of its life.
var jobStates = []ledger.JobState{ledger.StateHeld, ledger.StatePending, ledger.StateDispatched, ledger.StateRunning,
	ledger.StateSucceeded, ledger.StateFailed, ledger.StateCancelled, ledger.StateRejected}

func stateList() string {
	names := make([]string, len(jobStates))
	for i, st := range jobStates {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

// jobRow is a job as jobs lists it.
type jobRow struct {
	ID        string          `json:"id"`
	Name      string          `json:"name,omitempty"`
	Account   string          `json:"account"`
	State     ledger.JobState `json:"state"`
	Priority  int             `json:"priority"`
	GPUs      int             `json:"gpus"`
	Cost      ledger.Credits  `json:"cost"`
	Reserved  ledger.Credits  `json:"reserved"`
	Charged   ledger.Credits  `json:"charged"`
	Attempt   int             `json:"attempt"`
	Host      string          `json:"host"`
	Reason    ledger.Reason   `json:"reason"`
	Submitted time.Time       `json:"submitted_at"`
	Ended     time.Time       `json:"ended_at,omitzero"`
	ArrayID   string          `json:"array_id,omitempty"`
	// ArrayIndex is the task's index in ArrayID (absent: 0).
	ArrayIndex int `json:"array_index,omitempty"`
	// Archived is when the job moved from the ledger to the history
	// stream; zero for a job the ledger holds.
	Archived time.Time `json:"archived_at,omitzero"`
}

func rowOf(j *ledger.Job) jobRow {
	return jobRow{ID: j.ID, Name: j.Name(), Account: j.Account, State: j.State, Priority: j.Priority, GPUs: j.GPUs,
		Cost: j.Cost, Reserved: j.Reserved, Charged: j.Charged, Attempt: j.Attempt, Host: j.Host(), Reason: j.Reason(),
		Submitted: j.SubmittedAt, Ended: j.EndedAt(), ArrayID: j.ArrayID(), ArrayIndex: j.ArrayIndex()}
}

func runJobs(ctx context.Context, e *env, args []string) error {
	c := find("jobs")
	fs := e.flags(c)
	account := fs.String("account", "", "only this account's jobs")
	state := fs.String("state", "", "only jobs in this state: "+stateList())
	limit := fs.Int("limit", 50, "at most this many, newest first (0: all)")
	sinceText := fs.String("since", "", "only jobs that ended at or after this time (or are unfinished), archived ones too: 2026-11-01 or RFC 3339")
	untilText := fs.String("until", "", "only jobs that ended before this time, archived ones too")
	arrayID := fs.String("array", "", "only the tasks of this job array")
	watch := fs.Bool("watch", false, "read the jobs again every --interval and print them each time they change, until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "with --watch: how often to read the jobs")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if *limit < 0 {
		return usagef("--limit %d: want 0 (all) or more", *limit)
	}
	if *state != "" && !slices.Contains(jobStates, ledger.JobState(*state)) {
		return usagef("--state %q: want one of %s", *state, stateList())
	}
	since, err := parseTime("since", *sinceText)
	if err != nil {
		return err
	}
	until, err := parseTime("until", *untilText)
	if err != nil {
		return err
	}
	byEnd := *sinceText != "" || *untilText != ""
	if !*watch && flagSet(fs, "interval") {
		return usagef("--interval is how often --watch reads the jobs; give --watch too")
	}
	if *watch && *interval < 100*time.Millisecond {
		return usagef("--interval %v: want 100ms or more", *interval)
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	filter := client.JobFilter{Account: *account, State: ledger.JobState(*state), Since: since, Until: until, Limit: max(*limit, 0),
		ArrayID: *arrayID}
	if !*watch {
		out, err := listJobs(ctx, e, s, filter, byEnd)
		if err != nil {
			return err
		}
		_, err = io.WriteString(e.stdout, out)
		return err
	}
	// Read again every interval and print the list when it changed, until
	// interrupted: a table under the time it was read, or a JSON line.
	last := ""
	for {
		out, err := listJobs(ctx, e, s, filter, byEnd)
		if ctx.Err() != nil {
			return nil // Ctrl-C ends the watch
		}
		switch {
		case err != nil:
			// A watch rides out a server that is away for a while: it
			// says so and reads again at the next interval.
			fmt.Fprintf(e.stderr, "%s cannot read the jobs (trying again in %v): %v\n", time.Now().Format("15:04:05"), *interval, err)
			last = ""
		case out != last:
			if e.output != "json" {
				fmt.Fprintf(e.stdout, "\n%s (every %v; Ctrl-C stops)\n", time.Now().Format("15:04:05"), *interval)
			}
			if _, err := io.WriteString(e.stdout, out); err != nil {
				return err
			}
			last = out
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*interval):
		}
	}
}

// listJobs reads the jobs filter selects and returns them as jobs prints
// them: a table, or one line of JSON.
func listJobs(ctx context.Context, e *env, s *session, filter client.JobFilter, byEnd bool) (string, error) {
	page, err := s.c.Jobs(ctx, filter)
	if err != nil {
		return "", bucketHint(err)
	}
	warnForeign(e, page.Foreign)
	rows := make([]jobRow, 0, len(page.Jobs))
	for _, j := range page.Jobs {
		r := rowOf(j.Job)
		if j.Archived != nil {
			r.Archived = j.Archived.ArchivedAt
		}
		rows = append(rows, r)
	}
	var b strings.Builder
	if e.output == "json" {
		err := printJSON(&b, rows)
		return b.String(), err
	}
	if byEnd {
		t := newTable(&b, "JOB", "NAME", "ACCOUNT", "STATE", "PRI", "GPUS", "COST", "CHARGED", "ATTEMPT", "HOST", "SUBMITTED", "ENDED", "ARCHIVED", "REASON")
		for _, r := range rows {
			t.row(r.ID, dash(r.Name), r.Account, r.State, r.Priority, r.GPUs, r.Cost, r.Charged, r.Attempt, dash(r.Host), when(r.Submitted), when(r.Ended), when(r.Archived), dash(string(r.Reason)))
		}
		err := t.flush()
		return b.String(), err
	}
	t := newTable(&b, "JOB", "NAME", "ACCOUNT", "STATE", "PRI", "GPUS", "COST", "CHARGED", "ATTEMPT", "HOST", "SUBMITTED", "REASON")
	for _, r := range rows {
		t.row(r.ID, dash(r.Name), r.Account, r.State, r.Priority, r.GPUs, r.Cost, r.Charged, r.Attempt, dash(r.Host), when(r.Submitted), dash(string(r.Reason)))
	}
	err = t.flush()
	return b.String(), err
}

// jobView is a job as job --output json prints it: the ledger's record
// with its durations as strings, and when it left the ledger if it did.
type jobView struct {
	ledger.JobRecord           // not a *ledger.Job, whose MarshalJSON would leave out the fields below
	Walltime         string    `json:"walltime"`
	Runtime          string    `json:"runtime,omitempty"` // once it has ended; runtime_ms counts the same in milliseconds
	ArchivedAt       time.Time `json:"archived_at,omitzero"`
	ArchivedSeq      uint64    `json:"archived_seq,omitempty"`
}

// parseTime reads a --since or --until value: a date (2026-11-01, local
// midnight) or an RFC 3339 time. Empty is the zero time.
func parseTime(flag, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, v, time.Local); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--%s %q: want a date (2026-11-01) or an RFC 3339 time (2026-11-01T09:00:00Z)", flag, v)
}

func runJob(ctx context.Context, e *env, args []string) error {
	c := find("job")
	fs := e.flags(c)
	account := fs.String("account", "", "the job's account, to read its history if it was archived (default: any account, which needs an admin's rights)")
	job, s, err := e.jobArg(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	j, archived, err := s.c.Lookup(ctx, *account, job)
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no job %s, in the ledger or its history", job)
	}
	if err != nil {
		return err
	}
	if e.output == "json" {
		v := jobView{JobRecord: j.Record(), Walltime: j.Walltime.String()}
		if j.ExitCode() != nil {
			v.Runtime = (time.Duration(j.RuntimeMS()) * time.Millisecond).String()
		}
		if archived != nil {
			// The record as the ledger held it, with when it left.
			v.ArchivedAt, v.ArchivedSeq = archived.ArchivedAt, archived.Seq
		}
		return printJSON(e.stdout, v)
	}
	w := e.stdout
	fmt.Fprintf(w, "job       %s\n", j.ID)
	if j.Name() != "" {
		fmt.Fprintf(w, "name      %s\n", j.Name())
	}
	fmt.Fprintf(w, "account   %s\nstate     %s", j.Account, j.State)
	if j.Reason() != "" {
		fmt.Fprintf(w, " (%s)", j.Reason())
	}
	fmt.Fprintln(w)
	if archived != nil {
		fmt.Fprintf(w, "archived  %s (command %d): the ledger no longer holds it; this is its final record, from the history\n",
			when(archived.ArchivedAt), archived.Seq)
	}
	if j.Message() != "" {
		fmt.Fprintf(w, "why       %s\n", j.Message())
	}
	fmt.Fprintf(w, "command   %s\n", strings.Join(j.Command, " "))
	fmt.Fprintf(w, "asks      %d GPUs, priority %d, walltime %v, %d attempts at most\n", j.GPUs, j.Priority, j.Walltime, j.MaxAttempts)
	if j.GPUModel() != "" {
		fmt.Fprintf(w, "model     %s (only hosts whose every GPU is this model)\n", j.GPUModel())
	}
	if j.Workdir() != "" {
		fmt.Fprintf(w, "workdir   %s\n", j.Workdir())
	}
	if j.ArrayID() != "" {
		fmt.Fprintf(w, "array     task %d of array %s (gpuq jobs --array %s)\n", j.ArrayIndex(), j.ArrayID(), j.ArrayID())
	}
	pricing := "fixed cost"
	if j.Metered {
		pricing = "metered: reserved for gpus × walltime at the highest price, charged for the runtime used"
	}
	if j.Hold {
		pricing += "; waits for credits when the account cannot pay"
	}
	fmt.Fprintf(w, "credits   cost %d, reserved now %d, charged %d (%s)\n", j.Cost, j.Reserved, j.Charged, pricing)
	if j.Attempt > 0 {
		fmt.Fprintf(w, "attempt   %d on %s", j.Attempt, dash(j.Host()))
		if len(j.Devices()) > 0 {
			fmt.Fprintf(w, " with %s", strings.Join(j.Devices(), ","))
		}
		fmt.Fprintln(w)
	}
	if j.ExitCode() != nil {
		fmt.Fprintf(w, "exit      %d after %v\n", *j.ExitCode(), time.Duration(j.RuntimeMS())*time.Millisecond)
	}
	fmt.Fprintf(w, "times     submitted %s, dispatched %s, started %s, ended %s\n",
		when(j.SubmittedAt), when(j.DispatchedAt()), when(j.StartedAt()), when(j.EndedAt()))
	if len(j.Attempts()) > 0 {
		fmt.Fprintln(w, "attempts:")
		t := newTable(w, "  #", "HOST", "OUTCOME", "REASON", "STARTED", "ENDED", "CHARGED", "MESSAGE")
		for _, a := range j.Attempts() {
			t.row(fmt.Sprintf("  %d", a.N), a.Host, a.Outcome, dash(string(a.Reason)), when(a.StartedAt), when(a.EndedAt), a.Charged, dash(a.Message))
		}
		return t.flush()
	}
	return nil
}
