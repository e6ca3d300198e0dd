package client

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Reading the ledger. [Client.Jobs] and [Client.Accounts] read the ledger
// bucket's current values directly (a watch of the job.* or account.*
// keys), decoding each strictly. What they give is each key's value as of
// one moment, not a snapshot of the whole ledger at one command: a job
// read a moment before its account may show a reservation the account
// already released. That is enough to list and inspect; a reader that
// compares records with each other or with the journal (an audit, a usage
// report) wants [Client.Snapshot], the ledger as of the scheduler's
// checkpoint.
//
// A value gpuq did not write is not a crash: it is reported as a
// *[ForeignValueError] in the answer's Foreign and left out.

// scanIdle bounds how long a read of the bucket waits for its next value: a
// server gone away never sends the end of the initial values.
const scanIdle = 10 * time.Second

// scan returns the current entry of every key of kv under filter (a key
// pattern, "job.>"), deleted and purged keys left out of latest and kept,
// with the removal's entry, in removed. The watch's marker of
// the initial values can come before the values of keys written while it
// starts, so once it has come the scan reads on until it has seen the last
// message stored under filter as of then: it holds every key's last value up
// to that message.
func (c *Client) scan(ctx context.Context, kv jetstream.KeyValue, filter string) (latest, removed map[string]jetstream.KeyValueEntry, _ error) {
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return nil, nil, fmt.Errorf("watch %s %s: %w", kv.Bucket(), filter, err)
	}
	defer func() { _ = w.Stop() }() // a read-only watch; stopping it loses nothing
	latest, removed = map[string]jetstream.KeyValueEntry{}, map[string]jetstream.KeyValueEntry{}
	idle := time.NewTimer(scanIdle)
	defer idle.Stop()
	var last, seen uint64
	marked := false
	for !marked || seen < last {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if err := ctx.Err(); err != nil {
					return nil, nil, err
				}
				return nil, nil, fmt.Errorf("watch %s %s: ended before its initial values", kv.Bucket(), filter)
			case e == nil:
				marked = true
				if last, err = c.lastSeq(ctx, kv.Bucket(), filter); err != nil {
					return nil, nil, err
				}
				continue
			}
			seen = max(seen, e.Revision())
			if e.Operation() == jetstream.KeyValuePut {
				latest[e.Key()] = e
				delete(removed, e.Key())
			} else {
				delete(latest, e.Key())
				removed[e.Key()] = e
			}
			idle.Reset(scanIdle)
		case <-idle.C:
			return nil, nil, fmt.Errorf("watch %s %s: no value for %v (last seen %d of %d)", kv.Bucket(), filter, scanIdle, seen, last)
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	return latest, removed, nil
}

// lastSeq returns the sequence of the last message stored under key filter
// in bucket's stream that still exists (0 for none).
func (c *Client) lastSeq(ctx context.Context, bucket, filter string) (uint64, error) {
	stream := "KV_" + bucket
	str, err := c.js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("look up %s: %w", stream, err)
	}
	m, err := str.GetLastMsgForSubject(ctx, subjects.KVSubject(bucket, filter))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("the last message of %s: %w", stream, err)
	}
	return m.Sequence, nil
}

// ledgerRecords reads every current record of one kind ("job" or
// "account") from the ledger bucket, decoding each with decode. A value that
// does not decode, or names another id than its key, is reported in foreign.
func ledgerRecords[T any](ctx context.Context, c *Client, kind string, decode func([]byte) (T, string, error)) (recs []T, foreign []*ForeignValueError, _ error) {
	kv, err := c.ledgerKV(ctx)
	if err != nil {
		return nil, nil, err
	}
	entries, _, err := c.scan(ctx, kv, kind+".>")
	if err != nil {
		return nil, nil, err
	}
	for _, key := range slices.Sorted(maps.Keys(entries)) {
		e := entries[key]
		rec, id, err := decode(e.Value())
		if err == nil && kind+"."+id != key {
			err = fmt.Errorf("the record is of %s %q", kind, id)
		}
		if err != nil {
			foreign = append(foreign, &ForeignValueError{Key: key, Revision: e.Revision(), Err: err})
			continue
		}
		recs = append(recs, rec)
	}
	return recs, foreign, nil
}

func decodeJob(data []byte) (*ledger.Job, string, error) {
	j, err := ledger.UnmarshalJob(data)
	if err != nil {
		return nil, "", err
	}
	return j, j.ID, nil
}

func decodeAccount(data []byte) (*ledger.Account, string, error) {
	a, err := ledger.UnmarshalAccount(data)
	if err != nil {
		return nil, "", err
	}
	return a, a.ID, nil
}

// AccountList is what [Client.Accounts] read.
type AccountList struct {
	Accounts []*ledger.Account // by id
	Foreign  []*ForeignValueError
}

// Accounts reads every account's record from the ledger view, sorted by
// id: each as of one moment (see above), in one pass over the bucket.
// Reading every account needs an admin's rights; a tenant reads its own
// with [Client.Account].
func (c *Client) Accounts(ctx context.Context) (AccountList, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	recs, foreign, err := ledgerRecords(ctx, c, "account", decodeAccount)
	return AccountList{Accounts: recs, Foreign: foreign}, err
}

// JobFilter says which jobs [Client.Jobs] lists. The zero filter lists
// every job the ledger view holds, newest first.
type JobFilter struct {
	Account string          // only this account's jobs; "" for every account
	State   ledger.JobState // only jobs in this state; "" for any
	// Since and Until, when either is set, keep only jobs that ended in
	// [Since, Until) (a zero Until has no end; an unfinished job counts as
	// ending after any Since and is kept unless Until is set), and list the
	// archived jobs of that range too, from the history stream.
	Since, Until time.Time
	// Limit is the most jobs in one page; 0 for all.
	Limit int
	// ArrayID keeps only the tasks of this job array; "" for any job.
	ArrayID string
	// After is the cursor of the page to read: [JobPage.Next] of the one
	// before; "" for the first.
	After string
}

// Listed is a job as [Client.Jobs] lists it.
type Listed struct {
	*ledger.Job
	// Archived is set for a job read from the history stream: when and by
	// which command it left the ledger view.
	Archived *wire.History `json:"-"`
}

// JobPage is one page of [Client.Jobs].
type JobPage struct {
	// Jobs are newest first: by submission time, then by id, descending.
	Jobs []Listed
	// Next is the cursor of the next page ([JobFilter.After]); "" on the
	// last page.
	Next string
	// Foreign are the job keys whose values gpuq did not write, left out.
	Foreign []*ForeignValueError
}

// ErrBadCursor is returned for a [JobFilter.After] that is not a cursor
// [Client.Jobs] gave.
var ErrBadCursor = errors.New("gpuq: not a job list cursor")

// Jobs lists the jobs f asks for, one page at a time. A page of Limit jobs
// without Since or Until reads the tail of the events stream, back to the
// submission events of its jobs, and those jobs' keys: its cost does not
// grow with the ledger (see tailPage; a narrow filter whose jobs are all
// old falls back to the full read). Any other page reads every job key of
// the ledger view (a watch of job.*: each value as of one moment, see
// above) and, with Since or Until, the history stream from Since on; only
// such a full read reports every foreign job value, where a tail read
// reports those of the keys it read. A page's cursor is the position after
// its last job in the order, so a job submitted between two pages does not
// shift the next one.
// A job both in the view and in the history (archived as the view was
// read) is listed once, as the view has it; an id used again after its job
// was archived lists both jobs. It needs the right to watch the ledger
// bucket (an admin's); a tenant reads its jobs one by one with
// [Client.Job] or [Client.Lookup]. Jobs returns an error wrapping
// [ErrBadCursor] for a cursor it did not make.
func (c *Client) Jobs(ctx context.Context, f JobFilter) (JobPage, error) {
	var page JobPage
	after, err := decodeCursor(f.After)
	if err != nil {
		return page, err
	}
	if f.Account != "" {
		if err := subjects.CheckToken("account", f.Account); err != nil {
			return page, err
		}
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	byEnd := !f.Since.IsZero() || !f.Until.IsZero()
	if f.Limit > 0 && !byEnd {
		tail, ok, err := c.tailPage(ctx, f, after)
		if err != nil && ctx.Err() != nil {
			return page, err
		}
		// Any other failure of the tail (no events stream, no right to
		// read it, a timeout) leaves the full read, which says its own.
		if ok {
			return tail, nil
		}
	}
	live, foreign, err := ledgerRecords(ctx, c, "job", decodeJob)
	if err != nil {
		return page, err
	}
	page.Foreign = foreign
	want := func(j *ledger.Job) bool {
		if f.Account != "" && j.Account != f.Account || f.State != "" && j.State != f.State {
			return false
		}
		if f.ArrayID != "" && j.ArrayID() != f.ArrayID {
			return false
		}
		if !byEnd {
			return true
		}
		if j.EndedAt().IsZero() {
			return f.Until.IsZero()
		}
		return !j.EndedAt().Before(f.Since) && (f.Until.IsZero() || j.EndedAt().Before(f.Until))
	}
	var rows []Listed
	inView := map[string]*ledger.Job{}
	for _, j := range live {
		inView[j.ID] = j
		if want(j) {
			rows = append(rows, Listed{Job: j})
		}
	}
	if byEnd {
		err := c.Histories(ctx, f.Account, f.Since, func(h wire.History) error {
			if v := inView[h.Job.ID]; v != nil && v.SubmittedAt.Equal(h.Job.SubmittedAt) || !want(h.Job) {
				return nil
			}
			rows = append(rows, Listed{Job: h.Job, Archived: &h})
			return nil
		})
		if err != nil {
			return page, err
		}
	}
	slices.SortFunc(rows, func(a, b Listed) int { return compareNewest(cursorOf(a.Job), cursorOf(b.Job)) })
	if after != nil {
		i, _ := slices.BinarySearchFunc(rows, *after, func(r Listed, k cursor) int { return compareNewest(cursorOf(r.Job), k) })
		for i < len(rows) && compareNewest(cursorOf(rows[i].Job), *after) <= 0 {
			i++
		}
		rows = rows[i:]
	}
	if f.Limit > 0 && len(rows) > f.Limit {
		rows = rows[:f.Limit]
		page.Next = cursorOf(rows[len(rows)-1].Job).encode()
	}
	page.Jobs = rows
	if page.Jobs == nil {
		page.Jobs = []Listed{}
	}
	return page, nil
}

// cursor is a position in the newest-first order of jobs.
type cursor struct {
	submitted time.Time
	id        string
}

func cursorOf(j *ledger.Job) cursor { return cursor{j.SubmittedAt, j.ID} }

// compareNewest orders newest first: by submission time, then id,
// descending.
func compareNewest(a, b cursor) int {
	if c := b.submitted.Compare(a.submitted); c != 0 {
		return c
	}
	return strings.Compare(b.id, a.id)
}

func (k cursor) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(k.submitted.UTC().Format(time.RFC3339Nano) + " " + k.id))
}

func decodeCursor(s string) (*cursor, error) {
	if s == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("cursor %q: %w", s, ErrBadCursor)
	}
	ts, id, ok := strings.Cut(string(b), " ")
	t, terr := time.Parse(time.RFC3339Nano, ts)
	if !ok || terr != nil || subjects.CheckToken("job id", id) != nil {
		return nil, fmt.Errorf("cursor %q: %w", s, ErrBadCursor)
	}
	return &cursor{t, id}, nil
}
