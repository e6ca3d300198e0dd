package client

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// UsageBy are the groupings of a usage report.
var UsageBy = []string{"day", "week", "month", "job", "model"}

// Usage reports what accounts used: GPU time and jobs by outcome, from the
// ledger and the history of archived jobs (each finished job once, by its
// end time), and credits reserved, charged, released, granted and refilled,
// from the journal (every balance movement, by its time).
//
// The report is as of the ledger's checkpoint ([Client.Snapshot]): journal
// entries of later commands are left out, so grants + refills - charged is
// the balance, and reserved - charged - released what is reserved now, for
// an account whose journal is whole. With a Since, the journal is read from
// Since less [SealMargin] on (JetStream delivery by start time: the server
// finds the first message at or after a time without reading those
// before), and the history from Since on; without one, both are read whole.
// A journal message that is not an entry is left out and named in the
// report's LeftOut. It needs an admin's rights (the whole ledger and the
// journal). It returns an error for a By not in [UsageBy] and an Until not
// after Since.
func (c *Client) Usage(ctx context.Context, q UsageQuery) (UsageReport, error) {
	if !slices.Contains(UsageBy, q.By) {
		return UsageReport{}, fmt.Errorf("usage by %q: want one of %v", q.By, UsageBy)
	}
	if !q.Until.IsZero() && !q.Until.After(q.Since) {
		return UsageReport{}, fmt.Errorf("usage until %s is not after since %s", q.Until, q.Since)
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return UsageReport{}, err
	}
	var from time.Time
	if !q.Since.IsZero() {
		from = q.Since.Add(-SealMargin)
	}
	journal, err := c.Journal(ctx, from)
	if err != nil {
		return UsageReport{}, err
	}
	// Every job once: the ledger's, then the archived ones it no longer
	// holds (a job archived as the view was read is in both).
	jobs := jobsOnce{}
	for _, id := range slices.Sorted(maps.Keys(snap.State.Jobs)) {
		jobs.add(snap.State.Jobs[id])
	}
	err = c.Histories(ctx, q.Account, q.Since, func(h wire.History) error {
		jobs.add(h.Job)
		return nil
	})
	if err != nil {
		return UsageReport{}, err
	}
	rep := buildUsage(q, snap.Checkpoint, usageEntries(journal, snap.Checkpoint), jobs.list)
	rep.LeftOut, rep.JournalRead = journal.Bad, journal.Read
	return rep, nil
}

// UsageRow is one group of a usage report: what an account used in one
// day, week or month, for one job or on one GPU model.
type UsageRow struct {
	Account string `json:"account"`
	// Group is the day (2026-11-01), ISO week (2026-W44), month (2026-11),
	// job id or GPU model; "" for movements of no job (grants, refills)
	// by job or model, and for jobs that never started by model.
	Group string `json:"group"`
	// Start and End bound a day, week or month: [Start, End), in UTC.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	UsageTotals
}

// UsageTotals are the sums of a usage row or report.
type UsageTotals struct {
	// Jobs counts the jobs that ended in the group, by their final state.
	Jobs UsageJobs `json:"jobs"`
	// GPUTime is GPUs × run time summed over the attempts of those jobs
	// that started; GPUHours is the same in hours.
	GPUTime  time.Duration `json:"-"`
	GPUText  string        `json:"gpu_time"`
	GPUHours float64       `json:"gpu_hours"`
	// Credits, from journal entries in the group: reserved at submission
	// (reserve entries), charged and released at settlement (settle
	// entries), granted (grant entries, the creation balance included; a
	// grant may be negative) and refilled (refill entries).
	Reserved ledger.Credits `json:"reserved"`
	Charged  ledger.Credits `json:"charged"`
	Released ledger.Credits `json:"released"`
	Grants   ledger.Credits `json:"grants"`
	Refills  ledger.Credits `json:"refills"`
	// Settles counts the settle entries.
	Settles int `json:"settles"`
}

type UsageJobs struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Rejected  int `json:"rejected"`
}

// UsageReport is a usage report: rows by group, and their total.
type UsageReport struct {
	Account string    `json:"account,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	Until   time.Time `json:"until,omitzero"`
	By      string    `json:"by"`
	// Checkpoint is the ledger command the report is as of: journal
	// entries of later commands are left out.
	Checkpoint uint64      `json:"checkpoint"`
	Rows       []UsageRow  `json:"rows"`
	Total      UsageTotals `json:"total"`
	// LeftOut says why each journal message that is not an entry was left
	// out; JournalRead is how many messages of the journal stream the
	// report read.
	LeftOut     []string `json:"-"`
	JournalRead uint64   `json:"-"`
}

// UsageQuery says what a usage report covers.
type UsageQuery struct {
	Account      string    // only this account; "" for every account
	Since, Until time.Time // [Since, Until); a zero Until has no end
	// By groups the rows: "day", "week", "month" (UTC), "job" or "model".
	By string
}

func (q UsageQuery) inRange(t time.Time) bool {
	return !t.Before(q.Since) && (q.Until.IsZero() || t.Before(q.Until))
}

// period returns the UTC day, ISO week or month of t, with its bounds.
func period(by string, t time.Time) (key string, start, end time.Time) {
	t = t.UTC()
	y, m, d := t.Date()
	switch by {
	case "day":
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		return start.Format(time.DateOnly), start, start.AddDate(0, 0, 1)
	case "week":
		start = time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
		start = start.AddDate(0, 0, -((int(start.Weekday()) + 6) % 7)) // back to Monday
		wy, wk := t.ISOWeek()
		return fmt.Sprintf("%04d-W%02d", wy, wk), start, start.AddDate(0, 0, 7)
	default: // month
		start = time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
		return start.Format("2006-01"), start, start.AddDate(0, 1, 0)
	}
}

// GPUTime is GPUs × (end - start) summed over the attempts of j that
// started: the GPU time a usage report counts for j.
func GPUTime(j *ledger.Job) time.Duration {
	var d time.Duration
	for _, a := range j.Attempts() {
		if !a.StartedAt.IsZero() && a.EndedAt.After(a.StartedAt) {
			d += time.Duration(a.GPUs) * a.EndedAt.Sub(a.StartedAt)
		}
	}
	return d
}

// buildUsage sums entries and jobs into a report for q. entries are the
// journal's chained and legacy entries; jobs every finished and unfinished
// job known, each once. A job counts in the group of its end time (by job,
// its id; by model, the GPU model its last started attempt ran on); a
// journal entry in the group of its time (by job, its job; by model, its
// job's model, found among jobs).
func buildUsage(q UsageQuery, checkpoint uint64, entries []ledger.Entry, jobs []*ledger.Job) UsageReport {
	rep := UsageReport{Account: q.Account, Since: q.Since, Until: q.Until, By: q.By, Checkpoint: checkpoint, Rows: []UsageRow{}}
	rows := map[[2]string]*UsageRow{}
	row := func(account, group string, start, end time.Time) *UsageTotals {
		k := [2]string{group, account}
		r := rows[k]
		if r == nil {
			r = &UsageRow{Account: account, Group: group, Start: start, End: end}
			rows[k] = r
		}
		return &r.UsageTotals
	}
	// byID finds the job an entry of a job id belongs to: the last one
	// submitted at or before the entry's command (an id may be used again
	// once its job is archived).
	byID := map[string][]*ledger.Job{}
	for _, j := range jobs {
		k := j.Account + "\x00" + j.ID
		byID[k] = append(byID[k], j)
	}
	for _, js := range byID {
		slices.SortFunc(js, func(a, b *ledger.Job) int { return cmp.Compare(a.SubmitSeq, b.SubmitSeq) })
	}
	jobOf := func(e ledger.Entry) *ledger.Job {
		var found *ledger.Job
		if e.Job == "" {
			return nil
		}
		for _, j := range byID[e.Account+"\x00"+e.Job] {
			if j.SubmitSeq <= e.Seq {
				found = j
			}
		}
		return found
	}
	group := func(account string, t time.Time, job string, model string) *UsageTotals {
		switch q.By {
		case "job":
			return row(account, job, time.Time{}, time.Time{})
		case "model":
			return row(account, model, time.Time{}, time.Time{})
		default:
			k, start, end := period(q.By, t)
			return row(account, k, start, end)
		}
	}
	for _, e := range entries {
		if q.Account != "" && e.Account != q.Account || !q.inRange(e.Time) || e.Kind == ledger.EntrySeal {
			continue
		}
		model := ""
		if j := jobOf(e); j != nil {
			model = j.Model()
		}
		for _, t := range []*UsageTotals{group(e.Account, e.Time, e.Job, model), &rep.Total} {
			switch e.Kind {
			case ledger.EntryGrant:
				t.Grants += e.Amount
			case ledger.EntryRefill:
				t.Refills += e.Amount
			case ledger.EntryReserve:
				t.Reserved += e.Amount
			case ledger.EntrySettle:
				t.Charged += e.Amount
				t.Released += e.Released
				t.Settles++
			}
		}
	}
	for _, j := range jobs {
		if q.Account != "" && j.Account != q.Account || !j.State.Terminal() || !q.inRange(j.EndedAt()) {
			continue
		}
		for _, t := range []*UsageTotals{group(j.Account, j.EndedAt(), j.ID, j.Model()), &rep.Total} {
			t.Jobs.Total++
			switch j.State {
			case ledger.StateSucceeded:
				t.Jobs.Succeeded++
			case ledger.StateFailed:
				t.Jobs.Failed++
			case ledger.StateCancelled:
				t.Jobs.Cancelled++
			case ledger.StateRejected:
				t.Jobs.Rejected++
			}
			t.GPUTime += GPUTime(j)
		}
	}
	for _, r := range rows {
		r.finish()
		rep.Rows = append(rep.Rows, *r)
	}
	rep.Total.finish()
	slices.SortFunc(rep.Rows, func(a, b UsageRow) int {
		if a.Group != b.Group {
			return cmp.Compare(a.Group, b.Group)
		}
		return cmp.Compare(a.Account, b.Account)
	})
	return rep
}

func (t *UsageTotals) finish() {
	t.GPUText, t.GPUHours = t.GPUTime.String(), t.GPUTime.Hours()
}

// usageEntries picks the journal entries a report counts: the chained
// ones, and legacy ones (kept by a version before the chain) of commands
// before the first chained entry of their account, so no movement counts
// twice. Entries of commands past checkpoint (a flush in progress) are left
// out, so the entries agree with the ledger view as of checkpoint.
func usageEntries(j Journal, checkpoint uint64) []ledger.Entry {
	first := map[string]uint64{}
	var out []ledger.Entry
	for _, e := range j.Chained {
		if f, ok := first[e.Account]; !ok || e.Seq < f {
			first[e.Account] = e.Seq
		}
		if e.Seq <= checkpoint {
			out = append(out, e.Entry)
		}
	}
	for _, e := range j.Legacy {
		if f, ok := first[e.Account]; (!ok || e.Seq < f) && e.Seq <= checkpoint {
			out = append(out, e.Entry)
		}
	}
	return out
}

// jobsOnce collects jobs, each once: a job is the same one when it has the
// same id and submission time (an id used again after its job was archived
// is another job).
type jobsOnce struct {
	seen map[string]bool
	list []*ledger.Job
}

// add adds j unless it has it already, the first record added winning.
func (o *jobsOnce) add(j *ledger.Job) {
	k := j.ID + "\x00" + j.SubmittedAt.UTC().Format(time.RFC3339Nano)
	if o.seen[k] {
		return
	}
	if o.seen == nil {
		o.seen = map[string]bool{}
	}
	o.seen[k] = true
	o.list = append(o.list, j)
}
