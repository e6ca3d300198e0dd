package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// usageOut is gpuq usage --output json as a script reads it.
type usageOut struct {
	Account    string
	By         string
	Checkpoint uint64
	Rows       []struct {
		Account, Group string
		Start, End     time.Time
		usageSums
	}
	Total usageSums
}

type usageSums struct {
	Jobs                                         struct{ Total, Succeeded, Failed, Cancelled, Rejected int }
	GPUTime                                      string  `json:"gpu_time"`
	GPUHours                                     float64 `json:"gpu_hours"`
	Reserved, Charged, Released, Grants, Refills int64
	Settles                                      int
}

// TestUsageReconciles runs jobs on gpuq dev (one archived to the history
// before the report, one that fails, a metered one that releases part of
// its reservation, one still running), a grant and a refill, and checks
// that gpuq usage agrees to the credit with gpuq account show, with the
// settle entries of the journal and with each job's record.
func TestUsageReconciles(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--job-retention", "1s")
	d.ok("account", "create", "team", "--balance", "10000")
	d.ok("prices", "set", "--default", "3600")
	d.ok("submit", "--id", "u-ok", "--account", "team", "--cost", "100", "--wait", "--", "true")
	for deadline := time.Now().Add(30 * time.Second); ; {
		var live []struct{ ID string }
		d.json(&live, "jobs", "--account", "team")
		if len(live) == 0 {
			break // u-ok is archived: the report must read it from the history
		}
		if time.Now().After(deadline) {
			t.Fatalf("u-ok still in the ledger 30s after it ended: %+v", live)
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.ok("account", "refill", "team", "--rate", "3600000", "--cap", "100000000")
	if r := d.gpuq("submit", "--id", "u-fail", "--account", "team", "--cost", "50", "--wait", "--", "false"); r.code != exitJobFailed {
		t.Fatalf("submit u-fail: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	d.ok("submit", "--id", "u-meter", "--account", "team", "--gpus", "2", "--walltime", "1h", "--wait", "--", "sleep", "0.1")
	d.ok("account", "grant", "team", "500")
	d.ok("submit", "--id", "u-run", "--account", "team", "--cost", "30", "--", "sleep", "60")
	var last struct{ Seq uint64 }
	d.json(&last, "account", "refill", "team", "--rate", "0")

	// The last credit movement is the refill stopped; wait for the
	// checkpoint to pass it, so the report and account show see one state.
	var u usageOut
	for deadline := time.Now().Add(30 * time.Second); ; {
		d.json(&u, "usage", "--account", "team")
		if u.Checkpoint >= last.Seq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage checkpoint %d, want at least %d after 30s", u.Checkpoint, last.Seq)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var acct struct{ Balance, Reserved int64 }
	d.json(&acct, "account", "show", "team")
	tot := u.Total
	if tot.Grants != 10500 || tot.Refills <= 0 {
		t.Errorf("grants %d, refills %d; want 10500 (creation and grant) and some refill", tot.Grants, tot.Refills)
	}
	if got := tot.Grants + tot.Refills - tot.Charged; got != acct.Balance {
		t.Errorf("grants %d + refills %d - charged %d = %d, account show says balance %d", tot.Grants, tot.Refills, tot.Charged, got, acct.Balance)
	}
	if got := tot.Reserved - tot.Charged - tot.Released; got != acct.Reserved || acct.Reserved != 30 {
		t.Errorf("reserved %d - charged %d - released %d = %d, account show says reserved %d (want 30, u-run's)", tot.Reserved, tot.Charged, tot.Released, got, acct.Reserved)
	}

	// Against the journal's settle entries, read here from the stream.
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	journal, err := natsbus.ReadJournal(ctx, js, subjects.Default)
	if err != nil {
		t.Fatal(err)
	}
	var charged, released, settles int64
	for _, e := range journal.Chained {
		if e.Account == "team" && e.Kind == ledger.EntrySettle && e.Seq <= u.Checkpoint {
			charged, released, settles = charged+int64(e.Amount), released+int64(e.Released), settles+1
		}
	}
	if charged != tot.Charged || released != tot.Released || settles != int64(tot.Settles) || settles != 3 {
		t.Errorf("settle entries: %d charged, %d released in %d; usage says %d, %d in %d (want 3 settles)",
			charged, released, settles, tot.Charged, tot.Released, tot.Settles)
	}

	// Against each job's own record: costs reserved, charges, GPU time.
	var cost, jobCharged int64
	var gpu time.Duration
	for _, id := range []string{"u-ok", "u-fail", "u-meter", "u-run"} {
		var j ledger.Job
		d.json(&j, "job", id, "--account", "team")
		cost += int64(j.Cost)
		jobCharged += int64(j.Charged)
		if j.State.Terminal() {
			gpu += gpuTime(&j)
		}
	}
	if cost != tot.Reserved || jobCharged != tot.Charged || jobCharged <= 100 || jobCharged >= 100+7200 {
		t.Errorf("jobs cost %d, charged %d (want 100 and part of the metered 7200); usage reserved %d, charged %d", cost, jobCharged, tot.Reserved, tot.Charged)
	}
	if tot.GPUTime != gpu.String() || gpu <= 0 || tot.GPUHours != gpu.Hours() {
		t.Errorf("usage gpu_time %s (%v h), jobs' attempts add up to %s", tot.GPUTime, tot.GPUHours, gpu)
	}
	if j := tot.Jobs; j.Total != 3 || j.Succeeded != 2 || j.Failed != 1 {
		t.Errorf("usage jobs %+v, want 3: 2 succeeded, 1 failed (u-run still running)", j)
	}

	// By day: UTC days, rows that add up to the total.
	var sum usageSums
	for _, r := range u.Rows {
		day, err := time.Parse(time.DateOnly, r.Group)
		if err != nil || r.Account != "team" || !r.Start.Equal(day) || !r.End.Equal(day.AddDate(0, 0, 1)) {
			t.Errorf("by day row %+v", r)
		}
		sum.Charged += r.Charged
		sum.Reserved += r.Reserved
		sum.Grants += r.Grants
		sum.Jobs.Total += r.Jobs.Total
	}
	if u.By != "day" || len(u.Rows) == 0 || sum.Charged != tot.Charged || sum.Reserved != tot.Reserved || sum.Grants != tot.Grants || sum.Jobs.Total != tot.Jobs.Total {
		t.Errorf("by day: %+v, rows add up to %+v", u, sum)
	}

	// By job: the archived job is there, from the history; the running
	// one with its reservation and no end; grants and refills under no job.
	var byJob usageOut
	d.json(&byJob, "usage", "--account", "team", "--by", "job")
	got := map[string]usageSums{}
	for _, r := range byJob.Rows {
		got[r.Group] = r.usageSums
	}
	if r := got["u-ok"]; r.Jobs.Succeeded != 1 || r.Charged != 100 || r.Reserved != 100 || r.Released != 0 {
		t.Errorf("by job u-ok (archived) = %+v", r)
	}
	if r := got["u-fail"]; r.Jobs.Failed != 1 || r.Charged != 0 || r.Released != 50 {
		t.Errorf("by job u-fail = %+v", r)
	}
	if r := got["u-meter"]; r.Jobs.Succeeded != 1 || r.Charged != jobCharged-100 || r.Released != 7200-r.Charged || r.Released == 0 {
		t.Errorf("by job u-meter = %+v", r)
	}
	if r := got["u-run"]; r.Jobs.Total != 0 || r.Reserved != 30 || r.Settles != 0 {
		t.Errorf("by job u-run = %+v", r)
	}
	if r := got[""]; r.Grants != 10500 || r.Refills != tot.Refills || r.Reserved != 0 {
		t.Errorf("by job, no job = %+v", r)
	}
	if len(got) != 5 || byJob.Total != u.Total {
		t.Errorf("by job: %d rows %+v, total %+v; want 5 rows and the total by day %+v", len(got), got, byJob.Total, u.Total)
	}

	// By model: the simulated worker's model, and "" for the rest.
	var byModel usageOut
	d.json(&byModel, "usage", "--account", "team", "--by", "model")
	for _, r := range byModel.Rows {
		if r.Group != "" && r.Jobs.Total != 3 {
			t.Errorf("by model row %+v: want the 3 ended jobs on the simulated model", r)
		}
	}

	// CSV: the header, and one line per row.
	out := d.ok("usage", "--account", "team", "--by", "job", "--output", "csv")
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatalf("usage --output csv printed %q: %v", out, err)
	}
	if strings.Join(recs[0], ",") != "account,group,start,end,jobs,succeeded,failed,cancelled,rejected,gpu_hours,gpu_time,reserved,charged,released,grants,refills,settles" || len(recs) != 1+5 {
		t.Errorf("usage --output csv:\n%s", out)
	}

	// Filters: another account; a window that holds nothing.
	var demo usageOut
	d.json(&demo, "usage", "--account", "demo", "--by", "month")
	if demo.Total.Grants != 1000 || demo.Total.Reserved != 0 || demo.Total.Jobs.Total != 0 {
		t.Errorf("usage --account demo = %+v, want its 1000 created and nothing of team's", demo.Total)
	}
	var ahead usageOut
	d.json(&ahead, "usage", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if len(ahead.Rows) != 0 || ahead.Total.Grants != 0 || ahead.Total.Jobs.Total != 0 {
		t.Errorf("usage --since an hour ahead = %+v, want nothing", ahead)
	}
	var before usageOut
	d.json(&before, "usage", "--account", "team", "--until", "2026-01-01")
	if len(before.Rows) != 0 {
		t.Errorf("usage --until 2026-01-01 = %+v, want nothing", before)
	}
	if out := d.ok("usage", "--account", "team", "--by", "job"); !strings.Contains(out, "u-ok") || !strings.Contains(out, "TOTAL") {
		t.Errorf("usage table:\n%s", out)
	}
	for _, bad := range [][]string{{"--by", "year"}, {"--output", "xml"}, {"--since", "yesterday"}, {"--since", "2026-12-01", "--until", "2026-11-01"}} {
		if r := d.gpuq(append([]string{"usage"}, bad...)...); r.code != exitUsage {
			t.Errorf("usage %v: exit %d, want %d\n%s", bad, r.code, exitUsage, r.stderr)
		}
	}
	if r := d.gpuq("jobs", "--output", "csv"); r.code != exitUsage {
		t.Errorf("jobs --output csv: exit %d, want %d (csv is usage's alone)", r.code, exitUsage)
	}
	// Stopped now, so gpuq dev need not wait for it to stop on its way out.
	d.ok("cancel", "u-run")
	waitState(t, d, "u-run", "cancelled")
}

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
	first := &ledger.Job{ID: "j", Account: "a", State: ledger.StateSucceeded, GPUs: 2, Model: "A100", SubmitSeq: 1,
		EndedAt: at("2026-11-01T10:00:00Z"), Attempts: []ledger.Attempt{
			{GPUs: 2, EndedAt: at("2026-11-01T08:00:00Z")}, // never started: no GPU time
			{GPUs: 2, StartedAt: at("2026-11-01T09:00:00Z"), EndedAt: at("2026-11-01T10:00:00Z")},
		}}
	again := &ledger.Job{ID: "j", Account: "a", State: ledger.StateFailed, GPUs: 1, Model: "H200", SubmitSeq: 10,
		EndedAt: at("2026-11-02T00:30:00Z"), Attempts: []ledger.Attempt{
			{GPUs: 1, StartedAt: at("2026-11-02T00:00:00Z"), EndedAt: at("2026-11-02T00:30:00Z")},
		}}
	entries := []ledger.Entry{
		{Kind: ledger.EntryGrant, Account: "a", Amount: 100, Seq: 0, Time: at("2026-10-31T00:00:00Z")},
		{Kind: ledger.EntryReserve, Account: "a", Job: "j", Amount: 10, Seq: 1, Time: at("2026-11-01T07:00:00Z")},
		{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 10, Held: 10, Seq: 5, Time: at("2026-11-01T10:00:00Z")},
		{Kind: ledger.EntrySeal, Account: "a", Balance: 90, Seq: 5, Time: at("2026-11-01T10:00:00Z")},
		{Kind: ledger.EntryReserve, Account: "a", Job: "j", Amount: 4, Seq: 10, Time: at("2026-11-01T23:00:00Z")},
		{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 0, Held: 4, Released: 4, Seq: 12, Time: at("2026-11-02T00:30:00Z")},
		{Kind: ledger.EntryRefill, Account: "b", Amount: 7, Seq: 13, Time: at("2026-11-02T01:00:00Z")},
	}
	rep := buildUsage(usageQuery{by: "model"}, entries, []*ledger.Job{again, first})
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
	rep = buildUsage(usageQuery{by: "day", account: "a", since: at("2026-11-02T00:00:00Z")}, entries, []*ledger.Job{first, again})
	if len(rep.Rows) != 1 || rep.Rows[0].Group != "2026-11-02" || rep.Total.Reserved != 0 || rep.Total.Released != 4 ||
		rep.Total.Jobs.Total != 1 || rep.Total.Refills != 0 {
		t.Errorf("since 2026-11-02, account a: %+v", rep)
	}

	// Legacy entries count only before the first chained one of their
	// account, and nothing past the checkpoint counts.
	j := natsbus.Journal{
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
	live := &ledger.Job{ID: "j", Account: "a", State: ledger.StateSucceeded, SubmittedAt: sub, EndedAt: end}
	archived := live.Clone()
	archived.SubmittedAt = sub.In(time.FixedZone("x", 3600)) // the same instant, read back in another zone
	reused := &ledger.Job{ID: "j", Account: "a", State: ledger.StateFailed, SubmittedAt: end, EndedAt: end.Add(time.Hour)}
	var o jobsOnce
	for _, j := range []*ledger.Job{live, archived, reused} {
		o.add(j)
	}
	rep := buildUsage(usageQuery{by: "job"}, nil, o.list)
	if j := rep.Total.Jobs; len(o.list) != 2 || o.list[0] != live || j.Total != 2 || j.Succeeded != 1 || j.Failed != 1 {
		t.Errorf("jobs %v, total %+v; want the live record and the reused id", o.list, j)
	}
}

// The JSON keys scripts read.
func TestUsageJSONKeys(t *testing.T) {
	b, err := json.Marshal(buildUsage(usageQuery{by: "day"}, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`"by":"day"`, `"checkpoint":0`, `"rows":[]`, `"gpu_time":"0s"`, `"gpu_hours":0`, `"reserved":0`, `"released":0`, `"refills":0`, `"settles":0`} {
		if !strings.Contains(string(b), k) {
			t.Errorf("usage JSON %s lacks %s", b, k)
		}
	}
}
