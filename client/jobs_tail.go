package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// A page of the newest jobs without reading the whole ledger view.
//
// Every submission is answered with an event (accepted, or held) carrying
// the command's sequence and time, which are the job's SubmitSeq and
// SubmittedAt; and the scheduler publishes the events in the order it folds
// the commands. So the events stream's tail names, newest first, every job
// submitted after the oldest event read, and a page is complete once its
// last job was submitted after that event: any job it did not name was
// submitted before, and is older than the page. tailPage reads windows of
// the tail, each twice as long as the one before, and the records of the
// newest candidates, one key each, until the page is complete; it gives up
// (ok false, for the caller to read the whole view) when the window reaches
// the start of the stream (older events may have aged out) or
// tailMaxEvents, as a narrow filter (a state few recent jobs are in) may
// need.

// tailMaxEvents bounds the events tailPage reads before it gives up.
const tailMaxEvents = 1 << 16

// tailFetchers is how many job records tailPage reads at once.
const tailFetchers = 16

// submitted is a job as its submission's event names it.
type submitted struct {
	job, account string
	seq          uint64 // the event's command: the job's SubmitSeq, or later for a held job admitted since
	at           time.Time
}

// tailPage returns the page f asks for (f.Limit > 0, no Since or Until),
// after the cursor after, or ok false when the tail cannot tell it.
func (c *Client) tailPage(ctx context.Context, f JobFilter, after *cursor) (_ JobPage, ok bool, _ error) {
	var page JobPage
	str, err := c.js.Stream(ctx, c.n.EventsStream())
	if err != nil {
		return page, false, fmt.Errorf("look up %s: %w", c.n.EventsStream(), err)
	}
	info := str.CachedInfo() // as of the look-up: its last event bounds the tail
	first, last := info.State.FirstSeq, info.State.LastSeq
	if last == 0 {
		return page, false, nil
	}
	filter := c.n.AllJobEvents()
	if f.Account != "" {
		filter = c.n.JobEvents(f.Account)
	}
	cands := map[string]submitted{} // by job id: its latest submission event
	var oldest uint64               // the smallest command sequence of the events read
	hi, window := last+1, uint64(max(4*f.Limit, 256))
	fetched := map[string]fetchedJob{}
	for read := uint64(0); ; window *= 2 {
		lo := max(hi-min(window, hi-1), first, 1)
		n, low, err := c.readSubmissions(ctx, filter, lo, hi, cands)
		if err != nil {
			return page, false, err
		}
		if n > 0 && (oldest == 0 || low < oldest) {
			oldest = low
		}
		read += hi - lo
		hi = lo
		// Read from the stream's very first event, the tail holds every
		// submission's: the candidates are every job.
		whole := lo <= 1
		if oldest != 0 || whole {
			// One job more than the page, to tell whether a next page
			// holds any.
			more := f
			more.Limit++
			rows, foreign, complete, err := c.tailRows(ctx, more, after, cands, oldest, fetched)
			if err != nil {
				return page, false, err
			}
			if complete || whole {
				if len(rows) > f.Limit {
					rows = rows[:f.Limit]
					page.Next = cursorOf(rows[len(rows)-1].Job).encode()
				}
				page.Jobs, page.Foreign = rows, foreign
				if page.Jobs == nil {
					page.Jobs = []Listed{}
				}
				return page, true, nil
			}
		}
		if lo <= max(first, 1) || read >= tailMaxEvents {
			return page, false, nil
		}
	}
}

// readSubmissions reads the events of filter in [lo, hi) and records in cands
// each job's latest submission event (accepted or held). It returns how many
// events it read and the smallest command sequence among them.
func (c *Client) readSubmissions(ctx context.Context, filter string, lo, hi uint64, cands map[string]submitted) (n int, low uint64, _ error) {
	// The consumer lapses by itself once read (InactiveThreshold), as the
	// ones of Watch do.
	cons, err := c.js.OrderedConsumer(ctx, c.n.EventsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
		NamePrefix: ConsumerName(), DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: lo, InactiveThreshold: answersThreshold})
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
	}
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, 256)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return 0, 0, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
			}
			if md.Sequence.Stream >= hi {
				done = true // read in a newer window already
				continue
			}
			var ev struct {
				Type    ledger.EventType `json:"type"`
				Seq     uint64           `json:"seq"`
				Time    time.Time        `json:"time"`
				Job     string           `json:"job"`
				Account string           `json:"account"`
			}
			if json.Unmarshal(m.Data(), &ev) != nil || ev.Seq == 0 {
				continue // not an event the scheduler wrote; the records decide
			}
			n++
			if low == 0 || ev.Seq < low {
				low = ev.Seq
			}
			if ev.Type != ledger.EventAccepted && ev.Type != ledger.EventHeld || !subjects.ValidToken(ev.Job) {
				continue
			}
			if s, ok := cands[ev.Job]; !ok || ev.Seq > s.seq {
				cands[ev.Job] = submitted{job: ev.Job, account: ev.Account, seq: ev.Seq, at: ev.Time}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return 0, 0, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
		}
		if done || got == 0 {
			break
		}
		remaining -= uint64(min(uint64(got), remaining))
	}
	return n, low, nil
}

// fetchedJob is a candidate's record as read: the job, nil when its key is
// gone (archived) or holds another submission's job; or the value gpuq did
// not write there.
type fetchedJob struct {
	job     *ledger.Job
	foreign *ForeignValueError
}

// tailRows reads the records of the newest candidates (newest by their
// submission events, keeping the records already in fetched) until limit
// of them pass f after the cursor, and says whether those are the page: its
// last job submitted after oldest, and after every candidate not read.
func (c *Client) tailRows(ctx context.Context, f JobFilter, after *cursor, cands map[string]submitted, oldest uint64,
	fetched map[string]fetchedJob) (rows []Listed, foreign []*ForeignValueError, complete bool, _ error) {
	order := make([]submitted, 0, len(cands))
	for _, s := range cands {
		order = append(order, s)
	}
	// Newest first by the event: a job's submission time is at most its
	// event's (a held job's admission comes later).
	slices.SortFunc(order, func(a, b submitted) int {
		return compareNewest(cursor{a.at, a.job}, cursor{b.at, b.job})
	})
	want := func(j *ledger.Job) bool {
		return (f.Account == "" || j.Account == f.Account) && (f.State == "" || j.State == f.State) &&
			(f.ArrayID == "" || j.ArrayID == f.ArrayID) && (after == nil || compareNewest(cursorOf(j), *after) > 0)
	}
	for i := 0; i < len(order); {
		// The records of the next candidates, tailFetchers at a time.
		end := min(i+tailFetchers, len(order))
		if err := c.fetchJobs(ctx, order[i:end], fetched); err != nil {
			return nil, nil, false, err
		}
		for _, s := range order[i:end] {
			switch r := fetched[s.job]; {
			case r.foreign != nil:
				foreign = append(foreign, r.foreign)
			case r.job != nil && want(r.job):
				rows = append(rows, Listed{Job: r.job})
			}
		}
		i = end
		slices.SortFunc(rows, func(a, b Listed) int { return compareNewest(cursorOf(a.Job), cursorOf(b.Job)) })
		if len(rows) < f.Limit {
			continue
		}
		rows = rows[:f.Limit]
		lastRow := rows[len(rows)-1].Job
		if i < len(order) && compareNewest(cursorOf(lastRow), cursor{order[i].at, order[i].job}) >= 0 {
			continue // a candidate not read yet may be newer than the page's last
		}
		return rows, foreign, lastRow.SubmitSeq > oldest, nil
	}
	return rows, foreign, false, nil
}

// fetchJobs reads the records of the candidates not in fetched yet, at
// once.
func (c *Client) fetchJobs(ctx context.Context, cands []submitted, fetched map[string]fetchedJob) error {
	kv, err := c.ledgerKV(ctx)
	if err != nil {
		return err
	}
	type result struct {
		id string
		r  fetchedJob
	}
	var todo []submitted
	for _, s := range cands {
		if _, ok := fetched[s.job]; !ok {
			todo = append(todo, s)
		}
	}
	results := make([]result, len(todo))
	errs := make([]error, len(todo))
	var wg sync.WaitGroup
	for k, s := range todo {
		wg.Go(func() {
			key := subjects.JobKey(s.job)
			e, err := kv.Get(ctx, key)
			results[k].id = s.job
			switch {
			case errors.Is(err, jetstream.ErrKeyNotFound):
				return // archived since: not in the view
			case err != nil:
				errs[k] = fmt.Errorf("job %s: %w", s.job, err)
				return
			}
			j, err := ledger.UnmarshalJob(e.Value())
			if err == nil && j.ID != s.job {
				err = fmt.Errorf("the record is of job %q", j.ID)
			}
			switch {
			case err != nil:
				results[k].r.foreign = &ForeignValueError{Key: key, Revision: e.Revision(), Err: err}
			case j.SubmitSeq <= s.seq:
				results[k].r.job = j
			}
			// A record submitted after the event is another submission
			// under the same id, named by an event of its own.
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, r := range results {
		fetched[r.id] = r.r
	}
	return nil
}
