package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// EntrySeal is the kind of a sealed checkpoint of an account's journal: it
// moves nothing and states the account's balance and reserved credits at
// its position, so an audit can start from it instead of from the first
// entry (see [Books.Post]).
const EntrySeal EntryKind = "seal"

// When the fold seals an account's journal. Every account's chain starts at
// position 1: with the creation grant for an account created by this
// version, or with a seal stating what an older version left (the account
// had entries before the chain existed). After that, the first command that
// moves an account's journal once SealEvery entries or SealInterval of
// command time have passed since its newest seal (or since it was created)
// appends a seal after its own entries. Both are functions of the log alone,
// so every replay and every takeover seals at the same positions.
const (
	SealEvery    = 1000
	SealInterval = 24 * time.Hour
)

// JournalHead is where an account's journal stands: how many entries it has
// (N, the position of the last one), the hash of the last one, and the
// position and command time of its newest seal. It is part of the account
// record, so the chain continues the same across replays and takeovers.
type JournalHead struct {
	N        uint64    `json:"n"`
	Hash     string    `json:"hash,omitempty"`
	Sealed   uint64    `json:"sealed,omitempty"`
	SealedAt time.Time `json:"sealed_at,omitzero"`
}

// EntryHash returns the hash of e: the lower-case hex SHA-256 of a
// canonical encoding of every field of e but Hash, Prev included, so each
// entry commits to the whole chain before it. The encoding is a version
// tag, then each field in the order of [Entry] (Kind, Account, Job, OpID,
// Amount, Reservation, Released, Balance, Reserved, Reason, Seq, Time, N, Prev):
// strings as a big-endian uint64 length and their bytes, integers as
// big-endian 64-bit two's complement, the time as its Unix nanoseconds.
// Readers in other languages can recompute it from the wire fields.
func EntryHash(e Entry) string {
	h := sha256.New()
	var b [8]byte
	num := func(v uint64) {
		binary.BigEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	str := func(s string) {
		num(uint64(len(s)))
		h.Write([]byte(s))
	}
	str("gpuq-journal-v1")
	str(string(e.Kind))
	str(e.Account)
	str(e.Job)
	str(e.OpID)
	for _, c := range []Credits{e.Amount, e.Reservation, e.Released, e.Balance, e.Reserved} {
		num(uint64(c))
	}
	str(string(e.Reason))
	num(e.Seq)
	num(uint64(e.Time.UnixNano()))
	num(e.N)
	str(e.Prev)
	return hex.EncodeToString(h.Sum(nil))
}

// chain gives e the next position of a's journal, links it to the entry
// before and hashes it, and moves a's head on. An account that has a record
// but no chain yet (one an older version kept) first gets a seal of what it
// held before e's movement.
func (t *tx) chain(a *Account, e *Entry) {
	if a.Journal.N == 0 {
		if !containsPtr(t.created, a) {
			before := Entry{Kind: EntrySeal, Account: a.ID, Balance: e.Balance, Reserved: e.Reserved}
			switch e.Kind {
			case EntryGrant, EntryRefill:
				before.Balance -= e.Amount
			case EntryReserve:
				before.Reserved -= e.Amount
			case EntrySettle:
				before.Balance += e.Amount
				before.Reserved += e.Reservation
			}
			t.link(a, &before)
			t.emit(before)
		} else {
			a.Journal.SealedAt = t.at
		}
	}
	t.link(a, e)
}

func (t *tx) link(a *Account, e *Entry) {
	e.Seq, e.Time, e.N, e.Prev = t.seq, t.at, a.Journal.N+1, a.Journal.Hash
	e.Hash = EntryHash(*e)
	a.Journal.N, a.Journal.Hash = e.N, e.Hash
	if e.Kind == EntrySeal {
		a.Journal.Sealed, a.Journal.SealedAt = e.N, t.at
	}
}

// sealDue appends a seal to a's journal if one is due (see [SealEvery]).
func (t *tx) sealDue(a *Account) {
	h := a.Journal
	if h.N == 0 || h.N == h.Sealed || !t.moved(a) {
		return
	}
	if h.N-h.Sealed >= SealEvery || t.at.Sub(h.SealedAt) >= SealInterval {
		t.journal(a, Entry{Kind: EntrySeal})
	}
}

// moved reports whether this command journalled an entry of a.
func (t *tx) moved(a *Account) bool {
	for _, e := range t.res.Effects {
		if e, ok := e.(Entry); ok && e.Account == a.ID {
			return true
		}
	}
	return false
}

// StoredEntry is a journal entry as read back from where it is kept, with
// where: the sequence of its message there (0 if not known), for reports.
type StoredEntry struct {
	Entry
	Msg uint64
}

func (s StoredEntry) String() string {
	if s.Msg == 0 {
		return fmt.Sprintf("entry %d (command %d)", s.N, s.Seq)
	}
	return fmt.Sprintf("entry %d (command %d, journal message %d)", s.N, s.Seq, s.Msg)
}

// VerifyChain checks the hash chain of one account's journal, entries as
// read (in any order: a retried publish is stored after entries that come
// later in the chain, so storage order is not evidence), against head, the
// account's journal head in the ledger. Each entry must hash to its Hash,
// and link to the entry before it through Prev; positions run without gap
// from the opening to head.N, each held by one entry; command sequences
// never go back along the chain. Every break is an error wrapping
// [ErrAudit] that names the account, the position and the command, and
// says whether the entry was altered, removed, inserted or reordered.
//
// The opening is position 1 if it is kept, else the earliest kept seal:
// entries before it (what is left of a cut) are checked for their hashes
// and links only. VerifyChain returns the entries from the opening on, in
// chain order, for [Books.Post]; nil if there is no opening.
func VerifyChain(account string, entries []StoredEntry, head JournalHead) ([]Entry, []error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("account %s: %s: %w", account, fmt.Sprintf(format, args...), ErrAudit))
	}
	claims := map[uint64][]StoredEntry{}
	var first, last uint64
	for _, e := range entries {
		if e.N == 0 {
			bad("an entry of command %d (journal message %d) has no position in the chain: inserted", e.Seq, e.Msg)
			continue
		}
		if c := claims[e.N]; len(c) > 0 && c[0].Entry == e.Entry {
			continue // the same entry stored twice (a re-sent copy past the duplicate window)
		}
		claims[e.N] = append(claims[e.N], e)
		if first == 0 || e.N < first {
			first = e.N
		}
		last = max(last, e.N)
	}
	if first == 0 {
		if head.N > 0 {
			bad("the ledger's journal head is at entry %d but no entry of the chain is kept: removed", head.N)
		}
		return nil, errs
	}
	// pick returns the entry held at position p: of several, the one the
	// next entry links to, else the first stored. The others were inserted.
	pick := func(p uint64) (StoredEntry, bool) {
		c := claims[p]
		if len(c) == 0 {
			return StoredEntry{}, false
		}
		if len(c) == 1 {
			return c[0], true
		}
		chosen := c[0]
		for _, n := range claims[p+1] {
			for _, x := range c {
				if n.Prev == x.Hash {
					chosen = x
				}
			}
		}
		for _, x := range c {
			if x != chosen {
				bad("%s claims position %d, held by %s: inserted", x, p, chosen)
			}
		}
		return chosen, true
	}
	opening := uint64(1)
	if first > 1 {
		opening = 0
		for p := first; p <= last; p++ {
			if e, ok := pick(p); ok && e.Kind == EntrySeal {
				opening = p
				break
			}
		}
		if opening == 0 {
			bad("the journal starts at entry %d and no seal is kept at or after it: entries 1 to %d are gone, and the balance cannot be recomputed", first, first-1)
		}
	}
	var out []Entry
	var prev StoredEntry
	havePrev := false
	missing := uint64(0) // the first position of a run of missing ones
	for p := first; p <= max(last, head.N); p++ {
		e, ok := pick(p)
		if !ok {
			if missing == 0 {
				missing = p
			}
			continue
		}
		if missing != 0 {
			if missing == p-1 {
				bad("entry %d is missing, before %s: removed", missing, e)
			} else {
				bad("entries %d to %d are missing, before %s: removed", missing, p-1, e)
			}
			missing = 0
			havePrev = false
		}
		if e.Account != account {
			bad("%s names account %s: inserted", e, e.Account)
		}
		if EntryHash(e.Entry) != e.Hash {
			bad("%s does not match its own hash: altered", e)
		}
		switch {
		case p == 1 && e.Prev != "":
			bad("%s is the first entry but links to an entry before it: inserted", e)
		case havePrev && e.Prev != prev.Hash:
			bad("%s does not match the hash that %s holds of it: %s was altered (or %s inserted)", prev, e, prev, e)
		}
		if havePrev && e.Seq < prev.Seq {
			bad("%s comes after %s of a later command: reordered", e, prev)
		}
		if p > head.N {
			bad("%s is past the ledger's journal head at entry %d: inserted", e, head.N)
		}
		if p == head.N && e.Hash != head.Hash {
			bad("%s is not the entry the ledger's journal head names: altered or replaced", e)
		}
		if opening != 0 && p >= opening {
			out = append(out, e.Entry)
		}
		prev, havePrev = e, true
	}
	if missing != 0 {
		if missing == head.N {
			bad("entry %d, the last the ledger's journal head names, is missing: removed", missing)
		} else {
			bad("entries %d to %d, the last the ledger's journal head names, are missing: removed", missing, head.N)
		}
	}
	return out, errs
}

// AuditJournal checks a journal against s, the ledger as of command
// checkpoint: entries of later commands (a flush in progress) are left out.
// chained are the entries read from the journal, legacy those an older
// version kept without a chain (in the events stream), each in the order
// stored. Every account's chain is checked with [VerifyChain] against its
// journal head and posted to [Books] from its opening; an account with no
// chained entry yet is posted from its legacy entries. The books are then
// compared with s ([Books.Compare]). It returns how many entries were
// posted and every difference, each wrapping [ErrAudit].
func AuditJournal(s *State, checkpoint uint64, chained, legacy []StoredEntry) (int, []error) {
	byAcct := map[string][]StoredEntry{}
	for _, e := range chained {
		if e.Seq <= checkpoint {
			byAcct[e.Account] = append(byAcct[e.Account], e)
		}
	}
	ids := map[string]bool{}
	for id := range byAcct {
		ids[id] = true
	}
	for id, a := range s.Accounts {
		if a.Journal.N > 0 {
			ids[id] = true
		}
	}
	var errs []error
	books := NewBooks()
	posted := 0
	for _, id := range sortedKeys(ids) {
		var head JournalHead
		if a := s.Accounts[id]; a != nil {
			head = a.Journal
		}
		out, chainErrs := VerifyChain(id, byAcct[id], head)
		errs = append(errs, chainErrs...)
		for _, e := range out {
			posted++
			if err := books.Post(e); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, e := range legacy {
		if e.Seq > checkpoint || ids[e.Account] {
			continue
		}
		posted++
		if err := books.Post(e.Entry); err != nil {
			errs = append(errs, err)
		}
	}
	if err := books.Compare(s); err != nil {
		errs = append(errs, err)
	}
	return posted, errs
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
