package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Archived jobs. A job that ended more than the scheduler's retention ago
// leaves the ledger view; its final record stays in the history stream
// (GPUQ_HISTORY, gpuq.history.<account>.<job>), where these calls read it.
// [Client.Lookup] reads the view, then the history.

// History returns the final record of archived job id of account, with
// when it was archived. With account "" it looks under every account, which
// needs the right to read every account's history (an admin's); a tenant
// names its own. It returns an error wrapping [ErrNotFound] if no archived
// job has the id. An id used again after its job was archived has one
// record per job; History returns the last.
func (c *Client) History(ctx context.Context, account, id string) (wire.History, error) {
	if err := subjects.CheckToken("job id", id); err != nil {
		return wire.History{}, err
	}
	subject := c.n.JobHistory(id)
	if account != "" {
		if err := subjects.CheckToken("account", account); err != nil {
			return wire.History{}, err
		}
		subject = c.n.History(account, id)
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	st, err := c.js.Stream(ctx, c.n.HistoryStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return wire.History{}, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return wire.History{}, fmt.Errorf("open %s: %w", c.n.HistoryStream(), err)
	}
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return wire.History{}, fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return wire.History{}, fmt.Errorf("read %s: %w", subject, err)
	}
	return wire.DecodeHistory(c.n, m.Subject, m.Data)
}

// Histories calls fn with every archived job of account ("" for every
// account) that ended at or after since, in the order they were archived,
// until the history stream's end, an error from fn, or the end of ctx. It
// reads only what was archived since then: a job is archived after it
// ends.
func (c *Client) Histories(ctx context.Context, account string, since time.Time, fn func(wire.History) error) error {
	filter := c.n.AllHistory()
	if account != "" {
		if err := subjects.CheckToken("account", account); err != nil {
			return err
		}
		filter = c.n.AccountHistory(account)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, NamePrefix: ConsumerName(), DeliverPolicy: jetstream.DeliverAllPolicy}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := c.js.OrderedConsumer(ctx, c.n.HistoryStream(), cfg)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil // nothing archived yet
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", filter, err)
	}
	// The consumer's info as its creation answered it: asking again takes
	// a consumer info request, which deploy/ does not let a tenant or the
	// admin make on this stream.
	info := cons.CachedInfo()
	if info == nil {
		return fmt.Errorf("read %s: the consumer was created without its info", filter)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("read %s: %w", filter, err)
	}
	defer it.Stop()
	return c.each(ctx, it, filter, func(m jetstream.Msg) (bool, error) {
		meta, err := m.Metadata()
		if err != nil {
			return false, fmt.Errorf("read %s: %w", filter, err)
		}
		h, err := wire.DecodeHistory(c.n, m.Subject(), m.Data())
		if err != nil {
			return false, err
		}
		if !h.Job.EndedAt().Before(since) {
			if err := fn(h); err != nil {
				return false, err
			}
		}
		return meta.NumPending == 0, nil
	})
}

// Lookup reads job id from the ledger view and, if the view no longer holds
// it, from the history stream under account ("" for any account, as
// [Client.History]). archived is nil for a job in the view. It returns an
// error wrapping [ErrNotFound] if neither holds the job.
//
// [Client.Job] reads the view alone: a tenant that may read only its own
// account's history would wait out its timeout on a look-up under every
// account, so the caller says which account to look under.
func (c *Client) Lookup(ctx context.Context, account, id string) (job *ledger.Job, archived *wire.History, err error) {
	j, err := c.Job(ctx, id)
	if err == nil || !errors.Is(err, ErrNotFound) {
		return j, nil, err
	}
	h, err := c.History(ctx, account, id)
	if err != nil {
		return nil, nil, err
	}
	return h.Job, &h, nil
}
