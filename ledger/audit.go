package ledger

import (
	"errors"
	"fmt"
	"sort"
)

// ErrAudit is wrapped by every disagreement [Books] finds.
var ErrAudit = errors.New("ledger: audit failed")

// Books recomputes every account's balance and reserved credits from journal
// entries alone, and checks the journal's own rules as it goes: each job is
// reserved once and settled at most once, settling exactly what it reserved
// and charging no more than that (an id reserved again after it settled
// is a new job under an archived job's id), and each entry's stated balances match the
// running sums.
// [Books.Compare] then checks the recomputed books against a ledger state.
//
// The zero value is not usable; call [NewBooks].
type Books struct {
	Accounts map[string]*BookAccount
	jobs     map[[2]string]*bookJob // by account and job: an archived job's id is free again, on any account
}

// BookAccount is one account as recomputed from its journal.
type BookAccount struct {
	Balance  Credits
	Reserved Credits

	posted  int     // entries posted
	carried Credits // reserved before the opening seal, by jobs whose reserve entry is not in the books
}

type bookJob struct {
	reserved Credits
	settled  bool
}

// NewBooks returns empty books.
func NewBooks() *Books {
	return &Books{Accounts: map[string]*BookAccount{}, jobs: map[[2]string]*bookJob{}}
}

// Post adds one journal entry. Post an account's entries in chain order
// (see [VerifyChain]); its books may open with a seal, which sets them to
// what it states, and a settle of a job reserved before that seal is taken
// as covered by the reserved credits it stated. It returns an error wrapping [ErrAudit] if the
// entry breaks a journal rule; the entry is still applied to the sums, so
// later entries are checked against what the journal says.
func (b *Books) Post(e Entry) error {
	acct := b.Accounts[e.Account]
	if acct == nil {
		acct = &BookAccount{}
		b.Accounts[e.Account] = acct
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s entry for %s: %s: %w", e.Kind, e.Account, fmt.Sprintf(format, args...), ErrAudit))
	}
	key := [2]string{e.Account, e.Job}
	job := b.jobs[key]
	acct.posted++
	switch e.Kind {
	case EntrySeal:
		// The first entry of an account's books may be a seal: it opens
		// them with what it states. Any later one must agree with the sums.
		if acct.posted == 1 {
			acct.Balance, acct.Reserved, acct.carried = e.Balance, e.Reserved, e.Reserved
		}
	case EntryGrant, EntryRefill:
		acct.Balance += e.Amount
	case EntryReserve:
		// A settled job's id may be reserved again once the job is
		// archived (see [Archive]): that is a new job.
		if job != nil && !job.settled {
			bad("job %s is reserved a second time", e.Job)
		}
		b.jobs[key] = &bookJob{reserved: e.Amount}
		acct.Reserved += e.Amount
	case EntrySettle:
		switch {
		case job == nil && e.Reservation <= acct.carried:
			// Reserved before the opening seal: the seal's reserved
			// credits covered it.
			acct.carried -= e.Reservation
			job = &bookJob{reserved: e.Reservation}
			b.jobs[key] = job
			if e.Amount < 0 || e.Amount > e.Reservation || e.Released != e.Reservation-e.Amount {
				bad("job %s is charged %d and released %d of the %d it held", e.Job, e.Amount, e.Released, e.Reservation)
			}
		case job == nil:
			bad("job %s was never reserved", e.Job)
		case job.settled:
			bad("job %s was already settled", e.Job)
		case job.reserved != e.Reservation:
			bad("job %s settles a reservation of %d but reserved %d", e.Job, e.Reservation, job.reserved)
		case e.Amount < 0 || e.Amount > e.Reservation || e.Released != e.Reservation-e.Amount:
			bad("job %s is charged %d and released %d of the %d it held", e.Job, e.Amount, e.Released, e.Reservation)
		}
		if job != nil {
			job.settled = true
		}
		acct.Reserved -= e.Reservation
		acct.Balance -= e.Amount
	default:
		bad("unknown kind")
	}
	if acct.Balance != e.Balance || acct.Reserved != e.Reserved {
		bad("the entry states balance %d, reserved %d; the journal sums to balance %d, reserved %d",
			e.Balance, e.Reserved, acct.Balance, acct.Reserved)
	}
	if acct.Reserved < 0 || acct.Balance < acct.Reserved {
		bad("balance %d, reserved %d breaks balance ≥ reserved ≥ 0", acct.Balance, acct.Reserved)
	}
	return errors.Join(errs...)
}

// Compare reports every account whose recomputed balance or reserved credits
// differ from s, and every account present on one side only. Each error
// wraps [ErrAudit].
func (b *Books) Compare(s *State) error {
	var errs []error
	for id, a := range s.Accounts {
		got := b.Accounts[id]
		switch {
		case got == nil:
			errs = append(errs, fmt.Errorf("account %s has no journal entries: %w", id, ErrAudit))
		case got.Balance != a.Balance || got.Reserved != a.Reserved:
			errs = append(errs, fmt.Errorf("account %s: ledger has balance %d, reserved %d; journal sums to balance %d, reserved %d: %w",
				id, a.Balance, a.Reserved, got.Balance, got.Reserved, ErrAudit))
		}
	}
	for id := range b.Accounts {
		if s.Accounts[id] == nil {
			errs = append(errs, fmt.Errorf("account %s has journal entries but no ledger record: %w", id, ErrAudit))
		}
	}
	sort.Slice(errs, func(i, k int) bool { return errs[i].Error() < errs[k].Error() })
	return errors.Join(errs...)
}
