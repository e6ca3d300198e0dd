package main

import (
	"context"
	"encoding/csv"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuq/gpuq/client"
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

// usageReport is what gpuq usage prints (client.Usage).
type usageReport = client.UsageReport

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
	var q client.UsageQuery
	fs.StringVar(&q.Account, "account", "", "only this account (default: every account)")
	sinceText := fs.String("since", "", "from this time on: a date (2026-11-01, midnight UTC) or RFC 3339")
	untilText := fs.String("until", "", "before this time: a date (midnight UTC) or RFC 3339")
	fs.StringVar(&q.By, "by", "day", "group by day, week, month, job or model")
	if err := e.parseNoArgs(c, fs, args); err != nil {
		return err
	}
	if !slices.Contains(client.UsageBy, q.By) {
		return usagef("--by %q: want day, week, month, job or model", q.By)
	}
	var err error
	if q.Since, err = parseUsageTime("since", *sinceText); err != nil {
		return err
	}
	if q.Until, err = parseUsageTime("until", *untilText); err != nil {
		return err
	}
	if !q.Until.IsZero() && !q.Until.After(q.Since) {
		return usagef("--until %s is not after --since %s", *untilText, *sinceText)
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	defer s.close()
	rep, err := s.c.Usage(ctx, q)
	if err != nil {
		return bucketHint(err)
	}
	for _, b := range rep.LeftOut {
		fmt.Fprintf(e.stderr, "gpuq usage: left out: %s\n", b)
	}
	switch e.output {
	case "json":
		return printJSON(e.stdout, rep)
	case "csv":
		return printUsageCSV(e, rep)
	}
	t := newTable(e.stdout, "ACCOUNT", strings.ToUpper(rep.By), "JOBS", "OK", "FAILED", "CANCELLED", "REJECTED", "GPU-HOURS",
		"RESERVED", "CHARGED", "RELEASED", "GRANTS", "REFILLS")
	line := func(account, group string, u client.UsageTotals) {
		t.row(account, group, u.Jobs.Total, u.Jobs.Succeeded, u.Jobs.Failed, u.Jobs.Cancelled, u.Jobs.Rejected,
			strconv.FormatFloat(u.GPUHours, 'f', 2, 64), u.Reserved, u.Charged, u.Released, u.Grants, u.Refills)
	}
	for _, r := range rep.Rows {
		line(r.Account, dash(r.Group), r.UsageTotals)
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
		u := r.UsageTotals
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
