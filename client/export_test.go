package client

import "context"

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
