package ledger

import (
	"errors"
	"fmt"
)

// CheckFromSeal checks one account's journal as read from about its newest
// seal on (a read that leaves out what came long before, so that an audit
// takes time in proportion to the journal since the seal, not to the
// installation's life) against head, the account's journal head in the
// ledger as of command checkpoint; entries of later commands are left out.
// The entries must reach back to the seal head names (position 1 if the
// account has none), hold a seal at that position, and verify from there to
// the head with [VerifyChain]: the seal is then the one the ledger's head
// commits to, through every hash after it.
//
// A nil result means the entries are enough for [AuditJournal] to check the
// account's balance. Otherwise the read cannot stand for the whole journal:
// the caller reads the account's whole journal and audits that, so that
// what is reported is what a whole audit reports.
func CheckFromSeal(account string, entries []StoredEntry, head JournalHead, checkpoint uint64) error {
	var kept []StoredEntry
	first := uint64(0)
	seal := false
	for _, e := range entries {
		if e.Seq > checkpoint {
			continue
		}
		kept = append(kept, e)
		if e.N != 0 && (first == 0 || e.N < first) {
			first = e.N
		}
		if head.Sealed > 0 && e.N == head.Sealed && e.Kind == EntrySeal {
			seal = true
		}
	}
	want := max(head.Sealed, 1)
	var errs []error
	switch {
	case head.N == 0:
		errs = append(errs, fmt.Errorf("account %s: the ledger names no journal chain: %w", account, ErrAudit))
	case first == 0:
		errs = append(errs, fmt.Errorf("account %s: no entry read from its newest seal (entry %d) on: %w", account, want, ErrAudit))
	case first > want:
		errs = append(errs, fmt.Errorf("account %s: the entries read start at entry %d, after its newest seal (entry %d): %w", account, first, want, ErrAudit))
	case head.Sealed > 0 && !seal:
		errs = append(errs, fmt.Errorf("account %s: no seal read at entry %d, where the ledger says its newest seal is: %w", account, head.Sealed, ErrAudit))
	}
	_, chainErrs := VerifyChain(account, kept, head)
	errs = append(errs, chainErrs...)
	return errors.Join(errs...)
}
