package ledger

import (
	"errors"
	"fmt"
	"maps"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"time"
)

// Pricing is the price table of metered jobs, set by a [SetPricing] command
// and stored in the ledger like an account, so that every replay of the log
// computes the same reservations and charges.
//
// A metered job (a submission without a cost) reserves
// gpus × walltime × the highest price in the table at submit, and is charged
// at settlement for the runtime it used, rounded up to the second, at the
// price of the GPU model it ran on, never more than it reserved:
//
//	charge = ⌈gpus × ⌈runtime⌉seconds × price per GPU-hour / 3600⌉
//
// A metered attempt that exits non-zero, or is cancelled while running, is
// charged FailurePercent of that; one ended by the infrastructure is not
// charged.
type Pricing struct {
	// PerGPUHour maps a GPU model, as the worker reports it (for example
	// "NVIDIA H100 80GB HBM3"), to its price in credits per GPU-hour.
	PerGPUHour map[string]Credits `json:"per_gpu_hour"`
	// Default is the price of a model the table does not name.
	Default Credits `json:"default"`
	// FailurePercent is the share of the runtime charge a failed or
	// cancelled metered attempt pays, 0 to 100.
	FailurePercent int `json:"failure_percent"`
	// FixedCost says what a submission that names its own cost may ask
	// for while the table is set: anything (the default), no less than the
	// table's floor, or nothing (metered jobs only).
	FixedCost FixedCostPolicy `json:"fixed_cost,omitempty"`
	// OpID is the id of the command that set the table.
	OpID string `json:"op_id"`
	// Seq is the log sequence of the command that set the table.
	Seq uint64 `json:"seq"`
}

// FixedCostPolicy is what a [Pricing] table lets a submission that names
// its own cost (a fixed-cost job) ask for.
type FixedCostPolicy string

// Fixed-cost policies.
const (
	// FixedCostAny accepts any cost the submitter names.
	FixedCostAny FixedCostPolicy = ""
	// FixedCostFloor accepts a cost no lower than the job's floor:
	// gpus × walltime at the highest price of the table ([Pricing.MaxPrice]),
	// rounded up as a metered charge is.
	FixedCostFloor FixedCostPolicy = "floor"
	// FixedCostRefused refuses every fixed cost: jobs are metered.
	FixedCostRefused FixedCostPolicy = "metered_only"
)

// Valid reports whether p is one of the policies.
func (p FixedCostPolicy) Valid() bool {
	return p == FixedCostAny || p == FixedCostFloor || p == FixedCostRefused
}

// Floor returns the least fixed cost the table accepts for a job of gpus
// GPUs and walltime: ⌈gpus × ⌈walltime⌉seconds × MaxPrice / 3600⌉ under
// [FixedCostFloor], 0 otherwise, and false if it passes [MaxCredits]. It is
// what the job would reserve metered: a fixed-cost job may be placed on the
// dearest GPUs of the table, so the floor is their price, never a cheap
// model's.
func (p *Pricing) Floor(gpus int, walltime time.Duration) (Credits, bool) {
	if p == nil || p.FixedCost != FixedCostFloor {
		return 0, true
	}
	return gpuSecondsCost(gpus, ceilSeconds(walltime), p.MaxPrice())
}

// fixedCostProblem returns why the table refuses s, a fixed-cost submission
// with its defaults filled in, or "" if it accepts it.
func (p *Pricing) fixedCostProblem(s Submit) (Reason, string) {
	if p == nil || s.Metered {
		return "", ""
	}
	switch p.FixedCost {
	case FixedCostRefused:
		return ReasonMeteredOnly, fmt.Sprintf("job %s names its own cost (%d), but the price table takes metered jobs only: leave the cost out", s.ID, s.Cost)
	case FixedCostFloor:
		floor, ok := p.Floor(s.GPUs, s.Walltime)
		if !ok {
			return ReasonOverflow, fmt.Sprintf("the floor of %d GPUs for %v passes the limit of %d credits", s.GPUs, s.Walltime, MaxCredits)
		}
		if s.Cost < floor {
			return ReasonBelowPriceFloor, fmt.Sprintf("job %s names cost %d, below its floor of %d (%d GPUs × %v at the highest price, %d per GPU-hour): raise the cost or leave it out to be metered",
				s.ID, s.Cost, floor, s.GPUs, s.Walltime, p.MaxPrice())
		}
	}
	return "", ""
}

// MaxPrice is the highest price of the table: what a metered job reserves
// per GPU-hour.
func (p *Pricing) MaxPrice() Credits {
	if p == nil {
		return 0
	}
	m := p.Default
	for _, v := range p.PerGPUHour {
		m = max(m, v)
	}
	return m
}

// Price returns the price per GPU-hour of model.
func (p *Pricing) Price(model string) Credits {
	if v, ok := p.PerGPUHour[model]; ok {
		return v
	}
	return p.Default
}

// Clone returns a deep copy.
func (p *Pricing) Clone() *Pricing {
	if p == nil {
		return nil
	}
	c := *p
	c.PerGPUHour = maps.Clone(p.PerGPUHour)
	return &c
}

func (p *Pricing) String() string {
	models := make([]string, 0, len(p.PerGPUHour))
	for m := range p.PerGPUHour {
		models = append(models, m)
	}
	sort.Strings(models)
	var parts []string
	for _, m := range models {
		parts = append(parts, fmt.Sprintf("%s %d", m, p.PerGPUHour[m]))
	}
	parts = append(parts, fmt.Sprintf("others %d", p.Default))
	s := strings.Join(parts, ", ") + fmt.Sprintf(" credits per GPU-hour; failed attempts pay %d%%", p.FailurePercent)
	switch p.FixedCost {
	case FixedCostFloor:
		s += fmt.Sprintf("; a fixed cost must be at least gpus × walltime × %d per GPU-hour", p.MaxPrice())
	case FixedCostRefused:
		s += "; metered jobs only"
	}
	return s
}

// check reports every way p is out of range: the checks of the [SetPricing]
// command that would set it.
func (p *Pricing) check() error {
	return SetPricing{ID: p.OpID, PerGPUHour: p.PerGPUHour, Default: p.Default, FailurePercent: p.FailurePercent, FixedCost: p.FixedCost}.Validate()
}

// gpuSecondsCost returns ⌈gpus × seconds × price / 3600⌉, or false if it
// is more than MaxCredits.
func gpuSecondsCost(gpus int, seconds int64, price Credits) (Credits, bool) {
	hi, lo := bits.Mul64(uint64(gpus)*uint64(seconds), uint64(price)) // gpus×seconds < 2^31
	if hi >= 3600 {
		return 0, false
	}
	q, r := bits.Div64(hi, lo, 3600)
	if r > 0 {
		q++
	}
	if q > uint64(MaxCredits) {
		return 0, false
	}
	return Credits(q), true
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// SetPricing replaces the price table of metered jobs. ID is the operator's
// idempotency key.
type SetPricing struct {
	ID             string
	PerGPUHour     map[string]Credits
	Default        Credits
	FailurePercent int
	// FixedCost is what a submission naming its own cost may ask for while
	// the table is set; see [Pricing.FixedCost].
	FixedCost FixedCostPolicy
}

// Validate reports every way p is out of range.
func (p SetPricing) Validate() error {
	var errs []error
	errs = append(errs, nonNil(checkID("op id", p.ID))...)
	if !inRange(p.Default) {
		errs = append(errs, fmt.Errorf("default price %d is out of range [0, %d]", p.Default, MaxCredits))
	}
	if len(p.PerGPUHour) > MaxPricedModels {
		errs = append(errs, tooLarge("%d models, more than %d", len(p.PerGPUHour), MaxPricedModels))
	}
	for _, m := range slices.Sorted(maps.Keys(p.PerGPUHour)) { // sorted: the same message every time
		v := p.PerGPUHour[m]
		if m == "" {
			errs = append(errs, errors.New("a model name is empty"))
		} else if err := checkText("model name "+preview(m), m, MaxModelBytes); err != nil {
			errs = append(errs, err)
		}
		if !inRange(v) {
			errs = append(errs, fmt.Errorf("price %d of %s is out of range [0, %d]", v, preview(m), MaxCredits))
		}
	}
	if p.FailurePercent < 0 || p.FailurePercent > 100 {
		errs = append(errs, fmt.Errorf("failure_percent %d is out of range [0, 100]", p.FailurePercent))
	}
	if !p.FixedCost.Valid() {
		errs = append(errs, fmt.Errorf("fixed_cost %s is not a policy; want %q (any cost), %q or %q", preview(string(p.FixedCost)), "any", FixedCostFloor, FixedCostRefused))
	}
	return joinProblems(errs)
}

// Admit is the scheduler's decision that an account's refill may now cover
// its oldest held job: the fold brings the refill up to the command's time
// and admits the held jobs the account can pay for, in submit order. It is
// harmless when they cannot be paid for yet.
type Admit struct {
	Account string
	// Due is the moment the decider expected the refill to cover the
	// oldest held job. It names the decision, so that two decisions for
	// one moment are one (see wire.AdmitMsgID); the fold does not read
	// it, and admits as of the command's own time. Decisions logged before
	// it existed have none (the zero time).
	Due time.Time
}

// Validate reports whether r names an account.
func (r Admit) Validate() error {
	if r.Account == "" {
		return errors.New("account is empty")
	}
	return nil
}

func (SetPricing) Kind() string { return "pricing" }
func (Admit) Kind() string      { return "admit" }
func (SetPricing) isCommand()   {}
func (Admit) isCommand()        {}
