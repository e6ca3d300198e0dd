package client

import (
	"errors"
	"fmt"

	"github.com/gpuq/gpuq/ledger"
)

// Rejection sentinels, one per reason a command is rejected
// (ledger.Reason*). A *[RejectedError] matches the sentinel of its reason
// with errors.Is:
//
//	_, err := c.Submit(ctx, s)
//	if errors.Is(err, client.ErrInsufficientCredits) { … top up and retry … }
//
// errors.As with a *RejectedError still gives the reason and message.
var (
	ErrInvalid             = errors.New("gpuq: rejected: invalid")
	ErrUnknownAccount      = errors.New("gpuq: rejected: unknown account")
	ErrInsufficientCredits = errors.New("gpuq: rejected: insufficient credits")
	ErrDuplicateConflict   = errors.New("gpuq: rejected: duplicate conflict")
	ErrAccountMismatch     = errors.New("gpuq: rejected: account mismatch")
	ErrAccountExists       = errors.New("gpuq: rejected: account exists")
	ErrOverflow            = errors.New("gpuq: rejected: overflow")
	ErrUnknownJob          = errors.New("gpuq: rejected: unknown job")
	ErrUnplaceable         = errors.New("gpuq: rejected: unplaceable")
	ErrNoPrice             = errors.New("gpuq: rejected: no price")
	ErrTooManyHeld         = errors.New("gpuq: rejected: too many held")
	ErrTooLarge            = errors.New("gpuq: rejected: too large")
	ErrMeteredOnly         = errors.New("gpuq: rejected: metered only")
	ErrBelowPriceFloor     = errors.New("gpuq: rejected: below price floor")
)

// reasonErrs maps each rejection reason to its sentinel.
var reasonErrs = map[ledger.Reason]error{
	ledger.ReasonInvalid:             ErrInvalid,
	ledger.ReasonUnknownAccount:      ErrUnknownAccount,
	ledger.ReasonInsufficientCredits: ErrInsufficientCredits,
	ledger.ReasonDuplicateConflict:   ErrDuplicateConflict,
	ledger.ReasonAccountMismatch:     ErrAccountMismatch,
	ledger.ReasonAccountExists:       ErrAccountExists,
	ledger.ReasonOverflow:            ErrOverflow,
	ledger.ReasonUnknownJob:          ErrUnknownJob,
	ledger.ReasonUnplaceable:         ErrUnplaceable,
	ledger.ReasonNoPrice:             ErrNoPrice,
	ledger.ReasonTooManyHeld:         ErrTooManyHeld,
	ledger.ReasonTooLarge:            ErrTooLarge,
	ledger.ReasonMeteredOnly:         ErrMeteredOnly,
	ledger.ReasonBelowPriceFloor:     ErrBelowPriceFloor,
}

// ReasonError returns the sentinel of rejection reason r, or nil for a
// reason that is not a rejection's.
func ReasonError(r ledger.Reason) error { return reasonErrs[r] }

// Is reports whether target is the sentinel of e's reason.
func (e *RejectedError) Is(target error) bool {
	s := reasonErrs[e.Reason]
	return s != nil && s == target
}

// ErrForeignValue is wrapped by a *[ForeignValueError].
var ErrForeignValue = errors.New("gpuq: a value gpuq did not write")

// ForeignValueError is a stored value (a ledger record, a heartbeat, a
// journal entry) that does not decode as what gpuq writes there: someone
// else wrote it, or it is corrupt. Reads report it and go on with the rest.
type ForeignValueError struct {
	Key      string // the KV key, or the stream and message
	Revision uint64 // the KV revision or stream sequence
	Err      error  // why it does not decode
}

func (e *ForeignValueError) Error() string {
	return fmt.Sprintf("%s revision %d holds a value gpuq did not write: %v", e.Key, e.Revision, e.Err)
}

func (e *ForeignValueError) Unwrap() []error { return []error{ErrForeignValue, e.Err} }
