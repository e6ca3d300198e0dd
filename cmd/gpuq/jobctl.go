package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
)

func init() {
	register(&command{
		name:    "hold",
		summary: "pause a waiting job: it keeps its reservation and place but is not dispatched until released",
		usage:   "hold ID [--account A]",
		example: `  gpuq hold eval-7
  gpuq why eval-7      # user_hold
  gpuq release eval-7
  # only a waiting job (pending, or held for credits) can be held; its account
  #   or the admin may hold it`,
		run: func(ctx context.Context, e *env, args []string) error {
			return runModify(ctx, e, "hold", ledger.OpHold, args)
		},
	})
	register(&command{
		name:    "release",
		summary: "let a job paused by gpuq hold be dispatched again",
		usage:   "release ID [--account A]",
		example: `  gpuq release eval-7`,
		run: func(ctx context.Context, e *env, args []string) error {
			return runModify(ctx, e, "release", ledger.OpRelease, args)
		},
	})
	register(&command{
		name:    "update",
		summary: "change a waiting job: its priority",
		usage:   "update ID --priority P [--account A]",
		example: `  gpuq update eval-7 --priority 50
  # only while the job waits (pending or held); a resubmission of the
  #   original terms under the same id is still a harmless duplicate`,
		run: func(ctx context.Context, e *env, args []string) error {
			return runModify(ctx, e, "update", ledger.OpPriority, args)
		},
	})
}

// runModify runs gpuq hold, release or update.
func runModify(ctx context.Context, e *env, name string, op ledger.ModifyOp, args []string) error {
	c := find(name)
	fs := e.flags(c)
	account := fs.String("account", "", "the job's account (default: read from the job)")
	var priority *int
	if op == ledger.OpPriority {
		priority = fs.Int("priority", 0, "the new priority, -1000 to 1000; higher runs first")
	}
	job, s, err := e.jobArg(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	m := ledger.Modify{Job: job, Op: op}
	if op == ledger.OpPriority {
		if !flagSet(fs, "priority") {
			return usagef("give the new priority: gpuq update %s --priority P", job)
		}
		if *priority < ledger.MinPriority || *priority > ledger.MaxPriority {
			return usagef("--priority %d is out of range [%d, %d]", *priority, ledger.MinPriority, ledger.MaxPriority)
		}
		m.Priority = *priority
	}
	if *account == "" {
		j, err := s.job(ctx, job)
		if err != nil {
			return err
		}
		*account = j.Account
	}
	m.Account = *account
	ev, err := s.c.Modify(ctx, m)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		if e.output == "json" && ev.Type != "" {
			if perr := printJSON(e.stdout, ev); perr != nil {
				return perr
			}
		}
		return exitError{exitRejected, fmt.Errorf("%s %s: %s (%s)", name, job, rej.Message, rej.Reason)}
	}
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, ev)
	}
	fmt.Fprintf(e.stdout, "%s %s: %s\n", ev.Type, job, ev.Message)
	return nil
}

// idList collects job ids from repeated flags, each a comma-separated list.
type idList []string

func (l *idList) String() string { return strings.Join(*l, ",") }
func (l *idList) Set(v string) error {
	for _, id := range strings.Split(v, ",") {
		if err := subjects.CheckToken("job id", id); err != nil {
			return err
		}
		*l = append(*l, id)
	}
	return nil
}

// Quote is what gpuq submit --dry-run prints: what the submission would
// reserve, whether the account can pay, and when it might start.
type Quote struct {
	Job     string         `json:"job"`
	Account string         `json:"account"`
	Metered bool           `json:"metered"`
	Reserve ledger.Credits `json:"reserve"` // what the fold would reserve: exact under the price table read
	// Outcome is what the submission would meet now: accepted, held or
	// rejected (with Reason and Message).
	Outcome ledger.EventType `json:"outcome"`
	Reason  ledger.Reason    `json:"reason,omitempty"`
	Message string           `json:"message,omitempty"`
	// Available is the account's balance, with the refill accrued up to
	// At, less what it has reserved.
	Available ledger.Credits `json:"available"`
	CanPay    bool           `json:"can_pay"`
	// CreditsAt is when the account can pay (now if it can): the refill,
	// exactly; absent when it never will without a grant.
	CreditsAt *time.Time `json:"credits_at,omitempty"`
	// WaitsFor lists the dependencies that have not ended yet.
	WaitsFor []string `json:"waits_for,omitempty"`
	// QueuedAhead is how many jobs the scheduler's last published pass
	// had queued (all accounts, before fairness and priority sort them):
	// an upper bound on the jobs ahead; -1 when no pass is published.
	QueuedAhead int `json:"queued_ahead"`
	// EarliestStart is the earliest it could start: when the account can
	// pay, if nothing else holds it back. It is an estimate, and says
	// nothing of hosts, the queue or dependencies, which Estimate names.
	EarliestStart *time.Time `json:"earliest_start,omitempty"`
	Estimate      string     `json:"estimate"`
	At            time.Time  `json:"at"`
}

// dryRun quotes submission s without submitting it: the reservation by the
// ledger's own pricing ([ledger.Pricing.Quote], the function the fold
// uses), the account's credits with its refill up to now, and an estimated
// start from the refill ([scheduler.AffordableAt]), the dependencies and
// the scheduler's last published pass.
func dryRun(ctx context.Context, e *env, sess *session, s ledger.Submit) error {
	now := time.Now().UTC()
	q := Quote{Job: s.ID, Account: s.Account, Metered: s.Metered, At: now, QueuedAhead: -1}
	if err := s.WithDefaults().Validate(); err != nil {
		return usagef("%v", err)
	}
	p, err := sess.c.Pricing(ctx)
	if err != nil {
		return bucketHint(err)
	}
	a, err := sess.c.Account(ctx, s.Account)
	switch {
	case errors.Is(err, client.ErrNotFound):
		q.Outcome, q.Reason, q.Message = ledger.EventRejected, ledger.ReasonUnknownAccount, fmt.Sprintf("account %s does not exist", s.Account)
		return printQuote(e, q)
	case err != nil:
		return bucketHint(err)
	}
	cost, reason, msg := p.Quote(s)
	if reason != "" {
		q.Outcome, q.Reason, q.Message = ledger.EventRejected, reason, msg
		return printQuote(e, q)
	}
	q.Reserve = cost
	for _, id := range append(append([]string(nil), s.After...), s.AfterAny...) {
		d, err := sess.c.Job(ctx, id)
		switch {
		case errors.Is(err, client.ErrNotFound):
			q.Outcome, q.Reason, q.Message = ledger.EventRejected, ledger.ReasonUnknownDependency, fmt.Sprintf("dependency %s is not in the ledger (never submitted, or archived)", id)
			return printQuote(e, q)
		case err != nil:
			return err
		case !d.State.Terminal():
			q.WaitsFor = append(q.WaitsFor, id)
		}
	}
	// Held jobs are admitted in submit order: a held submission waits
	// behind them, so it needs their cost too.
	ahead := ledger.Credits(0)
	if s.Hold {
		for _, id := range a.HeldJobs {
			if j, err := sess.c.Job(ctx, id); err == nil {
				ahead += j.Cost
			}
		}
	}
	q.Available = a.BalanceAt(now) - a.Reserved
	q.CanPay = cost <= q.Available && (!s.Hold || len(a.HeldJobs) == 0)
	switch {
	case q.CanPay:
		q.Outcome = ledger.EventAccepted
		q.CreditsAt = &now
	case !s.Hold:
		q.Outcome, q.Reason = ledger.EventRejected, ledger.ReasonInsufficientCredits
		q.Message = fmt.Sprintf("it would reserve %d but account %s has %d available; --hold would wait for credits", cost, a.ID, q.Available)
	default:
		q.Outcome = ledger.EventHeld
	}
	if !q.CanPay {
		if at, ok := scheduler.AffordableAt(a, cost+ahead); ok {
			at = later(at, now).UTC()
			q.CreditsAt = &at
		}
	}
	if pass, err := sess.c.PassFact(ctx); err == nil && pass != nil {
		q.QueuedAhead = pass.Queued
	}
	q.EarliestStart = q.CreditsAt
	q.Estimate = estimateNote(q)
	return printQuote(e, q)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// estimateNote says, in words, what the estimated start rests on and what
// it cannot know.
func estimateNote(q Quote) string {
	var parts []string
	switch {
	case q.Outcome == ledger.EventRejected:
		return "it would not start: the submission would be rejected"
	case q.CreditsAt == nil:
		parts = append(parts, "the refill never covers it: an admin must grant credits")
	case q.CanPay:
		parts = append(parts, "the account can pay now")
	default:
		parts = append(parts, fmt.Sprintf("the refill lets the account pay at %s (exact, unless the account spends or is granted credits first)", q.CreditsAt.Format(time.RFC3339)))
	}
	if len(q.WaitsFor) > 0 {
		parts = append(parts, "then it waits for "+strings.Join(q.WaitsFor, ", ")+" to end (no time is known for that)")
	}
	switch {
	case q.QueuedAhead < 0:
		parts = append(parts, "no scheduler pass is published, so the queue is unknown")
	case q.QueuedAhead == 0:
		parts = append(parts, "the queue was empty at the last pass: it starts at the next pass if a host has its GPUs free")
	default:
		parts = append(parts, fmt.Sprintf("at the last pass %d jobs were queued; those of higher priority, or of accounts with a smaller fair share, go first, and hosts must have its GPUs free (gpuq why shows it once submitted)", q.QueuedAhead))
	}
	return "estimate: " + strings.Join(parts, "; ")
}

func printQuote(e *env, q Quote) error {
	if q.Estimate == "" {
		q.Estimate = estimateNote(q)
	}
	if e.output == "json" {
		if err := printJSON(e.stdout, q); err != nil {
			return err
		}
		return quoteExit(q)
	}
	w := e.stdout
	fmt.Fprintf(w, "dry run of %s for account %s: nothing submitted\n", q.Job, q.Account)
	kind := "fixed cost"
	if q.Metered {
		kind = "metered: gpus × walltime × the highest price"
	}
	fmt.Fprintf(w, "  would reserve  %d (%s)\n", q.Reserve, kind)
	fmt.Fprintf(w, "  outcome now    %s", q.Outcome)
	if q.Reason != "" {
		fmt.Fprintf(w, " (%s): %s", q.Reason, q.Message)
	}
	fmt.Fprintln(w)
	if q.Outcome != ledger.EventRejected || q.Reason == ledger.ReasonInsufficientCredits {
		fmt.Fprintf(w, "  available      %d (refill accrued to now)\n", q.Available)
	}
	if q.EarliestStart != nil {
		fmt.Fprintf(w, "  earliest start %s\n", q.EarliestStart.Local().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  %s\n", q.Estimate)
	return quoteExit(q)
}

// quoteExit is how a dry run exits: 4 when the submission would be
// rejected, in either output format.
func quoteExit(q Quote) error {
	if q.Outcome == ledger.EventRejected {
		return exitError{code: exitRejected}
	}
	return nil
}
