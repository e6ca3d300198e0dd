package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

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
account refill NAME [--rate N] [--cap N]
account weight NAME W
account show NAME
account list`,
		example: `  gpuq account create vision --balance 1000
  gpuq account grant vision 500          # a negative amount takes credits away
  gpuq account grant vision -200
  gpuq account limits vision --max-jobs 4 --max-gpus 16   # 0 removes a cap
  gpuq account limits vision --max-gpus 8                 # the job cap stays 4
  gpuq account refill vision --rate 100 --cap 2000        # credits per hour, up to a cap
  gpuq account show vision --output json
  # limits and refill change only the flags they are given: gpuq reads the
  #   account and sends the whole record with those values changed, so two
  #   admins changing the same account at the same moment can undo each
  #   other's change (the later one wins); run gpuq account show to check
  # a flag another subcommand takes (create --max-jobs) is refused, exit 2`,
		run: runAccount,
	})
}

// accountView is the JSON form of an account.
type accountView struct {
	ID        string         `json:"id"`
	Balance   ledger.Credits `json:"balance"`
	Reserved  ledger.Credits `json:"reserved"`
	Available ledger.Credits `json:"available"`
	// Accrued is the refill earned between the last command that moved the
	// account's money and now: the fold adds it at the account's next
	// command, so it is in Available but not yet in Balance.
	Accrued     ledger.Credits `json:"refill_accrued"`
	At          time.Time      `json:"at"`
	RunningJobs int            `json:"running_jobs"`
	RunningGPUs int            `json:"running_gpus"`
	Limits      ledger.Limits  `json:"limits"`
	Weight      int            `json:"weight"`
	RefillRate  ledger.Credits `json:"refill_rate_per_hour"`
	RefillCap   ledger.Credits `json:"refill_cap"`
}

// viewAccount is a as of now: the refill it has earned since its last
// command counts, as the fold would count it (ledger.Account.BalanceAt).
func viewAccount(a *ledger.Account, now time.Time) accountView {
	accrued := a.BalanceAt(now) - a.Balance
	return accountView{ID: a.ID, Balance: a.Balance, Reserved: a.Reserved, Available: a.Available() + accrued, Accrued: accrued, At: now.UTC(),
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
	takes, ok := accountFlags[sub]
	if !ok {
		return usagef("unknown subcommand %q%s: want create, grant, limits, refill, weight, show or list", sub,
			didYouMean(sub, []string{"create", "grant", "limits", "refill", "weight", "show", "list"}))
	}
	if err := onlyFlags(fs, "account "+sub, []string{"id", "balance", "max-jobs", "max-gpus", "rate", "cap"}, takes); err != nil {
		return err
	}
	// Every argument is checked before connecting, so a mistake is a usage
	// error even when no server is reachable.
	var name string
	if sub != "list" {
		if len(rest) == 0 {
			return usagef("account %s: want the account name", sub)
		}
		name = rest[0]
	}
	if want := accountArgs[sub]; len(rest) != want {
		return usagef("account %s: want %s", sub, accountArgText[sub])
	}
	op := ledger.Admin{Account: name, ID: *id}
	switch sub {
	case "create":
		op.Op, op.Balance = ledger.OpCreate, ledger.Credits(*balance)
	case "grant":
		amount, err := strconv.ParseInt(rest[1], 10, 64)
		if err != nil {
			return usagef("account grant: amount %q is not an integer", rest[1])
		}
		op.Op, op.Amount = ledger.OpGrant, ledger.Credits(amount)
	case "limits":
		if !flagSet(fs, "max-jobs") && !flagSet(fs, "max-gpus") {
			return usagef("account limits: give --max-jobs, --max-gpus or both (0 removes a cap)")
		}
		op.Op, op.Limits = ledger.OpLimits, ledger.Limits{MaxRunningJobs: *maxJobs, MaxRunningGPUs: *maxGPUs}
	case "refill":
		if !flagSet(fs, "rate") && !flagSet(fs, "cap") {
			return usagef("account refill: give --rate, --cap or both")
		}
		op.Op, op.RatePerHour, op.Cap = ledger.OpRefill, ledger.Credits(*rate), ledger.Credits(*refillCap)
	case "weight":
		w, err := strconv.Atoi(rest[1])
		if err != nil {
			return usagef("account weight: %q is not an integer", rest[1])
		}
		op.Op, op.Weight = ledger.OpWeight, w
	}
	if op.Op != "" {
		if op.ID == "" {
			op.ID = newID(string(op.Op))
		}
		// Limits and refill are checked again once merged with the record.
		if err := op.Validate(); err != nil && op.Op != ledger.OpRefill {
			return usagef("account %s: %v", sub, err)
		}
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
		if err != nil {
			return accountErr(name, err)
		}
		return printAccount(e, a, time.Now())
	case "limits", "refill":
		// The command sets the whole record: start from the account's and
		// change what the user named. Two admins doing this at once can
		// undo each other's change; the help says so.
		a, err := s.c.Account(ctx, name)
		if errors.Is(err, client.ErrNotFound) {
			// As the scheduler would answer the command: rejected.
			return exitError{exitRejected, fmt.Errorf("%s %s: account %s does not exist; create it first (%s)", sub, name, name, ledger.ReasonUnknownAccount)}
		}
		if err != nil {
			return accountErr(name, err)
		}
		if sub == "limits" {
			op.Limits = a.Limits
			if flagSet(fs, "max-jobs") {
				op.Limits.MaxRunningJobs = *maxJobs
			}
			if flagSet(fs, "max-gpus") {
				op.Limits.MaxRunningGPUs = *maxGPUs
			}
		} else {
			op.RatePerHour, op.Cap = a.Refill.RatePerHour, a.Refill.Cap
			if flagSet(fs, "rate") {
				op.RatePerHour = ledger.Credits(*rate)
			}
			if flagSet(fs, "cap") {
				op.Cap = ledger.Credits(*refillCap)
			}
		}
		if err := op.Validate(); err != nil {
			return usagef("account %s: %v", sub, err)
		}
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

// accountFlags are the flags of its own each account subcommand takes.
var accountFlags = map[string][]string{
	"create": {"id", "balance"}, "grant": {"id"}, "limits": {"id", "max-jobs", "max-gpus"},
	"refill": {"id", "rate", "cap"}, "weight": {"id"}, "show": nil, "list": nil,
}

// accountArgs is how many arguments each account subcommand takes after
// its name, and accountArgText says what they are.
var (
	accountArgs    = map[string]int{"create": 1, "grant": 2, "limits": 1, "refill": 1, "weight": 2, "show": 1, "list": 0}
	accountArgText = map[string]string{"create": "NAME", "grant": "NAME AMOUNT", "limits": "NAME", "refill": "NAME",
		"weight": "NAME W", "show": "NAME", "list": "no arguments"}
)

// accountErr explains a failed read of account name.
func accountErr(name string, err error) error {
	if errors.Is(err, client.ErrNotFound) {
		return fmt.Errorf("no account %s; create it with gpuq account create %s --balance N", name, name)
	}
	return bucketHint(err)
}

func printAccount(e *env, a *ledger.Account, now time.Time) error {
	v := viewAccount(a, now)
	if e.output == "json" {
		return printJSON(e.stdout, v)
	}
	t := newTable(e.stdout, "ACCOUNT", "BALANCE", "RESERVED", "AVAILABLE", "RUNNING", "GPUS", "MAX JOBS", "MAX GPUS", "WEIGHT", "REFILL/H", "CAP")
	t.row(v.ID, v.Balance, v.Reserved, v.Available, v.RunningJobs, v.RunningGPUs, capText(v.Limits.MaxRunningJobs),
		capText(v.Limits.MaxRunningGPUs), v.Weight, v.RefillRate, v.RefillCap)
	if err := t.flush(); err != nil {
		return err
	}
	if v.Accrued > 0 {
		fmt.Fprintf(e.stdout, "available includes %d credits of refill accrued since the account's last command, not yet recorded: the ledger adds them at its next one\n", v.Accrued)
	}
	return nil
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
	now := time.Now()
	out := make([]accountView, 0, len(list.Accounts))
	for _, a := range list.Accounts {
		out = append(out, viewAccount(a, now))
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
