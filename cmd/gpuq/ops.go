package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
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
	if *attempt < 0 {
		return usagef("--attempt %d: want 1 or more (default: the latest)", *attempt)
	}
	j, err := s.job(ctx, job)
	if err != nil {
		return err
	}
	if *attempt == 0 && j.Attempt == 0 {
		fmt.Fprintf(e.stderr, "job %s has not run yet (%s)\n", job, j.State)
		return nil
	}
	var kept int64 // bytes of output printed so far
	for ch, err := range s.c.Logs(ctx, j, client.LogOptions{Attempt: *attempt, Follow: *followFlag}) {
		switch {
		case errors.Is(err, client.ErrBadChunk):
			fmt.Fprintf(e.stderr, "gpuq: skipping a log message: %v\n", err)
			continue
		case errors.Is(err, client.ErrNoAttempt):
			return fmt.Errorf("job %s has no attempt %d on record (its latest is %d)", job, cmp.Or(*attempt, j.Attempt), j.Attempt)
		case err != nil:
			return err
		}
		if e.output == "json" {
			if err := printJSON(e.stdout, viewChunk(ch)); err != nil {
				return err
			}
		} else if ch.End == "" {
			kept += int64(len(ch.Data))
			if ch.Stream == wire.Stderr {
				_, _ = e.stderr.Write(ch.Data) // the terminal went away; nothing to do
			} else {
				_, _ = e.stdout.Write(ch.Data)
			}
		}
		if ch.End != "" && e.output != "json" {
			if ch.Truncated {
				fmt.Fprintf(e.stderr, "gpuq: output cut here, after %d bytes: %s\n", kept, droppedText(ch.Dropped))
			}
			fmt.Fprintf(e.stderr, "gpuq: attempt %d ended: %s\n", ch.Attempt, ch.End)
		}
	}
	return nil // everything stored so far is printed, or the attempt ended
}

// chunkView is a chunk of output as logs --output json prints it, a line
// each. Data is the bytes as text when they are UTF-8; otherwise Encoding
// is "base64" and Data is their standard base64.
type chunkView struct {
	Account   string `json:"account"`
	Job       string `json:"job"`
	Host      string `json:"host"`
	Attempt   int    `json:"attempt"`
	Seq       int    `json:"seq"`
	Stream    string `json:"stream,omitempty"`
	Data      string `json:"data"`
	Encoding  string `json:"encoding,omitempty"`
	End       string `json:"end,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Dropped   int64  `json:"dropped_bytes,omitempty"`
}

func viewChunk(c wire.LogChunk) chunkView {
	v := chunkView{Account: c.Account, Job: c.Job, Host: c.Host, Attempt: c.Attempt, Seq: c.Seq, Stream: c.Stream,
		Data: string(c.Data), End: c.End, Truncated: c.Truncated, Dropped: c.Dropped}
	if !utf8.Valid(c.Data) {
		v.Data, v.Encoding = base64.StdEncoding.EncodeToString(c.Data), "base64"
	}
	return v
}

// droppedText says how much output past the worker's cap was dropped;
// dropped is 0 from a worker that does not count it.
func droppedText(dropped int64) string {
	if dropped == 0 {
		return "the worker dropped what the attempt wrote past its cap (gpuq worker --max-log-bytes); this worker does not say how much"
	}
	return fmt.Sprintf("the worker dropped the %d bytes the attempt wrote past its cap (gpuq worker --max-log-bytes)", dropped)
}

// readHosts reads every live heartbeat (client.Heartbeats), warning on warn
// about a value that is not one, which it leaves out.
func readHosts(ctx context.Context, s *session, warn io.Writer) ([]wire.Heartbeat, error) {
	hosts, foreign, err := s.c.Heartbeats(ctx)
	for _, f := range foreign {
		fmt.Fprintf(warn, "gpuq: leaving out host key %s: %v\n", f.Key, f.Err)
	}
	return hosts, bucketHint(err)
}

func runHosts(ctx context.Context, e *env, args []string) error {
	c := find("hosts")
	fs := e.flags(c)
	s, err := e.noArgs(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	list, err := s.c.Hosts(ctx)
	if err != nil {
		return bucketHint(err)
	}
	for _, f := range list.Foreign {
		fmt.Fprintf(e.stderr, "gpuq: leaving out host key %s: %v\n", f.Key, f.Err)
	}
	if e.output == "json" {
		return printJSON(e.stdout, list.Hosts)
	}
	if len(list.Hosts) == 0 {
		fmt.Fprintln(e.stdout, "no live hosts: no worker is heartbeating (start one with gpuq worker, or gpuq dev)")
		return nil
	}
	t := newTable(e.stdout, "HOST", "KIND", "MODEL", "GPUS", "FREE", "CLAIMED", "BUSY", "UNHEALTHY", "RUNNING", "SEEN")
	for _, v := range list.Hosts {
		var run []string
		for _, r := range v.Running {
			run = append(run, fmt.Sprintf("%s#%d", r.Job, r.Attempt))
		}
		t.row(v.Host, v.Kind(), dash(v.Model), v.GPUs, v.Free, v.Claimed, v.Busy, v.Unhealthy, dash(strings.Join(run, ",")), when(v.Seen))
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

// auditView is an audit report as audit --output json prints it: the
// stuck command's wait as a duration string.
type auditView struct {
	*client.AuditReport
	Stuck *stuckView `json:"stuck,omitempty"`
}

type stuckView struct {
	*client.StuckFold
	Waited   string `json:"waited"`
	WaitedNS any    `json:"waited_ns,omitempty"` // always nil: hides StuckFold's count of nanoseconds
}

// auditReport is what audit found (client.Audit).
type auditReport = client.AuditReport

func runAudit(ctx context.Context, e *env, args []string) error {
	c := find("audit")
	fs := e.flags(c)
	stuckAfter := fs.Duration("stuck-after", 2*time.Minute, "how long a command may wait unapplied before audit says the scheduler is stuck")
	full := fs.Bool("full", false, "read and check every account's whole journal from the start, not only from its newest seal")
	margin := fs.Duration("seal-margin", client.SealMargin, "how long before each account's newest seal (by its command's time) to start reading its journal: the most the journal stream's server clock may run behind the command stream's")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if *margin < 0 {
		return usagef("--seal-margin %v: want 0 or more", *margin)
	}
	if *full && flagSet(fs, "seal-margin") {
		return usagef("--full reads every journal from its start and takes no --seal-margin")
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	o := client.AuditOptions{Full: *full, SealMargin: *margin, StuckAfter: *stuckAfter, Now: time.Now()}
	if *margin == 0 {
		o.SealMargin = -1 // none, where client.AuditOptions reads 0 as the default
	}
	if *stuckAfter <= 0 {
		o.StuckAfter = -1 // any wait is too long
	}
	rep, err := s.c.Audit(ctx, o)
	if err != nil {
		return bucketHint(err)
	}
	if e.output == "json" {
		v := auditView{AuditReport: &rep}
		if rep.Stuck != nil {
			v.Stuck = &stuckView{StuckFold: rep.Stuck, Waited: rep.Stuck.Waited.String()}
		}
		if err := printJSON(e.stdout, v); err != nil {
			return err
		}
	} else if rep.OK {
		fmt.Fprintf(e.stdout, "audit ok: %d accounts agree with %d journal entries up to command %d (%s)\n", rep.Accounts, rep.Entries, rep.Checkpoint, readSummary(rep))
		for _, w := range rep.Whole {
			fmt.Fprintf(e.stdout, "  note: %s\n", w)
		}
		for _, r := range rep.Refused {
			fmt.Fprintf(e.stdout, "  note: command %d is to be refused when folded: %s\n", r.Seq, r.Why)
		}
	} else {
		fmt.Fprintf(e.stdout, "audit FAILED: %d differences up to command %d (%s):\n", len(rep.Differences), rep.Checkpoint, readSummary(rep))
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

// readSummary says how much of the journal audit read.
func readSummary(r auditReport) string {
	if r.From == "start" {
		return fmt.Sprintf("in full: %d journal messages read", r.Read)
	}
	return fmt.Sprintf("from seals: %d of %d journal messages read", r.Read, r.Stored)
}
