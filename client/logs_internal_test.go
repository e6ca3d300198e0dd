package client

import (
	"testing"

	"github.com/gpuq/gpuq/ledger"
)

// TestAttemptEnd: the end marker Logs makes from a job's record for an
// attempt whose worker sent none.
func TestAttemptEnd(t *testing.T) {
	zero, one := 0, 1
	retried := &ledger.Job{ID: "j", Attempt: 2, State: ledger.StateRunning, JobOutcome: &ledger.JobOutcome{Host: "h2",
		Attempts: []ledger.Attempt{{N: 1, Host: "h1", Outcome: ledger.StatePending, Message: "attempt 1 on h1 lost: heartbeat expired"}}}}
	busy := &ledger.Job{ID: "j", Attempt: 2, State: ledger.StateDispatched, JobOutcome: &ledger.JobOutcome{Host: "h2",
		Attempts: []ledger.Attempt{{N: 1, Host: "h1", Outcome: ledger.StatePending}}}}
	for _, tc := range []struct {
		name  string
		j     *ledger.Job
		n     int
		want  string
		ended bool
	}{
		{"succeeded", &ledger.Job{ID: "j", Attempt: 1, State: ledger.StateSucceeded, JobOutcome: &ledger.JobOutcome{Host: "h1",
			ExitCode: &zero, RuntimeMS: 1500, Attempts: []ledger.Attempt{{N: 1, Host: "h1", Outcome: ledger.StateSucceeded}}}},
			1, "exit 0 after 1.5s", true},
		{"failed", &ledger.Job{ID: "j", Attempt: 1, State: ledger.StateFailed, JobOutcome: &ledger.JobOutcome{Host: "h1",
			ExitCode: &one, RuntimeMS: 2, Attempts: []ledger.Attempt{{N: 1, Host: "h1", Outcome: ledger.StateFailed, Message: "exit code 1"}}}},
			1, "exit 1 after 2ms", true},
		{"running", &ledger.Job{ID: "j", Attempt: 1, State: ledger.StateRunning, JobOutcome: &ledger.JobOutcome{Host: "h1"}}, 1, "", false},
		{"an earlier attempt, lost", retried, 1, "attempt 1 on h1 lost: heartbeat expired", true},
		{"an earlier attempt, requeued", busy, 1, "requeued", true},
		{"the running attempt after one", retried, 2, "", false},
	} {
		got, ended := attemptEnd(tc.j, tc.n)
		if got != tc.want || ended != tc.ended {
			t.Errorf("%s: attemptEnd(attempt %d) = %q, %v; want %q, %v", tc.name, tc.n, got, ended, tc.want, tc.ended)
		}
	}
}
