package ledger

import (
	"errors"
	"strings"
)

// ErrInvariant is wrapped by every error [State.CheckInvariants] returns.
var ErrInvariant = errors.New("ledger: invariant broken")

// problems is a list of validation failures reported as one error, joined
// with "; " so it reads well in a one-line event message.
type problems []error

func (p problems) Error() string {
	msgs := make([]string, len(p))
	for i, err := range p {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (p problems) Unwrap() []error { return p }

// joinProblems returns nil for no errors, and the list as one error otherwise.
func joinProblems(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return problems(errs)
}

// nonNil returns the errors of errs that are not nil.
func nonNil(errs ...error) []error {
	var out []error
	for _, err := range errs {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
