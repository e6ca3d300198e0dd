package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

func init() {
	register(&command{
		name:    "account",
		summary: "create, fund, cap and inspect accounts",
		usage: `account create NAME --balance N [--id OP]
account grant NAME AMOUNT [--id OP]
account limits NAME [--max-jobs N] [--max-gpus N]
account refill NAME --rate N --cap N
account weight NAME W
account show NAME
account list`,
		example: `  gpuq account create vision --balance 1000
  gpuq account grant vision 500          # a negative amount takes credits away
  gpuq account limits vision --max-jobs 4 --max-gpus 16   # 0 removes a cap
  gpuq account refill vision --rate 100 --cap 2000        # credits per hour, up to a cap
  gpuq account show vision --output json`,
		run: runAccount,
	})
}

// accountView is the JSON form of an account.
type accountView struct {
	ID          string         `json:"id"`
	Balance     ledger.Credits `json:"balance"`
	Reserved    ledger.Credits `json:"reserved"`
	Available   ledger.Credits `json:"available"`
	RunningJobs int            `json:"running_jobs"`
	RunningGPUs int            `json:"running_gpus"`
	Limits      ledger.Limits  `json:"limits"`
	Weight      int            `json:"weight"`
	RefillRate  ledger.Credits `json:"refill_rate_per_hour"`
	RefillCap   ledger.Credits `json:"refill_cap"`
}

func viewAccount(a *ledger.Account) accountView {
	return accountView{ID: a.ID, Balance: a.Balance, Reserved: a.Reserved, Available: a.Available(),
		RunningJobs: a.RunningJobs, RunningGPUs: a.RunningGPUs, Limits: a.Limits, Weight: a.Weight,
		RefillRate: a.Refill.RatePerHour, RefillCap: a.Refill.Cap}
}

func runAccount(ctx context.Context, e *env, args []string) error {
	c := find("account")
	fs := e.flags(c)
	id := fs.String("id", "", "op id, to make a retried command safe (default: a fresh one)")
	balance := fs.Int64("balance", 0, "create: the starting balance")
	maxJobs := fs.Int("max-jobs", 0, "limits: most jobs running at once (0: no cap)")
	maxGPUs := fs.Int("max-gpus", 0, "limits: most GPUs in use at once (0: no cap)")
	rate := fs.Int64("rate", 0, "refill: credits added per hour")
	refillCap := fs.Int64("cap", 0, "refill: the balance the refill stops at")
	pos, err := e.parse(c, fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want a subcommand: create, grant, limits, refill, weight, show or list")
	}
	sub, rest := pos[0], pos[1:]
	// Every argument is checked before connecting, so a mistake is a usage
	// error even when no server is reachable.
	var name string
	if sub != "list" {
		if len(rest) == 0 {
			return usagef("account %s: want the account name", sub)
		}
		name = rest[0]
	}
	op := ledger.Admin{Account: name, ID: *id}
	switch sub {
	case "list", "show": // they read; handled once connected
	case "create":
		op.Op, op.Balance = ledger.OpCreate, ledger.Credits(*balance)
	case "grant":
		if len(rest) != 2 {
			return usagef("account grant: want NAME AMOUNT")
		}
		amount, err := strconv.ParseInt(rest[1], 10, 64)
		if err != nil {
			return usagef("account grant: amount %q is not an integer", rest[1])
		}
		op.Op, op.Amount = ledger.OpGrant, ledger.Credits(amount)
	case "limits":
		op.Op, op.Limits = ledger.OpLimits, ledger.Limits{MaxRunningJobs: *maxJobs, MaxRunningGPUs: *maxGPUs}
	case "refill":
		op.Op, op.RatePerHour, op.Cap = ledger.OpRefill, ledger.Credits(*rate), ledger.Credits(*refillCap)
	case "weight":
		if len(rest) != 2 {
			return usagef("account weight: want NAME W")
		}
		w, err := strconv.Atoi(rest[1])
		if err != nil {
			return usagef("account weight: %q is not an integer", rest[1])
		}
		op.Op, op.Weight = ledger.OpWeight, w
	default:
		return usagef("unknown subcommand %q: want create, grant, limits, refill, weight, show or list", sub)
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	switch sub {
	case "list":
		return accountList(ctx, e, s)
	case "show":
		a, err := s.c.Account(ctx, name)
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("no account %s; create it with gpuq account create %s --balance N", name, name)
		}
		if err != nil {
			return bucketHint(err)
		}
		return printAccount(e, a)
	}
	if op.ID == "" {
		op.ID = newID(string(op.Op))
	}
	ev, err := s.c.Admin(ctx, op)
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		if e.output == "json" && ev.Type != "" {
			if perr := printJSON(e.stdout, ev); perr != nil {
				return perr
			}
		}
		return exitError{exitRejected, fmt.Errorf("%s %s: %s (%s)", sub, name, rej.Message, rej.Reason)}
	}
	if err != nil {
		return err
	}
	if e.output == "json" {
		return printJSON(e.stdout, ev)
	}
	fmt.Fprintf(e.stdout, "%s: %s (balance %d, reserved %d, available %d)\n", ev.Type, ev.Message, ev.Balance, ev.Reserved, ev.Available)
	return nil
}

func printAccount(e *env, a *ledger.Account) error {
	v := viewAccount(a)
	if e.output == "json" {
		return printJSON(e.stdout, v)
	}
	t := newTable(e.stdout, "ACCOUNT", "BALANCE", "RESERVED", "AVAILABLE", "RUNNING", "GPUS", "MAX JOBS", "MAX GPUS", "WEIGHT", "REFILL/H", "CAP")
	t.row(v.ID, v.Balance, v.Reserved, v.Available, v.RunningJobs, v.RunningGPUs, capText(v.Limits.MaxRunningJobs),
		capText(v.Limits.MaxRunningGPUs), v.Weight, v.RefillRate, v.RefillCap)
	return t.flush()
}

func capText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func accountList(ctx context.Context, e *env, s *session) error {
	list, err := s.c.Accounts(ctx)
	if err != nil {
		return bucketHint(err)
	}
	warnForeign(e, list.Foreign)
	out := make([]accountView, 0, len(list.Accounts))
	for _, a := range list.Accounts {
		out = append(out, viewAccount(a))
	}
	if e.output == "json" {
		return printJSON(e.stdout, out)
	}
	t := newTable(e.stdout, "ACCOUNT", "BALANCE", "RESERVED", "AVAILABLE", "RUNNING", "GPUS", "WEIGHT")
	for _, v := range out {
		t.row(v.ID, v.Balance, v.Reserved, v.Available, v.RunningJobs, v.RunningGPUs, v.Weight)
	}
	return t.flush()
}
