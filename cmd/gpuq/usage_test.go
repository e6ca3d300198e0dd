package main

import (
	"context"
	"encoding/csv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
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
	c, err := client.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	journal, err := c.Journal(ctx, time.Time{})
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
		var v struct {
			ledger.JobRecord
			Walltime string `json:"walltime"` // job --output json prints durations as strings
		}
		d.json(&v, "job", id, "--account", "team")
		j := v.JobRecord.Job()
		cost += int64(j.Cost)
		jobCharged += int64(j.Charged)
		if j.State.Terminal() {
			gpu += client.GPUTime(j)
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
