package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

func init() {
	register(&command{
		name:    "usage",
		summary: "usage report: GPU-hours, jobs by outcome, credits reserved, charged, released, granted and refilled",
		usage:   "usage [--account A] [--since T] [--until T] [--by day|week|month|job|model] [--output table|json|csv]",
		example: `  gpuq usage --account vision --since 2026-11-01 --until 2026-12-01 --by day
  gpuq usage --by month --output csv > usage.csv
  gpuq usage --account vision --by job --output json
  # credits come from the journal (every balance movement, by its time);
  #   jobs and GPU-hours from the ledger and the history of archived jobs,
  #   each finished job once, by its end time
  # GPU-hours: for every attempt that started, its GPUs × the time from its
  #   start to its end, as the scheduler recorded them
  # a date is midnight UTC; days, weeks (ISO, from Monday) and months are UTC
  # the report is as of the ledger's checkpoint: grants + refills - charged is
  #   the balance, reserved - charged - released what is reserved now, for
  #   an account whose journal is whole`,
		run: runUsage,
	})
}

// usageBy are the groupings of gpuq usage.
var usageBy = []string{"day", "week", "month", "job", "model"}

// usageRow is one group of a usage report: what an account used in one
// day, week or month, for one job or on one GPU model.
type usageRow struct {
	Account string `json:"account"`
	// Group is the day (2026-11-01), ISO week (2026-W44), month (2026-11),
	// job id or GPU model; "" for movements of no job (grants, refills)
	// by job or model, and for jobs that never started by model.
	Group string `json:"group"`
	// Start and End bound a day, week or month: [Start, End), in UTC.
	Start time.Time `json:"start,omitzero"`
	End   time.Time `json:"end,omitzero"`
	usageTotals
}

// usageTotals are the sums of a usage row or report.
type usageTotals struct {
	// Jobs counts the jobs that ended in the group, by their final state.
	Jobs usageJobs `json:"jobs"`
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

type usageJobs struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Rejected  int `json:"rejected"`
}

// usageReport is what gpuq usage prints.
type usageReport struct {
	Account string    `json:"account,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	Until   time.Time `json:"until,omitzero"`
	By      string    `json:"by"`
	// Checkpoint is the ledger command the report is as of: journal
	// entries of later commands are left out.
	Checkpoint uint64      `json:"checkpoint"`
	Rows       []usageRow  `json:"rows"`
	Total      usageTotals `json:"total"`
}

// usageQuery says what a usage report covers.
type usageQuery struct {
	account      string
	since, until time.Time // until zero: no end
	by           string
	checkpoint   uint64
}

func (q usageQuery) inRange(t time.Time) bool {
	return !t.Before(q.since) && (q.until.IsZero() || t.Before(q.until))
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

// gpuTime is GPUs × (end - start) over the attempts of j that started.
func gpuTime(j *ledger.Job) time.Duration {
	var d time.Duration
	for _, a := range j.Attempts {
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
func buildUsage(q usageQuery, entries []ledger.Entry, jobs []*ledger.Job) usageReport {
	rep := usageReport{Account: q.account, Since: q.since, Until: q.until, By: q.by, Checkpoint: q.checkpoint, Rows: []usageRow{}}
	rows := map[[2]string]*usageRow{}
	row := func(account, group string, start, end time.Time) *usageTotals {
		k := [2]string{group, account}
		r := rows[k]
		if r == nil {
			r = &usageRow{Account: account, Group: group, Start: start, End: end}
			rows[k] = r
		}
		return &r.usageTotals
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
	group := func(account string, t time.Time, job string, model string) *usageTotals {
		switch q.by {
		case "job":
			return row(account, job, time.Time{}, time.Time{})
		case "model":
			return row(account, model, time.Time{}, time.Time{})
		default:
			k, start, end := period(q.by, t)
			return row(account, k, start, end)
		}
	}
	for _, e := range entries {
		if q.account != "" && e.Account != q.account || !q.inRange(e.Time) || e.Kind == ledger.EntrySeal {
			continue
		}
		model := ""
		if j := jobOf(e); j != nil {
			model = j.Model
		}
		for _, t := range []*usageTotals{group(e.Account, e.Time, e.Job, model), &rep.Total} {
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
		if q.account != "" && j.Account != q.account || !j.State.Terminal() || !q.inRange(j.EndedAt) {
			continue
		}
		for _, t := range []*usageTotals{group(j.Account, j.EndedAt, j.ID, j.Model), &rep.Total} {
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
			t.GPUTime += gpuTime(j)
		}
	}
	for _, r := range rows {
		r.finish()
		rep.Rows = append(rep.Rows, *r)
	}
	rep.Total.finish()
	slices.SortFunc(rep.Rows, func(a, b usageRow) int {
		if a.Group != b.Group {
			return cmp.Compare(a.Group, b.Group)
		}
		return cmp.Compare(a.Account, b.Account)
	})
	return rep
}

func (t *usageTotals) finish() {
	t.GPUText, t.GPUHours = t.GPUTime.String(), t.GPUTime.Hours()
}

// usageEntries picks the journal entries a report counts: the chained
// ones, and legacy ones (kept by a version before the chain) of commands
// before the first chained entry of their account, so no movement counts
// twice. Entries of commands past checkpoint (a flush in progress) are left
// out, so the entries agree with the ledger view as of checkpoint.
func usageEntries(j natsbus.Journal, checkpoint uint64) []ledger.Entry {
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

// parseUsageTime reads --since or --until: a date is midnight UTC, as the
// report's days are UTC; else an RFC 3339 time, as parseTime reads it.
func parseUsageTime(flag, v string) (time.Time, error) {
	if t, err := time.ParseInLocation(time.DateOnly, v, time.UTC); err == nil {
		return t, nil
	}
	return parseTime(flag, v)
}

func runUsage(ctx context.Context, e *env, args []string) error {
	c := find("usage")
	fs := e.flags(c)
	e.csv = true
	fs.Lookup("output").Usage = "output format: table, json or csv"
	var q usageQuery
	fs.StringVar(&q.account, "account", "", "only this account (default: every account)")
	sinceText := fs.String("since", "", "from this time on: a date (2026-11-01, midnight UTC) or RFC 3339")
	untilText := fs.String("until", "", "before this time: a date (midnight UTC) or RFC 3339")
	fs.StringVar(&q.by, "by", "day", "group by day, week, month, job or model")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if !slices.Contains(usageBy, q.by) {
		return usagef("--by %q: want day, week, month, job or model", q.by)
	}
	var err error
	if q.since, err = parseUsageTime("since", *sinceText); err != nil {
		return err
	}
	if q.until, err = parseUsageTime("until", *untilText); err != nil {
		return err
	}
	if !q.until.IsZero() && !q.until.After(q.since) {
		return usagef("--until %s is not after --since %s", *untilText, *sinceText)
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	view, err := loadView(ctx, s)
	if err != nil {
		return err
	}
	q.checkpoint = view.Checkpoint
	journal, err := natsbus.ReadJournal(ctx, s.js, s.n)
	if err != nil {
		return err
	}
	for _, b := range journal.Bad {
		fmt.Fprintf(e.stderr, "gpuq usage: left out: %s\n", b)
	}
	// Every job once: the ledger's, then the archived ones it no longer
	// holds (a job archived as the view was read is in both).
	jobs := jobsOnce{}
	for _, j := range view.State.Jobs {
		jobs.add(j)
	}
	err = s.c.Histories(ctx, q.account, q.since, func(h wire.History) error {
		jobs.add(h.Job)
		return nil
	})
	if err != nil {
		return err
	}
	rep := buildUsage(q, usageEntries(journal, view.Checkpoint), jobs.list)
	switch e.output {
	case "json":
		return printJSON(e.stdout, rep)
	case "csv":
		return printUsageCSV(e, rep)
	}
	t := newTable(e.stdout, "ACCOUNT", strings.ToUpper(rep.By), "JOBS", "OK", "FAILED", "CANCELLED", "REJECTED", "GPU-HOURS",
		"RESERVED", "CHARGED", "RELEASED", "GRANTS", "REFILLS")
	line := func(account, group string, u usageTotals) {
		t.row(account, group, u.Jobs.Total, u.Jobs.Succeeded, u.Jobs.Failed, u.Jobs.Cancelled, u.Jobs.Rejected,
			strconv.FormatFloat(u.GPUHours, 'f', 2, 64), u.Reserved, u.Charged, u.Released, u.Grants, u.Refills)
	}
	for _, r := range rep.Rows {
		line(r.Account, dash(r.Group), r.usageTotals)
	}
	line("TOTAL", "", rep.Total)
	return t.flush()
}

// usageCSVHeader is the header line of gpuq usage --output csv.
var usageCSVHeader = []string{"account", "group", "start", "end", "jobs", "succeeded", "failed", "cancelled", "rejected",
	"gpu_hours", "gpu_time", "reserved", "charged", "released", "grants", "refills", "settles"}

// printUsageCSV writes one line per row, no total (a sum of the column is
// the total).
func printUsageCSV(e *env, rep usageReport) error {
	w := csv.NewWriter(e.stdout)
	if err := w.Write(usageCSVHeader); err != nil {
		return err
	}
	stamp := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.Format(time.RFC3339)
	}
	num := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, r := range rep.Rows {
		u := r.usageTotals
		rec := []string{r.Account, r.Group, stamp(r.Start), stamp(r.End), num(int64(u.Jobs.Total)), num(int64(u.Jobs.Succeeded)),
			num(int64(u.Jobs.Failed)), num(int64(u.Jobs.Cancelled)), num(int64(u.Jobs.Rejected)),
			strconv.FormatFloat(u.GPUHours, 'f', -1, 64), u.GPUText, num(int64(u.Reserved)), num(int64(u.Charged)),
			num(int64(u.Released)), num(int64(u.Grants)), num(int64(u.Refills)), num(int64(u.Settles))}
		if err := w.Write(rec); err != nil {
			return err
		}
	}
	w.Flush()
	return w.Error()
}
