package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
// the commands. They are stored in that order but for a few: a publish
// retried alone while later ones went ahead, or one a new leader sent again
// after the server's duplicate window, lands after messages folded later.
// The scheduler's publisher keeps at most 1,024 messages in flight, and a
// takeover sends again at most what its predecessor had not checkpointed,
// so an event is stored after fewer than tailReorder events folded after
// it. Hence, of any tailReorder events read from a point of the stream on,
// at least one was folded after every event stored before that point, and
// the largest command sequence among them bounds the sequences before it.
// So the events stream's tail names, newest first, every job submitted
// after that bound, and a page is complete once its last job was submitted
// after it: any job it did not name was submitted before, and is older
// than the page. tailPage reads windows of the tail, each twice as long as
// the one before, and the records of the newest candidates, one key each,
// until the page is complete; it gives up (ok false, for the caller to
// read the whole view) when the window reaches the start of the stream
// (older events may have aged out) or tailMaxEvents, as a narrow filter (a
// state few recent jobs are in, an account with few events) may need.

// tailMaxEvents bounds the events tailPage reads before it gives up.
const tailMaxEvents = 1 << 16

// tailReorder bounds how many events folded after an event can be stored
// before it (see above), with room to spare.
const tailReorder = 4096

// tailBatch is how many events one pull of the tail asks for.
const tailBatch = 2048

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
	// The command sequences of the first c.tailReorder events read, in the
	// stream's order from the window's start.
	var head []uint64
	// The first window holds, if the filter is every job event, enough
	// events to bound the sequences before it.
	hi, window := last+1, uint64(max(256, c.tailReorder+8*f.Limit))
	fetched := map[string]fetchedJob{}
	for read := uint64(0); ; window *= 2 {
		lo := max(hi-min(window, hi-1), first, 1)
		seqs, err := c.readSubmissions(ctx, filter, lo, hi, cands)
		if err != nil {
			return page, false, err
		}
		head = append(seqs, head...)
		head = head[:min(len(head), c.tailReorder)]
		read += hi - lo
		hi = lo
		// Read from the stream's very first event, the tail holds every
		// submission's: the candidates are every job.
		whole := lo <= 1
		if len(head) == c.tailReorder || whole {
			var bound uint64 // every job submitted after it has its event in the tail
			if !whole {
				bound = slices.Max(head)
			}
			// One job more than the page, to tell whether a next page
			// holds any.
			more := f
			more.Limit++
			rows, foreign, complete, err := c.tailRows(ctx, more, after, cands, bound, fetched)
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
// each job's latest submission event (accepted or held). It returns the
// command sequences of the events it read, in the stream's order.
func (c *Client) readSubmissions(ctx context.Context, filter string, lo, hi uint64, cands map[string]submitted) (seqs []uint64, _ error) {
	// The consumer lapses by itself once read (InactiveThreshold), as the
	// ones of Watch do.
	cons, err := c.js.OrderedConsumer(ctx, c.n.EventsStream(), jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
		NamePrefix: ConsumerName(), DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: lo, InactiveThreshold: answersThreshold})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
	}
	for remaining := info.NumPending; remaining > 0; {
		batch, err := cons.Fetch(int(min(remaining, tailBatch)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
			}
			if md.Sequence.Stream >= hi {
				done = true // read in a newer window already
				continue
			}
			ev, ok := decodeTailEvent(m.Data())
			if !ok || ev.Seq == 0 {
				continue // not an event the scheduler wrote; the records decide
			}
			seqs = append(seqs, ev.Seq)
			if ev.Type != ledger.EventAccepted && ev.Type != ledger.EventHeld || !subjects.ValidToken(ev.Job) {
				continue
			}
			if s, ok := cands[ev.Job]; !ok || ev.Seq > s.seq {
				cands[ev.Job] = submitted{job: ev.Job, account: ev.Account, seq: ev.Seq, at: ev.Time}
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return nil, fmt.Errorf("read %s: %w", c.n.EventsStream(), err)
		}
		if done || got == 0 {
			break
		}
		remaining -= uint64(min(uint64(got), remaining))
	}
	return seqs, nil
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
// last job submitted after bound, and after every candidate not read.
func (c *Client) tailRows(ctx context.Context, f JobFilter, after *cursor, cands map[string]submitted, bound uint64,
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
			(f.ArrayID == "" || j.ArrayID() == f.ArrayID) && (after == nil || compareNewest(cursorOf(j), *after) > 0)
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
		return rows, foreign, lastRow.SubmitSeq > bound, nil
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

// tailEvent is what the tail reads of a job event.
type tailEvent struct {
	Type    ledger.EventType `json:"type"`
	Seq     uint64           `json:"seq"`
	Time    time.Time        `json:"time"`
	Job     string           `json:"job"`
	Account string           `json:"account"`
}

// decodeTailEvent decodes the fields the tail reads of a job event: at once
// when they lead it in the form the scheduler writes them (wire.JobEvent:
// {"v":…,"type":"…","seq":…,"time":"…","job":"…","account":"…",…}, no
// escapes), else with encoding/json. A page at 1,000,000 jobs reads several
// thousand events, and encoding/json took most of its time on them.
func decodeTailEvent(data []byte) (tailEvent, bool) {
	if ev, ok := scanTailEvent(data); ok {
		return ev, true
	}
	var ev tailEvent
	if json.Unmarshal(data, &ev) != nil {
		return tailEvent{}, false
	}
	return ev, true
}

// scanTailEvent is decodeTailEvent's fast path; ok false when data is not
// in the form it reads.
func scanTailEvent(data []byte) (ev tailEvent, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"v":`))
	if !ok {
		return ev, false
	}
	if _, rest, ok = scanUint(rest); !ok {
		return ev, false
	}
	var typ, at string
	var seq uint64
	if typ, rest, ok = scanString(rest, `,"type":`); !ok {
		return ev, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`,"seq":`)); !ok {
		return ev, false
	}
	if seq, rest, ok = scanUint(rest); !ok {
		return ev, false
	}
	if at, rest, ok = scanString(rest, `,"time":`); !ok {
		return ev, false
	}
	if ev.Job, rest, ok = scanString(rest, `,"job":`); !ok {
		return ev, false
	}
	if ev.Account, _, ok = scanString(rest, `,"account":`); !ok {
		return ev, false
	}
	// As encoding/json reads a time: RFC 3339, strictly.
	if ev.Time.UnmarshalJSON([]byte(`"`+at+`"`)) != nil {
		return tailEvent{}, false
	}
	ev.Type, ev.Seq = ledger.EventType(typ), seq
	return ev, true
}

// scanUint reads the JSON number at the start of b, a whole number without
// a sign, exponent or leading zero that fits in a uint64.
func scanUint(b []byte) (uint64, []byte, bool) {
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	if n == 0 || (n > 1 && b[0] == '0') || (n < len(b) && (b[n] == '.' || b[n] == 'e' || b[n] == 'E')) {
		return 0, b, false
	}
	v, err := strconv.ParseUint(string(b[:n]), 10, 64)
	return v, b[n:], err == nil
}

// scanString reads key (its comma and colon included) and the JSON string
// after it, which must hold no escape, no control character and no byte
// outside ASCII (encoding/json would replace invalid UTF-8).
func scanString(b []byte, key string) (string, []byte, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(key))
	if !ok || len(rest) == 0 || rest[0] != '"' {
		return "", b, false
	}
	rest = rest[1:]
	for i, c := range rest {
		switch {
		case c == '"':
			return string(rest[:i]), rest[i+1:], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return "", b, false
		}
	}
	return "", b, false
}
