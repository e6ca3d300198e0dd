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
// No command can make a record or an effect the store would refuse: one
// whose changed records or effects would take more than [MaxRecordBytes]
// as JSON is not applied (the records it touched are restored as they were)
// and is answered with an [InvalidEvent] with [ReasonTooLarge]. Validation
// keeps every valid command far below that; the guard holds even for
// records stored by an older version with larger limits.
//
// Apply panics if a transition breaks an invariant of what it touched. The
// caller must not persist anything from a panicking Apply.
func (s *State) Apply(cmd Command, seq uint64, at time.Time) Result {
	if s.reflected(cmd, seq) {
		return Result{Skipped: true}
	}
	var snap snapshot
	s.save(cmd, &snap)
	t := &tx{s: s, seq: seq, at: at.UTC()}
	switch c := cmd.(type) {
	case Submit:
		t.submit(c)
	case Cancel:
		t.cancel(c)
	case Modify:
		t.modify(c)
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
	case Archive:
		t.archive(c)
	case Seal:
		t.seal(c)
	case Invalid:
		t.emit(InvalidEvent{Account: c.Account, Job: c.Job, Reason: c.Reason, Message: c.Message})
	default:
		panic(fmt.Sprintf("ledger: unknown command type %T", cmd))
	}
	if err := t.oversize(&snap); err != nil {
		snap.restore(s)
		acct, job, _ := keysOf(s, cmd)
		t = &tx{s: s, seq: seq, at: at.UTC()}
		t.emit(InvalidEvent{Account: acct, Job: job, Reason: ReasonTooLarge,
			Message: fmt.Sprintf("%s refused and not applied: %v", cmd.Kind(), err)})
	}
	// Jobs that ended may let their dependants run, or fail them.
	t.settleDependants()
	// Money may have come free on the accounts this command touched: admit
	// their held jobs it now pays for, in submit order.
	for i := 0; i < len(t.accounts); i++ {
		t.admitHeld(t.accounts[i])
	}
	for _, a := range t.accounts {
		t.sealDue(a)
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
	priced := s.Pricing != nil && s.Pricing.Seq >= seq // submits (its fixed-cost policy, metered prices) and settlements read the table
	switch c := cmd.(type) {
	case Submit:
		return seen(c.Account, c.ID) || priced
	case Cancel:
		return seen("", c.Job)
	case Modify:
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
	case Seal:
		return seen(c.Account, "")
	case Archive:
		return seen("", c.Job)
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
	created  []*Account // created by this command: their chain opens with their first entry
	ended    []*Job     // jobs that reached a final state in this command, for their dependants
}

// emit adds e to the effects, its message cut to MaxMessageBytes and any id
// it names that is not a valid one left out.
func (t *tx) emit(e Effect) {
	switch v := e.(type) {
	case JobEvent:
		if m := clip(v.Message); m != v.Message {
			v.Message = m
			e = v
		}
	case AccountEvent:
		if m, id := clip(v.Message), idOrNone(v.OpID); m != v.Message || id != v.OpID {
			v.Message, v.OpID = m, id
			e = v
		}
	case ConfigEvent:
		if m, id := clip(v.Message), idOrNone(v.OpID); m != v.Message || id != v.OpID {
			v.Message, v.OpID = m, id
			e = v
		}
	case InvalidEvent:
		v.Message, v.Account, v.Job = clip(v.Message), idOrNone(v.Account), idOrNone(v.Job)
		e = v
	}
	t.res.Effects = append(t.res.Effects, e)
}

// idOrNone returns id if it is a valid id, else "".
func idOrNone(id string) string {
	if checkID("", id) != nil {
		return ""
	}
	return id
}

// oversize reports the first record or effect of the command that would
// take more than MaxRecordBytes as JSON. A record larger than that already
// (stored by a version with larger limits) may still change as long as it
// grows by at most legacyGrowth and stays within legacyRecordBytes, so it
// can still end.
func (t *tx) oversize(snap *snapshot) error {
	for _, k := range t.res.Changed {
		var rec any
		var what string
		switch k.Kind {
		case KeyAccount:
			rec, what = t.s.Accounts[k.ID], "account "+k.ID
		case KeyJob:
			j, ok := t.s.Jobs[k.ID]
			if !ok {
				continue // archived: the record is removed, not stored
			}
			rec, what = j, "job "+k.ID
		case KeyPricing:
			rec, what = t.s.Pricing, "the price table"
		}
		if fits(rec, MaxRecordBytes) {
			continue
		}
		if n := marshalledSize(rec); n > MaxRecordBytes {
			if b := snap.before(k); b < 0 || n > b+legacyGrowth || n > legacyRecordBytes {
				return tooLarge("the record of %s would take %d bytes, more than the %d a record may", what, n, MaxRecordBytes)
			}
		}
	}
	for i, e := range t.res.Effects {
		if _, ok := e.(ArchivedJob); ok {
			continue // a record the store already holds, moved as it is
		}
		if fits(e, MaxRecordBytes) {
			continue
		}
		if n := marshalledSize(e); n > MaxRecordBytes {
			return tooLarge("its effect %d (%T) would take %d bytes, more than the %d a message may", i, e, n, MaxRecordBytes)
		}
	}
	return nil
}

// keysOf returns the account and the job cmd names or, for a command about
// an existing job, the job's account, and whether it may change the price
// table: every record the command can change, but the held jobs admitted
// after it (which the guard in Apply does not cover).
func keysOf(s *State, cmd Command) (acct, job string, pricing bool) {
	switch c := cmd.(type) {
	case Submit:
		return c.Account, c.ID, false
	case Cancel:
		job = c.Job
	case Modify:
		job = c.Job
	case Admin:
		return c.Account, "", false
	case Dispatch:
		job = c.Job
	case Report:
		job = c.Job
	case Lost:
		job = c.Job
	case Unplaceable:
		job = c.Job
	case Archive:
		job = c.Job
	case Admit:
		return c.Account, "", false
	case Seal:
		return c.Account, "", false
	case SetPricing:
		return "", "", true
	case Invalid:
		return c.Account, c.Job, false
	}
	if j := s.Jobs[job]; j != nil {
		acct = j.Account
	}
	return acct, job, false
}

// Room for records stored by a version with larger limits (see oversize).
const (
	legacyGrowth      = 4 * MaxMessageBytes
	legacyRecordBytes = 1<<20 - 64<<10
)

// snapshot holds the records a command may change (see keysOf) as they
// were before it, so the guard in Apply can put them back. Copies of the
// records' structs are enough: the fold replaces the slices, maps and
// pointers a record holds rather than write into them, and appending past
// a slice's length leaves what the copy sees as it was.
type snapshot struct {
	acctID, jobID string
	a             *Account
	j             *Job
	hadA, hadJ    bool
	pricing       bool
	p             *Pricing
	aCopy         Account
	jCopy         Job
}

func (s *State) save(cmd Command, snap *snapshot) {
	snap.acctID, snap.jobID, snap.pricing = keysOf(s, cmd)
	snap.a, snap.hadA = s.Accounts[snap.acctID]
	snap.j, snap.hadJ = s.Jobs[snap.jobID]
	if snap.hadA {
		snap.aCopy = *snap.a
	}
	if snap.hadJ {
		snap.jCopy = *snap.j
	}
	snap.p = s.Pricing
}

// restore puts back the records as they were when saved.
func (snap *snapshot) restore(s *State) {
	if snap.hadA {
		*snap.a = snap.aCopy
		s.Accounts[snap.acctID] = snap.a
	} else {
		delete(s.Accounts, snap.acctID)
	}
	if snap.hadJ {
		*snap.j = snap.jCopy
		s.Jobs[snap.jobID] = snap.j
	} else {
		delete(s.Jobs, snap.jobID)
	}
	if snap.pricing {
		s.Pricing = snap.p
	}
}

// before returns the encoded size of record k as it was when saved, or -1
// if it did not exist.
func (snap *snapshot) before(k Key) int {
	switch {
	case k.Kind == KeyAccount && snap.hadA && k.ID == snap.acctID:
		return encodedSize(&snap.aCopy)
	case k.Kind == KeyJob && snap.hadJ && k.ID == snap.jobID:
		return encodedSize(&snap.jCopy)
	case k.Kind == KeyPricing && snap.p != nil:
		return encodedSize(snap.p)
	}
	return -1
}

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
	t.chain(a, &e)
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
