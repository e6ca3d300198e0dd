package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

func init() {
	register(&command{
		name:    "prices",
		summary: "set or show the price table of metered jobs (credits per GPU-hour, by GPU model)",
		usage: `prices set [--model NAME=PRICE]... [--default PRICE] [--failure-percent P] [--fixed-cost any|floor|metered_only] [--replace] [--id OP]
prices show`,
		example: `  gpuq prices set --model "NVIDIA H100 80GB HBM3=360" --model "NVIDIA H200 141GB HBM3e=720" --default 300 --failure-percent 50
  gpuq prices set --default 300 --fixed-cost floor     # a job naming its cost pays at least gpus × walltime × the highest price
  gpuq prices set --default 300 --fixed-cost metered_only
  gpuq prices set --failure-percent 40                 # changes only the failure percent
  gpuq prices set --replace --default 300             # a new table: every model named before is dropped
  gpuq prices show
  # prices set changes only what it is given: gpuq reads the table and sends it
  #   whole with those values changed (--replace starts from an empty table,
  #   failure percent 100), so two admins setting prices at the same moment
  #   can undo each other's change (the later one wins)
  # a metered job (submitted without --cost) reserves gpus × walltime × the highest price, and is
  # charged ⌈gpus × ⌈runtime⌉s × its model's price / 3600⌉; a failed or cancelled one pays
  # --failure-percent of that; one ended by the infrastructure pays nothing`,
		run: runPrices,
	})
	register(&command{
		name:    "retry",
		summary: "submit a failed or cancelled job again, as a new job with a new reservation",
		usage:   "retry ID [--id NEW]",
		example: `  gpuq retry train-42               # submits train-42-retry1 with the same terms
  gpuq retry train-42 --id train-42b`,
		run: runRetry,
	})
}

// modelPrices collects repeated --model NAME=PRICE flags.
type modelPrices map[string]ledger.Credits

func (m modelPrices) String() string { return fmt.Sprint(map[string]ledger.Credits(m)) }
func (m modelPrices) Set(v string) error {
	i := strings.LastIndex(v, "=")
	if i <= 0 {
		return fmt.Errorf("want NAME=PRICE, got %q", v)
	}
	p, err := strconv.ParseInt(v[i+1:], 10, 64)
	if err != nil {
		return fmt.Errorf("price %q is not an integer", v[i+1:])
	}
	m[v[:i]] = ledger.Credits(p)
	return nil
}

func runPrices(ctx context.Context, e *env, args []string) error {
	c := find("prices")
	fs := e.flags(c)
	models := modelPrices{}
	fs.Var(models, "model", "a model's price per GPU-hour, NAME=PRICE (repeatable); NAME as gpuq hosts shows it")
	def := fs.Int64("default", 0, "price per GPU-hour of models not named (default: the table's, 0 for a new one)")
	fail := fs.Int("failure-percent", 100, "share of its runtime charge a failed or cancelled metered job pays (default: the table's, 100 for a new one)")
	fixed := fs.String("fixed-cost", "any", "what a job naming its own cost may ask: any, floor (at least gpus × walltime × the highest price), or metered_only (default: the table's)")
	replace := fs.Bool("replace", false, "start from an empty table rather than the current one")
	id := fs.String("id", "", "op id, to make a retried command safe (default: a fresh one)")
	pos, err := e.parse(c, fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "set" && pos[0] != "show" {
		return usagef("want set or show")
	}
	if pos[0] == "show" {
		if err := onlyFlags(fs, "prices show", []string{"model", "default", "failure-percent", "fixed-cost", "replace", "id"}, nil); err != nil {
			return err
		}
	}
	policy := ledger.FixedCostPolicy(*fixed)
	if policy == "any" {
		policy = ledger.FixedCostAny
	}
	if !policy.Valid() {
		return usagef("--fixed-cost %q: want any, floor or metered_only", *fixed)
	}
	if pos[0] == "set" && !*replace && len(models) == 0 && !flagSet(fs, "default") && !flagSet(fs, "failure-percent") && !flagSet(fs, "fixed-cost") {
		return usagef("prices set: give what to change (--model, --default, --failure-percent, --fixed-cost), or --replace")
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	if pos[0] == "show" {
		p, err := s.c.Pricing(ctx)
		if err != nil {
			return err
		}
		if e.output == "json" {
			return printJSON(e.stdout, p)
		}
		if p == nil {
			fmt.Fprintln(e.stdout, "no price table: metered jobs are refused; set one with gpuq prices set")
			return nil
		}
		names := make([]string, 0, len(p.PerGPUHour))
		for m := range p.PerGPUHour {
			names = append(names, m)
		}
		sort.Strings(names)
		t := newTable(e.stdout, "MODEL", "CREDITS/GPU-HOUR")
		for _, m := range names {
			t.row(m, p.PerGPUHour[m])
		}
		t.row("(any other)", p.Default)
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "metered jobs reserve at %d per GPU-hour; failed or cancelled ones pay %d%% of their runtime charge\n", p.MaxPrice(), p.FailurePercent)
		switch p.FixedCost {
		case ledger.FixedCostFloor:
			fmt.Fprintf(e.stdout, "fixed costs: at least gpus × walltime × %d per GPU-hour (the highest price)\n", p.MaxPrice())
		case ledger.FixedCostRefused:
			fmt.Fprintln(e.stdout, "fixed costs: refused; jobs are metered only")
		default:
			fmt.Fprintln(e.stdout, "fixed costs: any (set --fixed-cost floor or metered_only to stop submitters naming their own price)")
		}
		return nil
	}
	// The command sets the whole table: start from the current one and
	// change what the user named.
	op := ledger.SetPricing{ID: *id, PerGPUHour: map[string]ledger.Credits{}, FailurePercent: 100}
	if !*replace {
		cur, err := s.c.Pricing(ctx)
		if err != nil {
			return err
		}
		if cur != nil {
			op.PerGPUHour, op.Default, op.FailurePercent, op.FixedCost = maps.Clone(cur.PerGPUHour), cur.Default, cur.FailurePercent, cur.FixedCost
			if op.PerGPUHour == nil {
				op.PerGPUHour = map[string]ledger.Credits{}
			}
		}
	}
	maps.Copy(op.PerGPUHour, models)
	if flagSet(fs, "default") {
		op.Default = ledger.Credits(*def)
	}
	if flagSet(fs, "failure-percent") {
		op.FailurePercent = *fail
	}
	if flagSet(fs, "fixed-cost") {
		op.FixedCost = policy
	}
	if op.ID == "" {
		op.ID = newID("prices")
	}
	if err := op.Validate(); err != nil {
		return usagef("prices set: %v", err)
	}
	ev, err := s.c.SetPricing(ctx, op)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		return exitError{exitRejected, fmt.Errorf("prices: %s (%s)", rej.Message, rej.Reason)}
	}
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, ev)
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", ev.Type, ev.Message)
	return nil
}

func runRetry(ctx context.Context, e *env, args []string) error {
	c := find("retry")
	fs := e.flags(c)
	newJob := fs.String("id", "", "the new job's id (default: ID-retryN)")
	job, s, err := e.jobArg(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	j, err := s.job(ctx, job)
	if err != nil {
		return err
	}
	if j.State != ledger.StateFailed && j.State != ledger.StateCancelled {
		return fmt.Errorf("job %s is %s; only a failed or cancelled job can be retried", job, j.State)
	}
	id := *newJob
	for n := 1; id == ""; n++ {
		cand := fmt.Sprintf("%s-retry%d", job, n)
		if len(cand) > 64 {
			return usagef("%s-retry%d is too long for a job id; give one with --id", job, n)
		}
		if _, err := s.c.Job(ctx, cand); errors.Is(err, client.ErrNotFound) {
			id = cand
		} else if err != nil {
			return err
		}
	}
	sub := ledger.Submit{Account: j.Account, ID: id, Priority: j.Priority, GPUs: j.GPUs, Command: j.Command, Env: j.Env(),
		Walltime: j.Walltime, MaxAttempts: j.MaxAttempts, Metered: j.Metered, Hold: j.Hold}
	sub.Name, sub.GPUModel, sub.Workdir = j.Name(), j.GPUModel(), j.Workdir()
	sub.ArrayID, sub.ArrayIndex = j.ArrayID(), j.ArrayIndex()
	if !j.Metered {
		sub.Cost = j.Cost
	}
	ev, err := s.c.Submit(ctx, sub)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		return exitError{exitRejected, fmt.Errorf("retry of %s as %s rejected (%s): %s", job, id, rej.Reason, rej.Message)}
	}
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, ev)
	}
	fmt.Fprintf(e.stdout, "%s %s (a retry of %s): %s\n", ev.Type, id, job, ev.Message)
	return nil
}
