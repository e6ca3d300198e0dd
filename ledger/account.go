package ledger

import (
	"math/bits"
	"time"
)

// Account is a team's credit account.
//
// Balance is what the account owns; Reserved is the part of it held by
// unfinished jobs. Available = Balance - Reserved is what new submissions may
// reserve. The ledger keeps 0 ≤ Reserved ≤ Balance ≤ MaxCredits.
type Account struct {
	ID          string    `json:"id"`
	Balance     Credits   `json:"balance"`
	Reserved    Credits   `json:"reserved"`
	RunningJobs int       `json:"running_jobs"` // jobs dispatched or running
	RunningGPUs int       `json:"running_gpus"` // GPUs of those jobs
	Limits      Limits    `json:"limits"`
	Weight      int       `json:"weight"` // fair-share weight, ≥ 1
	Refill      Refill    `json:"refill"`
	Created     time.Time `json:"created"`
	// HeldJobs are the account's held jobs, oldest first: the order they
	// are admitted in.
	HeldJobs []string `json:"held_jobs,omitempty"`
	// Waiting counts the account's jobs still waiting on a dependency
	// (Job.WaitingOn not empty), so a job that ends looks for dependants
	// only in an account that has some.
	Waiting int `json:"waiting,omitempty"`
	// RecentOps are the last MaxRecentOps admin commands applied, oldest
	// first, so a retried op id is recognised after the stream's duplicate
	// window has passed.
	RecentOps []Admin `json:"recent_ops,omitempty"`
	// Seq is the log sequence of the last command that changed the account.
	Seq uint64 `json:"seq"`
	// Journal is where the account's journal chain stands.
	Journal JournalHead `json:"journal,omitzero"`
}

// Limits caps what an account may run at once. Zero means no cap.
type Limits struct {
	MaxRunningJobs int `json:"max_running_jobs"`
	MaxRunningGPUs int `json:"max_running_gpus"`
}

// Refill is an account's token bucket: RatePerHour credits per hour are added
// to the balance until it reaches Cap. The refill is computed from command
// timestamps whenever the account's money moves, never from a clock.
type Refill struct {
	RatePerHour Credits   `json:"rate_per_hour"`
	Cap         Credits   `json:"cap"`
	Last        time.Time `json:"last"` // time up to which the refill has been added
	// CarryCreditNanos is the fraction of a credit earned but not yet
	// added, in credit·nanoseconds per hour (always below one hour's worth).
	CarryCreditNanos uint64 `json:"carry_credit_ns,omitempty"`
}

// Available returns the credits the account may still reserve.
func (a *Account) Available() Credits { return a.Balance - a.Reserved }

// Clone returns a deep copy.
func (a *Account) Clone() *Account {
	c := *a
	c.RecentOps = append([]Admin(nil), a.RecentOps...)
	c.HeldJobs = append([]string(nil), a.HeldJobs...)
	return &c
}

// BalanceAt returns the balance a would have at time at, with the refill it
// earns by then, without changing a.
func (a *Account) BalanceAt(at time.Time) Credits {
	c := *a
	c.refillTo(at)
	return c.Balance
}

// refillTo adds the refill earned between a.Refill.Last and at, and returns
// the credits added. Time going backwards (a new stream leader with a slower
// clock) earns nothing and does not move Last back.
func (a *Account) refillTo(at time.Time) Credits {
	r := &a.Refill
	if !at.After(r.Last) {
		return 0
	}
	elapsed := uint64(at.Sub(r.Last)) // positive, so the conversion is exact
	r.Last = at
	if r.RatePerHour <= 0 || a.Balance >= r.Cap {
		r.CarryCreditNanos = 0
		return 0
	}
	// earned = (carry + rate·elapsed) / hour, computed in 128 bits.
	hi, lo := bits.Mul64(uint64(r.RatePerHour), elapsed)
	lo, c := bits.Add64(lo, r.CarryCreditNanos, 0)
	hi += c
	const hour = uint64(time.Hour)
	room := r.Cap - a.Balance
	if hi >= hour { // the quotient would not fit 64 bits: far more than room
		a.Balance, r.CarryCreditNanos = r.Cap, 0
		return room
	}
	q, rem := bits.Div64(hi, lo, hour)
	if q >= uint64(room) {
		a.Balance, r.CarryCreditNanos = r.Cap, 0
		return room
	}
	a.Balance += Credits(q)
	r.CarryCreditNanos = rem
	return Credits(q)
}

// rememberOp records op in the account's recent ops, dropping the oldest.
func (a *Account) rememberOp(op Admin) {
	a.RecentOps = append(a.RecentOps, op)
	if n := len(a.RecentOps) - MaxRecentOps; n > 0 {
		a.RecentOps = append(a.RecentOps[:0:0], a.RecentOps[n:]...)
	}
}

// recentOp returns the recorded admin op with id, if any.
func (a *Account) recentOp(id string) (Admin, bool) {
	for _, op := range a.RecentOps {
		if op.ID == id {
			return op, true
		}
	}
	return Admin{}, false
}
