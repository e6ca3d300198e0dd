package ledger

import "strconv"

// Credits is an amount of credits. The ledger never uses floating point for
// money. Amounts are bounded by [MaxCredits] in magnitude.
type Credits int64

// MaxCredits is the largest amount the ledger holds in one balance or moves in
// one command: 2^53-1, so that every JSON reader, including JavaScript's,
// reads every amount exactly.
const MaxCredits Credits = 1<<53 - 1

// String formats c as a plain integer.
func (c Credits) String() string { return strconv.FormatInt(int64(c), 10) }

// addCredits returns a+b, or false if the sum leaves [-MaxCredits, MaxCredits].
// Both inputs must already be in that range, so the int64 sum cannot wrap.
func addCredits(a, b Credits) (Credits, bool) {
	s := a + b
	if s > MaxCredits || s < -MaxCredits {
		return 0, false
	}
	return s, true
}

// inRange reports whether c is in [0, MaxCredits].
func inRange(c Credits) bool { return c >= 0 && c <= MaxCredits }
