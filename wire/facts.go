package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// The read-optimised facts the leading scheduler publishes in the gpuq_facts
// bucket, next to the ledger it writes, so that readers (`gpuq why`,
// client.Explain) learn what the scheduler saw instead of computing it again
// with other settings. Facts are advisory: the ledger stays the truth, and a
// reader says how old a fact is.

// Blocker is one reason a waiting job is not running yet, as the scheduler
// found it. Kind is machine-readable (see scheduler.Blocker, which converts
// to it field for field).
type Blocker struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// Reservation is the backfill reservation a pass made for the first job that
// could not start: GPUs on Host from At at the latest, Spare GPUs beyond the
// job's free there then.
type Reservation struct {
	Host  string    `json:"host"`
	At    time.Time `json:"at"`
	Spare int       `json:"spare"`
}

// WaitFact is the value of key wait.<account>.<job>: why a pending or held
// job waits, as the leader's pass Pass of term Term computed it at At, with
// the command log folded through Seq. It is written when the explanation
// changes, not every pass, and deleted when the job leaves the queue.
type WaitFact struct {
	V           int             `json:"v"`
	Job         string          `json:"job"`
	Account     string          `json:"account"`
	State       ledger.JobState `json:"state"`
	Blockers    []Blocker       `json:"blockers"`
	Reservation *Reservation    `json:"reservation,omitempty"`
	Term        string          `json:"term"`
	Pass        uint64          `json:"pass"`
	Seq         uint64          `json:"seq"`
	At          time.Time       `json:"at"`
}

// PassFact is the value of key pass: the leader's latest pass whose facts are
// all written. Every wait fact of a job in its window was written before it,
// so a waiting job whose last change is at or before Seq and has no wait
// fact was not in the window: being dispatched, or further back than the
// Window jobs a pass explains.
type PassFact struct {
	V      int       `json:"v"`
	Term   string    `json:"term"`
	Pass   uint64    `json:"pass"`
	Seq    uint64    `json:"seq"`
	At     time.Time `json:"at"`
	Queued int       `json:"queued"` // pending jobs in the queue
	Window int       `json:"window"` // the most jobs a pass explains
}

// SchedulerFact is the value of key config: who leads, since when, and the
// decision settings it runs with, defaults filled in. Durations are Go
// durations ("10s").
type SchedulerFact struct {
	V                int         `json:"v"`
	Leader           string      `json:"leader"`
	Term             string      `json:"term"`
	Since            time.Time   `json:"since"`
	HalfLife         string      `json:"half_life"`
	NoBackfill       bool        `json:"no_backfill"`
	Retry            RetryFact   `json:"retry"`
	HostBackoff      RetryFact   `json:"host_backoff"`
	UnplaceableAfter string      `json:"unplaceable_after"`
	LostAfter        string      `json:"lost_after"`
	StartTimeout     string      `json:"start_timeout"`
	DecisionTimeout  string      `json:"decision_timeout"`
	MaxExamine       int         `json:"max_examine"`
	JobRetention     string      `json:"job_retention"`
	MaxArchives      int         `json:"max_archives"`
	Facts            FactsLimits `json:"facts"`
}

// RetryFact is a retry policy in a [SchedulerFact].
type RetryFact struct {
	Initial    string  `json:"initial"`
	Multiplier float64 `json:"multiplier"`
	Max        string  `json:"max"`
	Jitter     float64 `json:"jitter"`
}

// FactsLimits are the bounds on the facts a leader writes.
type FactsLimits struct {
	Window    int `json:"window"`     // the most waiting jobs one pass explains
	PerSecond int `json:"per_second"` // the most fact writes a second
}

// EncodeFact encodes a fact value with its version set.
func EncodeFact(v any) ([]byte, error) {
	switch f := v.(type) {
	case WaitFact:
		f.V = Version
		if f.Blockers == nil {
			f.Blockers = []Blocker{}
		}
		return json.Marshal(f)
	case PassFact:
		f.V = Version
		return json.Marshal(f)
	case SchedulerFact:
		f.V = Version
		return json.Marshal(f)
	}
	return nil, fmt.Errorf("encode fact: unknown type %T", v)
}

// DecodeWaitFact decodes the value of key wait.<account>.<job> strictly: the
// account and job must be the key's, the state pending or held, every
// blocker named, and the pass and its time set.
func DecodeWaitFact(account, job string, data []byte) (WaitFact, error) {
	var f WaitFact
	if err := unmarshalV1("wait fact", data, &f); err != nil {
		return WaitFact{}, err
	}
	var errs []error
	if f.Account != account || f.Job != job {
		errs = append(errs, fmt.Errorf("it names job %q of account %q, not the key's %s of %s", f.Job, f.Account, job, account))
	}
	if f.State != ledger.StatePending && f.State != ledger.StateHeld {
		errs = append(errs, fmt.Errorf("state %q is not pending or held", f.State))
	}
	for i, b := range f.Blockers {
		if b.Kind == "" || b.Message == "" {
			errs = append(errs, fmt.Errorf("blocker %d has no kind or message", i))
		}
	}
	if r := f.Reservation; r != nil {
		if err := checkTokens("host", r.Host); err != nil || r.At.IsZero() || r.Spare < 0 {
			errs = append(errs, fmt.Errorf("reservation %+v is malformed", *r))
		}
	}
	if f.Term == "" || f.Pass == 0 || f.At.IsZero() {
		errs = append(errs, errors.New("missing term, pass or time"))
	}
	if err := errors.Join(errs...); err != nil {
		return WaitFact{}, fmt.Errorf("wait fact: %w", err)
	}
	if f.Blockers == nil {
		f.Blockers = []Blocker{}
	}
	return f, nil
}

// DecodePassFact decodes the value of key pass strictly.
func DecodePassFact(data []byte) (PassFact, error) {
	var f PassFact
	if err := unmarshalV1("pass fact", data, &f); err != nil {
		return PassFact{}, err
	}
	if f.Term == "" || f.Pass == 0 || f.At.IsZero() || f.Queued < 0 || f.Window <= 0 {
		return PassFact{}, fmt.Errorf("pass fact: missing or malformed term, pass, time, queued or window: %+v", f)
	}
	return f, nil
}

// DecodeSchedulerFact decodes the value of key config strictly: every
// duration must parse.
func DecodeSchedulerFact(data []byte) (SchedulerFact, error) {
	var f SchedulerFact
	if err := unmarshalV1("scheduler fact", data, &f); err != nil {
		return SchedulerFact{}, err
	}
	var errs []error
	if f.Term == "" || f.Since.IsZero() {
		errs = append(errs, errors.New("missing term or since"))
	}
	for _, d := range [][2]string{{"half_life", f.HalfLife}, {"retry.initial", f.Retry.Initial}, {"retry.max", f.Retry.Max},
		{"host_backoff.initial", f.HostBackoff.Initial}, {"host_backoff.max", f.HostBackoff.Max},
		{"unplaceable_after", f.UnplaceableAfter}, {"lost_after", f.LostAfter}, {"start_timeout", f.StartTimeout},
		{"decision_timeout", f.DecisionTimeout}, {"job_retention", f.JobRetention}} {
		if _, err := time.ParseDuration(d[1]); err != nil {
			errs = append(errs, fmt.Errorf("%s %q is not a duration", d[0], d[1]))
		}
	}
	if f.MaxExamine <= 0 || f.MaxArchives <= 0 || f.Facts.Window <= 0 || f.Facts.PerSecond <= 0 {
		errs = append(errs, errors.New("max_examine, max_archives and the facts limits must be positive"))
	}
	if err := errors.Join(errs...); err != nil {
		return SchedulerFact{}, fmt.Errorf("scheduler fact: %w", err)
	}
	return f, nil
}
