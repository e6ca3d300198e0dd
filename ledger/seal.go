package ledger

import (
	"fmt"
	"time"
)

// Seal is the scheduler's decision to seal an account's journal that no
// command has sealed for SealInterval: an account nobody used for a day
// journals nothing, so the fold's own seals ([SealEvery]) would leave its
// newest seal as old as its last use, and a journal kept for a limited age
// would lose it, leaving nothing an audit could start from. With these
// decisions every account's journal holds a seal at most about a day old.
//
// The fold re-checks what the decision assumed: the account's newest seal
// is still the one at position After, and it is at least SealInterval older
// than the command's own time. It then brings the account's refill up to
// that time, as any command on the account does, and appends a seal. A
// decision that no longer holds (another command sealed the account since,
// or an earlier copy of this one did) is a logged no-op.
type Seal struct {
	Account string
	// After is the position of the account's newest seal when the
	// decision was made (JournalHead.Sealed; 0 for an account without one).
	After uint64
}

// ReasonNotDue is why a seal decision changed nothing: the account was
// sealed since the decision, or its newest seal is younger than
// SealInterval.
const ReasonNotDue Reason = "not_due"

func (Seal) Kind() string { return "seal" }
func (Seal) isCommand()   {}

// Validate reports whether s names an account.
func (s Seal) Validate() error {
	return joinProblems(nonNil(checkID("account", s.Account)))
}

// SealDue reports whether the fold would seal a's journal at time at on a
// Seal decision: it has no chain yet, or its newest seal is at least
// SealInterval before at. The fold and the scheduler's decider both ask it.
func SealDue(a *Account, at time.Time) bool {
	return a.Journal.N == 0 || !at.Before(a.Journal.SealedAt.Add(SealInterval))
}

// seal applies the scheduler's decision to seal an account's journal.
func (t *tx) seal(c Seal) {
	if err := c.Validate(); err != nil {
		t.emit(InvalidEvent{Account: c.Account, Reason: ReasonFor(err), Message: "seal decision rejected: " + err.Error()})
		return
	}
	a := t.s.Accounts[c.Account]
	if a == nil {
		t.emit(InvalidEvent{Account: c.Account, Reason: ReasonUnknownAccount, Message: fmt.Sprintf("seal decision for unknown account %s", c.Account)})
		return
	}
	switch {
	case a.Journal.Sealed != c.After:
		t.emit(AccountEvent{Type: EventIgnored, Account: a.ID, Reason: ReasonNotDue, Balance: a.Balance, Reserved: a.Reserved, Available: a.Available(),
			Message: fmt.Sprintf("seal decision ignored: the journal of %s was sealed at entry %d since the decision saw entry %d", a.ID, a.Journal.Sealed, c.After)})
	case !SealDue(a, t.at):
		t.emit(AccountEvent{Type: EventIgnored, Account: a.ID, Reason: ReasonNotDue, Balance: a.Balance, Reserved: a.Reserved, Available: a.Available(),
			Message: fmt.Sprintf("seal decision ignored: the journal of %s was sealed at %s, less than %v before this command (%s)",
				a.ID, a.Journal.SealedAt.Format(time.RFC3339), SealInterval, t.at.Format(time.RFC3339))})
	default:
		t.touch(a)
		if a.Journal.N == 0 {
			// An account an older version left, never touched since: the
			// seal opens its chain.
			e := Entry{Kind: EntrySeal, Account: a.ID, Balance: a.Balance, Reserved: a.Reserved}
			t.link(a, &e)
			t.emit(e)
			return
		}
		t.journal(a, Entry{Kind: EntrySeal})
	}
}
