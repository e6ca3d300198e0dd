package client

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TailPage is the tail read of [Client.Jobs], for the tests: the page f
// asks for, and whether the events' tail could tell it (false: Jobs reads
// the whole view instead).
func (c *Client) TailPage(ctx context.Context, f JobFilter) (JobPage, bool, error) {
	after, err := decodeCursor(f.After)
	if err != nil {
		return JobPage{}, false, err
	}
	return c.tailPage(ctx, f, after)
}

// SetTailReorder sets the reorder bound c's tail reads assume (see
// tailReorder) to n.
func SetTailReorder(c *Client, n int) { c.tailReorder = n }

// StallAnswers puts in place of c's follower of filter one that delivers
// nothing, as a follower whose consumer went with its server does: a real
// consumer of silent, a subject nobody publishes to.
func StallAnswers(ctx context.Context, c *Client, filter, silent string) error {
	it, err := c.open(ctx, silent, jetstream.DeliverNewPolicy)
	if err != nil {
		return err
	}
	a := &answers{filter: filter, it: it, ready: make(chan struct{}), done: make(chan struct{}), waiting: map[uint64][]*ticket{}, lastAt: time.Now()}
	close(a.ready)
	c.mu.Lock()
	old := c.answers[filter]
	if c.answers == nil {
		c.answers = map[string]*answers{}
	}
	c.answers[filter] = a
	c.mu.Unlock()
	if old != nil {
		c.retire(old)
	}
	go a.follow()
	return nil
}
