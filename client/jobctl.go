package client

import (
	"context"
	"fmt"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// Hold pauses job of account while it waits (pending, or held for credits)
// and waits for the answer: a paused event. A paused job keeps its
// reservation and its place in the queue but is not dispatched until
// [Client.Release]. See [Client.Modify] for the errors.
func (c *Client) Hold(ctx context.Context, account, job string) (wire.JobEvent, error) {
	return c.Modify(ctx, ledger.Modify{Account: account, Job: job, Op: ledger.OpHold})
}

// Release lifts the pause [Client.Hold] put on job of account: a resumed
// event. See [Client.Modify] for the errors.
func (c *Client) Release(ctx context.Context, account, job string) (wire.JobEvent, error) {
	return c.Modify(ctx, ledger.Modify{Account: account, Job: job, Op: ledger.OpRelease})
}

// SetPriority sets the priority of job of account while it waits: an
// updated event. See [Client.Modify] for the errors.
func (c *Client) SetPriority(ctx context.Context, account, job string, priority int) (wire.JobEvent, error) {
	return c.Modify(ctx, ledger.Modify{Account: account, Job: job, Op: ledger.OpPriority, Priority: priority})
}

// Modify publishes m and waits for the scheduler's answer. A change the
// fold refuses (the job is not waiting, is unknown, or belongs to another
// account) returns its ignored event and a *RejectedError with the reason;
// a change to what the job already has (reason unchanged) returns the
// ignored event and no error, so a retried hold is harmless. A command that
// fails validation is not published.
func (c *Client) Modify(ctx context.Context, m ledger.Modify) (wire.JobEvent, error) {
	msg, err := wire.EncodeModify(c.n, m)
	if err != nil {
		return wire.JobEvent{}, fmt.Errorf("%s %s: %w", m.Op, m.Job, err)
	}
	seq, data, err := c.accountAnswer(ctx, msg, m.Account, c.n.JobEvent(m.Account, m.Job))
	if err != nil {
		return wire.JobEvent{}, err
	}
	ev, err := wire.DecodeJobEvent(data)
	if err != nil {
		return wire.JobEvent{}, err
	}
	if ev.Type == ledger.EventIgnored && ev.Reason != ledger.ReasonUnchanged {
		return ev, &RejectedError{Seq: seq, Reason: ev.Reason, Message: ev.Message}
	}
	return ev, rejection(seq, ev.Type, ev.Reason, ev.Message)
}

// PassFact returns the leading scheduler's latest published pass (when it
// ran, the log sequence it had folded, how many jobs were queued), or nil
// when none is published. gpuq submit --dry-run reads the queue from it.
func (c *Client) PassFact(ctx context.Context) (*wire.PassFact, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	return c.pass(ctx)
}
