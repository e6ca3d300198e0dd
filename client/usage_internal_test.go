package client

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// TestUsageGroups checks the grouping on fixed times: ISO weeks across a
// year's end, months, a job id used again, GPU time of attempts, and legacy
// entries counted only before an account's chain.
func TestUsageGroups(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	// 2026 has 53 ISO weeks: Monday 2026-12-28 to Sunday 2027-01-03.
	for _, c := range []struct{ by, t, key, start string }{
		{"week", "2026-12-28T00:00:00Z", "2026-W53", "2026-12-28"},
		{"week", "2027-01-03T23:59:59Z", "2026-W53", "2026-12-28"},
		{"week", "2027-01-04T00:00:00Z", "2027-W01", "2027-01-04"},
		{"week", "2027-01-04T00:30:00+01:00", "2026-W53", "2026-12-28"}, // 23:30 UTC on Sunday
		{"month", "2026-12-31T23:59:59Z", "2026-12", "2026-12-01"},
		{"day", "2026-11-01T23:30:00-02:00", "2026-11-02", "2026-11-02"},
	} {
		key, start, end := period(c.by, at(c.t))
		want, _ := time.Parse(time.DateOnly, c.start)
		span := map[string]time.Time{"week": want.AddDate(0, 0, 7), "month": want.AddDate(0, 1, 0), "day": want.AddDate(0, 0, 1)}[c.by]
		if key != c.key || !start.Equal(want) || !end.Equal(span) {
			t.Errorf("period(%s, %s) = %s [%s, %s), want %s from %s", c.by, c.t, key, start, end, c.key, c.start)
		}
	}

	// A job id used twice: each entry goes to the model of its own job.
	first := &ledger.Job{ID: "j", Account: "a", State: ledger.StateSucceeded, GPUs: 2, SubmitSeq: 1, JobOutcome: &ledger.JobOutcome{Model: "A100", EndedAt: at("2026-11-01T10:00:00Z"), Attempts: []ledger.Attempt{
		{GPUs: 2, EndedAt: at("2026-11-01T08:00:00Z")}, // never started: no GPU time
		{GPUs: 2, StartedAt: at("2026-11-01T09:00:00Z"), EndedAt: at("2026-11-01T10:00:00Z")},
	}}}
	again := &ledger.Job{ID: "j", Account: "a", State: ledger.StateFailed, GPUs: 1, SubmitSeq: 10, JobOutcome: &ledger.JobOutcome{Model: "H200", EndedAt: at("2026-11-02T00:30:00Z"), Attempts: []ledger.Attempt{
		{GPUs: 1, StartedAt: at("2026-11-02T00:00:00Z"), EndedAt: at("2026-11-02T00:30:00Z")},
	}}}
	entries := []ledger.Entry{
		{Kind: ledger.EntryGrant, Account: "a", Amount: 100, Seq: 0, Time: at("2026-10-31T00:00:00Z")},
		{Kind: ledger.EntryReserve, Account: "a", Job: "j", Amount: 10, Seq: 1, Time: at("2026-11-01T07:00:00Z")},
		{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 10, Reservation: 10, Seq: 5, Time: at("2026-11-01T10:00:00Z")},
		{Kind: ledger.EntrySeal, Account: "a", Balance: 90, Seq: 5, Time: at("2026-11-01T10:00:00Z")},
		{Kind: ledger.EntryReserve, Account: "a", Job: "j", Amount: 4, Seq: 10, Time: at("2026-11-01T23:00:00Z")},
		{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 0, Reservation: 4, Released: 4, Seq: 12, Time: at("2026-11-02T00:30:00Z")},
		{Kind: ledger.EntryRefill, Account: "b", Amount: 7, Seq: 13, Time: at("2026-11-02T01:00:00Z")},
	}
	rep := buildUsage(UsageQuery{By: "model"}, 0, entries, []*ledger.Job{again, first})
	type row struct {
		account, group           string
		jobs                     int
		gpu                      time.Duration
		reserved, charged, rel   ledger.Credits
		grants, refills, settles int64
	}
	var got []row
	for _, r := range rep.Rows {
		got = append(got, row{r.Account, r.Group, r.Jobs.Total, r.GPUTime, r.Reserved, r.Charged, r.Released, int64(r.Grants), int64(r.Refills), int64(r.Settles)})
	}
	want := []row{
		{"a", "", 0, 0, 0, 0, 0, 100, 0, 0},
		{"b", "", 0, 0, 0, 0, 0, 0, 7, 0},
		{"a", "A100", 1, 2 * time.Hour, 10, 10, 0, 0, 0, 1},
		{"a", "H200", 1, 30 * time.Minute, 4, 0, 4, 0, 0, 1},
	}
	if len(got) != len(want) {
		t.Fatalf("by model rows %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("by model row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if rep.Total.GPUText != (2*time.Hour+30*time.Minute).String() || rep.Total.GPUHours != 2.5 || rep.Total.Jobs.Failed != 1 {
		t.Errorf("total %+v", rep.Total)
	}

	// A window and an account: [2026-11-02, ...) of account a holds the
	// second job's end and its settle, not its reserve of the day before.
	rep = buildUsage(UsageQuery{By: "day", Account: "a", Since: at("2026-11-02T00:00:00Z")}, 0, entries, []*ledger.Job{first, again})
	if len(rep.Rows) != 1 || rep.Rows[0].Group != "2026-11-02" || rep.Total.Reserved != 0 || rep.Total.Released != 4 ||
		rep.Total.Jobs.Total != 1 || rep.Total.Refills != 0 {
		t.Errorf("since 2026-11-02, account a: %+v", rep)
	}

	// Legacy entries count only before the first chained one of their
	// account, and nothing past the checkpoint counts.
	j := Journal{
		Chained: []ledger.StoredEntry{
			{Entry: ledger.Entry{Kind: ledger.EntrySeal, Account: "a", Seq: 5}},
			{Entry: ledger.Entry{Kind: ledger.EntryGrant, Account: "a", Amount: 1, Seq: 5}},
			{Entry: ledger.Entry{Kind: ledger.EntryGrant, Account: "a", Amount: 2, Seq: 9}},
		},
		Legacy: []ledger.StoredEntry{
			{Entry: ledger.Entry{Kind: ledger.EntryGrant, Account: "a", Amount: 10, Seq: 3}},
			{Entry: ledger.Entry{Kind: ledger.EntryGrant, Account: "a", Amount: 20, Seq: 5}}, // also in the chain
			{Entry: ledger.Entry{Kind: ledger.EntryGrant, Account: "b", Amount: 40, Seq: 6}}, // b has no chain
		},
	}
	var sum ledger.Credits
	for _, e := range usageEntries(j, 8) {
		sum += e.Amount
	}
	if sum != 1+10+40 {
		t.Errorf("usageEntries up to command 8 sum to %d, want 51", sum)
	}
}

// TestUsageCountsEachJobOnce: a job read from the ledger and again from the
// history (archived as the report read the view) counts once; an id used
// again after its job was archived is a job of its own.
func TestUsageCountsEachJobOnce(t *testing.T) {
	sub := time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)
	end := sub.Add(time.Hour)
	live := &ledger.Job{ID: "j", Account: "a", State: ledger.StateSucceeded, SubmittedAt: sub, JobOutcome: &ledger.JobOutcome{EndedAt: end}}
	archived := live.Clone()
	archived.SubmittedAt = sub.In(time.FixedZone("x", 3600)) // the same instant, read back in another zone
	reused := &ledger.Job{ID: "j", Account: "a", State: ledger.StateFailed, SubmittedAt: end, JobOutcome: &ledger.JobOutcome{EndedAt: end.Add(time.Hour)}}
	var o jobsOnce
	for _, j := range []*ledger.Job{live, archived, reused} {
		o.add(j)
	}
	rep := buildUsage(UsageQuery{By: "job"}, 0, nil, o.list)
	if j := rep.Total.Jobs; len(o.list) != 2 || o.list[0] != live || j.Total != 2 || j.Succeeded != 1 || j.Failed != 1 {
		t.Errorf("jobs %v, total %+v; want the live record and the reused id", o.list, j)
	}
}

// The JSON keys scripts read.
func TestUsageJSONKeys(t *testing.T) {
	b, err := json.Marshal(buildUsage(UsageQuery{By: "day"}, 0, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"by":"day"`, `"checkpoint":0`, `"rows":[]`, `"gpu_time":"0s"`, `"gpu_hours":0`, `"reserved":0`, `"released":0`, `"refills":0`, `"settles":0`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("usage JSON %s lacks %s", b, k)
		}
	}
}
