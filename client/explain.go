package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// ExplainStatus says how much an [Explanation] knows.
type ExplainStatus string

// Explanation statuses.
const (
	// Explained: the leader's explanation of the waiting job, current as of
	// its latest published pass.
	Explained ExplainStatus = "explained"
	// NotWaiting: the job is not pending or held; nothing holds it back.
	NotWaiting ExplainStatus = "not_waiting"
	// NotSeen: the job waits, but no published pass has looked at it since
	// it last changed (it was submitted or requeued a moment ago, or no
	// scheduler leads). Blockers are empty, or, with Fact set, an older
	// explanation from before the change.
	NotSeen ExplainStatus = "not_seen"
	// NotExplained: the job waits and the latest pass looked at the queue
	// after its last change, but did not explain it: the pass was
	// dispatching it, or it is further back than the jobs a pass explains
	// (Pass.Window).
	NotExplained ExplainStatus = "not_explained"
)

// Explanation is why a job is not running, as the leading scheduler saw it.
type Explanation struct {
	Job     string
	Account string
	// State, Reason and Message are the job's, from its ledger record.
	State   ledger.JobState
	Reason  ledger.Reason
	Message string
	Status  ExplainStatus
	// Blockers are the reasons the scheduler found, empty when it found
	// none or has not looked (see Status).
	Blockers []wire.Blocker
	// Reservation is the backfill reservation the scheduler made for the
	// job, if it holds it.
	Reservation *wire.Reservation
	// Fact is the wait fact read, nil when there is none.
	Fact *wire.WaitFact
	// Pass is the leader's latest published pass, nil when none is.
	Pass *wire.PassFact
}

// Explain says why job, of account, is not running: for a pending or held
// job, the blockers and backfill reservation the leading scheduler computed
// on its last pass, read from the facts it publishes (no decision is
// computed here, so the answer is the scheduler's, under its settings). It
// reads the job's record, the pass fact and the wait fact, in that order:
// three key reads.
//
// It returns [ErrNotFound] if the job is not in the ledger (it may have
// been archived), an error if the job is another account's, and an error
// naming the key if a fact does not decode: facts are checked, not
// trusted.
func (c *Client) Explain(ctx context.Context, account, job string) (Explanation, error) {
	if err := subjects.CheckToken("account", account); err != nil {
		return Explanation{}, err
	}
	j, err := c.Job(ctx, job)
	if err != nil {
		return Explanation{}, err
	}
	if j.Account != account {
		return Explanation{}, fmt.Errorf("job %s is of account %s, not %s", job, j.Account, account)
	}
	ex := Explanation{Job: j.ID, Account: j.Account, State: j.State, Reason: j.Reason(), Message: j.Message(),
		Status: NotWaiting, Blockers: []wire.Blocker{}}
	if j.State != ledger.StatePending && j.State != ledger.StateHeld {
		return ex, nil
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	// The pass fact first: every wait fact it vouches for was written
	// before it, so a wait fact read after it is at least that new (read
	// the other way round, a fact written between the two reads would be
	// missed while the newer pass vouched for it).
	if ex.Pass, err = c.pass(ctx); err != nil {
		return Explanation{}, err
	}
	key := subjects.FactWaitKey(account, job)
	data, err := c.fact(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return Explanation{}, err
	default:
		f, err := wire.DecodeWaitFact(account, job, data)
		if err != nil {
			return Explanation{}, fmt.Errorf("facts key %s: %w", key, err)
		}
		ex.Fact = &f
	}
	// A fact is current if the latest published pass of its term folded
	// the job's last change: every change that pass found was written
	// before the pass fact.
	seen := ex.Pass != nil && ex.Pass.Seq >= j.Seq
	switch f := ex.Fact; {
	case !seen:
		ex.Status = NotSeen
	case f != nil && f.Term == ex.Pass.Term && f.Pass <= ex.Pass.Pass && f.State == j.State:
		ex.Status, ex.Blockers, ex.Reservation = Explained, f.Blockers, f.Reservation
	case f != nil:
		// A fact of an earlier term, or of another state, that the latest
		// pass has not replaced yet: the scheduler writes facts in the
		// background, bounded.
		ex.Status = NotSeen
	default:
		ex.Status = NotExplained
	}
	return ex, nil
}

// SchedulerConfig returns the leading scheduler's effective configuration:
// its name, term, when it took over and the decision settings it runs
// with. It returns [ErrNotFound] if no scheduler has published one.
func (c *Client) SchedulerConfig(ctx context.Context) (wire.SchedulerFact, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	data, err := c.fact(ctx, subjects.FactConfigKey)
	if err != nil {
		return wire.SchedulerFact{}, fmt.Errorf("scheduler config: %w", err)
	}
	f, err := wire.DecodeSchedulerFact(data)
	if err != nil {
		return wire.SchedulerFact{}, fmt.Errorf("facts key %s: %w", subjects.FactConfigKey, err)
	}
	return f, nil
}

// pass reads the pass fact: nil if there is none.
func (c *Client) pass(ctx context.Context) (*wire.PassFact, error) {
	data, err := c.fact(ctx, subjects.FactPassKey)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := wire.DecodePassFact(data)
	if err != nil {
		return nil, fmt.Errorf("facts key %s: %w", subjects.FactPassKey, err)
	}
	return &p, nil
}

// fact reads one key of the facts bucket; ErrNotFound if it is absent.
func (c *Client) fact(ctx context.Context, key string) ([]byte, error) {
	kv, err := c.factsKV(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read facts key %s: %w", key, err)
	}
	return e.Value(), nil
}

// factsKV returns the facts bucket, opening it on first use (a round trip);
// a failure is not kept, so a later call tries again.
func (c *Client) factsKV(ctx context.Context) (jetstream.KeyValue, error) {
	return c.bucket(ctx, c.n.FactsBucket(), &c.facts)
}
