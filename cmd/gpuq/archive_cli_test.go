package main

// gpuq job and gpuq jobs --since on a gpuq dev whose retention is a second:
// a finished job leaves the ledger, and both commands still find it, from
// the history, saying when it was archived.

import (
	"strings"
	"testing"
	"time"
)

func TestArchivedJobsAreStillFound(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--job-retention", "1s")
	before := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	d.ok("submit", "--id", "old-1", "--account", "demo", "--gpus", "1", "--cost", "10", "--wait", "--", "true")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var live []struct{ ID string }
		d.json(&live, "jobs")
		if len(live) == 0 {
			break // archived out of the ledger
		}
		if time.Now().After(deadline) {
			t.Fatalf("old-1 still in the ledger 30s after it ended: %+v", live)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var job struct {
		ID, State   string
		Charged     int64
		ArchivedAt  time.Time `json:"archived_at"`
		ArchivedSeq uint64    `json:"archived_seq"`
	}
	d.json(&job, "job", "old-1")
	if job.ID != "old-1" || job.State != "succeeded" || job.Charged != 10 || job.ArchivedAt.IsZero() || job.ArchivedSeq == 0 {
		t.Errorf("gpuq job of an archived job = %+v", job)
	}
	if out := d.ok("job", "old-1", "--account", "demo"); !strings.Contains(out, "archived") || !strings.Contains(out, "succeeded") {
		t.Errorf("gpuq job of an archived job says:\n%s", out)
	}
	var rows []struct {
		ID, State  string
		ArchivedAt time.Time `json:"archived_at"`
	}
	d.json(&rows, "jobs", "--since", before)
	if len(rows) != 1 || rows[0].ID != "old-1" || rows[0].ArchivedAt.IsZero() {
		t.Errorf("gpuq jobs --since %s = %+v, want old-1 from the history", before, rows)
	}
	d.json(&rows, "jobs", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if len(rows) != 0 {
		t.Errorf("gpuq jobs --since an hour ahead = %+v, want none", rows)
	}
	if out := d.ok("jobs", "--since", before); !strings.Contains(out, "ARCHIVED") || !strings.Contains(out, "old-1") {
		t.Errorf("gpuq jobs --since table:\n%s", out)
	}
	if r := d.gpuq("job", "never-was"); r.code == 0 || !strings.Contains(r.stderr, "no job never-was") {
		t.Errorf("gpuq job of an unknown id: exit %d, %s", r.code, r.stderr)
	}
}
