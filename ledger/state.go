package ledger

import (
	"fmt"
	"time"
)

// State is the whole ledger: every account and job, keyed by id.
//
// The maps are exported for reading (queues, views, audits); change them only
// through [State.Apply]. State is not safe for concurrent use.
type State struct {
	Accounts map[string]*Account
	Jobs     map[string]*Job
	// Pricing is the price table of metered jobs; nil until one is set.
	Pricing *Pricing
	// Seq is the highest log sequence applied.
	Seq uint64
}

// New returns an empty ledger.
func New() *State {
	return &State{Accounts: map[string]*Account{}, Jobs: map[string]*Job{}}
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := &State{
		Accounts: make(map[string]*Account, len(s.Accounts)),
		Jobs:     make(map[string]*Job, len(s.Jobs)),
		Pricing:  s.Pricing.Clone(),
		Seq:      s.Seq,
	}
	for id, a := range s.Accounts {
		c.Accounts[id] = a.Clone()
	}
	for id, j := range s.Jobs {
		c.Jobs[id] = j.Clone()
	}
	return c
}

// Apply folds cmd, the log entry at sequence seq with server timestamp at,
// into s, and returns the keys it changed and the effects to send.
//
// Apply never fails: a command that is malformed, unaffordable, stale or
// out of place changes no balance and yields an event that says why. A
// command already reflected in the state (see the package doc on replays)
// is skipped: the result has Skipped set and no effects.
//
// Apply panics if a transition breaks an invariant of what it touched. The
// caller must not persist anything from a panicking Apply.
func (s *State) Apply(cmd Command, seq uint64, at time.Time) Result {
	if s.reflected(cmd, seq) {
		return Result{Skipped: true}
	}
	t := &tx{s: s, seq: seq, at: at.UTC()}
	switch c := cmd.(type) {
	case Submit:
		t.submit(c)
	case Cancel:
		t.cancel(c)
	case Admin:
		t.admin(c)
	case Dispatch:
		t.dispatch(c)
	case Report:
		t.report(c)
	case Lost:
		t.lost(c)
	case Unplaceable:
		t.unplaceable(c)
	case SetPricing:
		t.setPricing(c)
	case Admit:
		t.admit(c)
	case Invalid:
		t.emit(InvalidEvent{Account: c.Account, Job: c.Job, Reason: c.Reason, Message: c.Message})
	default:
		panic(fmt.Sprintf("ledger: unknown command type %T", cmd))
	}
	// Money may have come free on the accounts this command touched: admit
	// their held jobs it now pays for, in submit order.
	for i := 0; i < len(t.accounts); i++ {
		t.admitHeld(t.accounts[i])
	}
	t.mustCheck()
	if seq > s.Seq {
		s.Seq = seq
	}
	return t.res
}

// reflected reports whether a key cmd reads already carries sequence seq or
// a later one. Such a key has seen every command up to its sequence, this
// one included, so applying cmd again would apply it twice.
func (s *State) reflected(cmd Command, seq uint64) bool {
	seen := func(acct, job string) bool {
		if j, ok := s.Jobs[job]; ok {
			if j.Seq >= seq {
				return true
			}
			if acct == "" {
				acct = j.Account
			}
		}
		a, ok := s.Accounts[acct]
		return ok && a.Seq >= seq
	}
	priced := s.Pricing != nil && s.Pricing.Seq >= seq // metered submits and settlements read the table
	switch c := cmd.(type) {
	case Submit:
		return seen(c.Account, c.ID) || c.Metered && priced
	case Cancel:
		return seen("", c.Job)
	case Admin:
		return seen(c.Account, "")
	case Dispatch:
		return seen("", c.Job)
	case Report:
		return seen("", c.Job) || priced
	case Lost:
		return seen("", c.Job)
	case Unplaceable:
		return seen("", c.Job)
	case Admit:
		return seen(c.Account, "")
	case SetPricing:
		return priced
	}
	return false
}

// tx is one application of one command: the state, the command's position
// in the log, and what it has done so far.
type tx struct {
	s   *State
	seq uint64
	at  time.Time
	res Result

	accounts []*Account // touched, for the invariant check
	jobs     []*Job
}

func (t *tx) emit(e Effect) { t.res.Effects = append(t.res.Effects, e) }

// changedAccount marks a as changed by this command.
func (t *tx) changedAccount(a *Account) {
	if !containsPtr(t.accounts, a) {
		a.Seq = t.seq
		t.accounts = append(t.accounts, a)
		t.res.Changed = append(t.res.Changed, Key{KeyAccount, a.ID})
	}
}

// changedJob marks j as changed by this command.
func (t *tx) changedJob(j *Job) {
	if !containsPtr(t.jobs, j) {
		j.Seq = t.seq
		t.jobs = append(t.jobs, j)
		t.res.Changed = append(t.res.Changed, Key{KeyJob, j.ID})
	}
}

func containsPtr[T any](list []*T, p *T) bool {
	for _, x := range list {
		if x == p {
			return true
		}
	}
	return false
}

// touch brings a's refill up to the command's time before its money moves,
// and journals what the refill added.
func (t *tx) touch(a *Account) {
	t.changedAccount(a)
	if added := a.refillTo(t.at); added > 0 {
		t.journal(a, Entry{Kind: EntryRefill, Amount: added})
	}
}

// journal emits e for a, filling in the account and its balances after the
// movement.
func (t *tx) journal(a *Account, e Entry) {
	e.Account, e.Balance, e.Reserved = a.ID, a.Balance, a.Reserved
	t.emit(e)
}

// mustCheck panics if anything this command touched breaks an invariant.
func (t *tx) mustCheck() {
	for _, a := range t.accounts {
		if err := a.check(); err != nil {
			panic(fmt.Sprintf("ledger: seq %d left account %s broken: %v", t.seq, a.ID, err))
		}
	}
	for _, j := range t.jobs {
		if err := j.check(); err != nil {
			panic(fmt.Sprintf("ledger: seq %d left job %s broken: %v", t.seq, j.ID, err))
		}
	}
}
