package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Every rejection reason has its sentinel, which a *RejectedError of that
// reason matches and one of any other does not.
func TestRejectedErrorIsItsReason(t *testing.T) {
	reasons := []ledger.Reason{ledger.ReasonInvalid, ledger.ReasonUnknownAccount, ledger.ReasonInsufficientCredits,
		ledger.ReasonDuplicateConflict, ledger.ReasonAccountMismatch, ledger.ReasonAccountExists, ledger.ReasonOverflow,
		ledger.ReasonUnknownJob, ledger.ReasonUnplaceable, ledger.ReasonNoPrice, ledger.ReasonTooManyHeld,
		ledger.ReasonTooLarge, ledger.ReasonMeteredOnly, ledger.ReasonBelowPriceFloor}
	seen := map[error]ledger.Reason{}
	for _, r := range reasons {
		s := client.ReasonError(r)
		if s == nil {
			t.Fatalf("reason %s has no sentinel", r)
		}
		if other, dup := seen[s]; dup {
			t.Fatalf("reasons %s and %s share sentinel %v", r, other, s)
		}
		seen[s] = r
	}
	for _, r := range reasons {
		err := fmt.Errorf("submit: %w", &client.RejectedError{Seq: 7, Reason: r, Message: "no"})
		for s, sr := range seen {
			if got := errors.Is(err, s); got != (sr == r) {
				t.Errorf("errors.Is(rejected %s, %v) = %v", r, s, got)
			}
		}
	}
	if client.ReasonError(ledger.ReasonDuplicate) != nil || errors.Is(&client.RejectedError{Reason: "made_up"}, client.ErrInvalid) {
		t.Error("a reason that is not a rejection's matched a sentinel")
	}
}

// fixture is one installation the read tests share, with account vision
// and jobs that have run.
type fixture struct {
	in  *installation
	c   *client.Client
	ctx context.Context
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	in, err := startGpuq()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := in.stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	c, err := client.New(in.nc, client.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{in: in, c: c, ctx: ctx}
	for _, a := range []string{"vision", "nlp"} {
		if _, err := c.Admin(ctx, ledger.Admin{Account: a, ID: "create-" + a, Op: ledger.OpCreate, Balance: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// run submits a job and waits for it to end.
func (f *fixture) run(t *testing.T, account, id string, cost ledger.Credits, cmd ...string) wire.JobEvent {
	t.Helper()
	ev, err := f.c.Submit(f.ctx, ledger.Submit{Account: account, ID: id, GPUs: 1, Cost: cost, Walltime: time.Minute, Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	final, err := f.c.Wait(f.ctx, account, id, ev.Seq)
	if err != nil {
		t.Fatal(err)
	}
	return final
}

func TestReads(t *testing.T) {
	f := newFixture(t)
	for i := range 5 {
		f.run(t, "vision", fmt.Sprintf("v-%d", i), 10, "true")
	}
	f.run(t, "vision", "v-fail", 5, "false")
	f.run(t, "nlp", "n-0", 20, "sh", "-c", "echo out; echo err >&2")

	t.Run("jobs pages newest first", func(t *testing.T) {
		var got []string
		var after string
		for pages := 0; ; pages++ {
			page, err := f.c.Jobs(f.ctx, client.JobFilter{Account: "vision", Limit: 2, After: after})
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Jobs) > 2 || pages > 4 {
				t.Fatalf("page %d: %d jobs, next %q", pages, len(page.Jobs), page.Next)
			}
			for _, j := range page.Jobs {
				got = append(got, j.ID)
			}
			if page.Next == "" {
				break
			}
			after = page.Next
		}
		want := []string{"v-fail", "v-4", "v-3", "v-2", "v-1", "v-0"}
		if !slices.Equal(got, want) {
			t.Errorf("vision's jobs over pages of 2: %v, want %v", got, want)
		}
	})
	t.Run("jobs filters", func(t *testing.T) {
		page, err := f.c.Jobs(f.ctx, client.JobFilter{State: ledger.StateFailed})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 1 || page.Jobs[0].ID != "v-fail" || page.Next != "" {
			t.Errorf("failed jobs: %+v", page)
		}
		page, err = f.c.Jobs(f.ctx, client.JobFilter{Since: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 0 {
			t.Errorf("jobs ended from an hour ahead: %d", len(page.Jobs))
		}
		page, err = f.c.Jobs(f.ctx, client.JobFilter{Account: "nlp", Since: time.Now().Add(-time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 1 || page.Jobs[0].ID != "n-0" || page.Jobs[0].Archived != nil {
			t.Errorf("nlp's jobs ended in the last hour: %+v", page.Jobs)
		}
		if _, err := f.c.Jobs(f.ctx, client.JobFilter{After: "not a cursor"}); !errors.Is(err, client.ErrBadCursor) {
			t.Errorf("a made-up cursor: %v, want ErrBadCursor", err)
		}
	})
	t.Run("accounts", func(t *testing.T) {
		list, err := f.c.Accounts(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Accounts) != 2 || list.Accounts[0].ID != "nlp" || list.Accounts[1].ID != "vision" || len(list.Foreign) != 0 {
			t.Fatalf("accounts: %+v", list)
		}
		if v := list.Accounts[1]; v.Balance != 1000-50 || v.Reserved != 0 {
			t.Errorf("vision: balance %d, reserved %d; want 950, 0", v.Balance, v.Reserved)
		}
	})
	t.Run("hosts", func(t *testing.T) {
		list, err := f.c.Hosts(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Hosts) != 1 {
			t.Fatalf("hosts: %+v", list)
		}
		h := list.Hosts[0]
		if h.Host != "sim-1" || !h.Simulated || h.Kind() != "simulated" || h.GPUs != 8 || h.Free+h.Claimed+h.Busy+h.Unhealthy != 8 || h.Model == "" {
			t.Errorf("host %+v", h)
		}
	})
	t.Run("logs", func(t *testing.T) {
		j, err := f.c.Job(f.ctx, "n-0")
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut strings.Builder
		end := ""
		for ch, err := range f.c.Logs(f.ctx, j, client.LogOptions{}) {
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case ch.End != "":
				end = ch.End
			case ch.Stream == wire.Stderr:
				errOut.Write(ch.Data)
			default:
				out.Write(ch.Data)
			}
		}
		if out.String() != "out\n" || errOut.String() != "err\n" || end == "" {
			t.Errorf("logs: stdout %q, stderr %q, end %q", out.String(), errOut.String(), end)
		}
		// Following an attempt that ended ends at its end marker.
		n := 0
		for _, err := range f.c.Logs(f.ctx, j, client.LogOptions{Follow: true, Attempt: 1}) {
			if err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n < 2 {
			t.Errorf("follow read %d chunks, want the output and the end marker", n)
		}
		for _, err := range f.c.Logs(f.ctx, j, client.LogOptions{Attempt: 2}) {
			if !errors.Is(err, client.ErrNoAttempt) {
				t.Errorf("attempt 2 of a job that ran once: %v, want ErrNoAttempt", err)
			}
		}
	})
	t.Run("usage", func(t *testing.T) {
		rep, err := f.c.Usage(f.ctx, client.UsageQuery{By: "job", Account: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		if tot := rep.Total; tot.Jobs.Total != 6 || tot.Jobs.Failed != 1 || tot.Charged != 50 || tot.Grants != 1000 || tot.Released != 5 {
			t.Errorf("vision's usage: %+v", tot)
		}
		if rep.JournalRead == 0 {
			t.Error("usage without --since read no journal message")
		}
		// From an hour ahead: the journal is read from that time on, and
		// holds nothing.
		rep, err = f.c.Usage(f.ctx, client.UsageQuery{By: "day", Since: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 0 || rep.Total.Grants != 0 || rep.JournalRead != 0 {
			t.Errorf("usage from an hour ahead: %+v, %d journal messages read (want none: the read starts at the time)", rep, rep.JournalRead)
		}
		if _, err := f.c.Usage(f.ctx, client.UsageQuery{By: "year"}); err == nil {
			t.Error("usage by year: no error")
		}
	})
	t.Run("audit", func(t *testing.T) {
		for _, full := range []bool{false, true} {
			rep, err := f.c.Audit(f.ctx, client.AuditOptions{Full: full})
			if err != nil {
				t.Fatal(err)
			}
			if !rep.OK || rep.Accounts != 2 || rep.Entries == 0 || rep.Read == 0 {
				t.Errorf("audit full=%v: %+v", full, rep)
			}
		}
	})
	t.Run("foreign values", func(t *testing.T) {
		kv, err := f.in.js.KeyValue(f.ctx, f.c.Names().LedgerBucket())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(f.ctx, "job.intruder", []byte(`{"not":"a job"}`)); err != nil {
			t.Fatal(err)
		}
		page, err := f.c.Jobs(f.ctx, client.JobFilter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Jobs) != 7 || len(page.Foreign) != 1 || page.Foreign[0].Key != "job.intruder" || !errors.Is(page.Foreign[0], client.ErrForeignValue) {
			t.Errorf("jobs with a foreign value: %d jobs, foreign %v", len(page.Jobs), page.Foreign)
		}
		// The snapshot is the whole ledger as of one command: it refuses
		// to be one with a value it cannot read.
		if _, err := f.c.Snapshot(f.ctx); !errors.Is(err, client.ErrForeignValue) {
			t.Errorf("snapshot with a foreign value: %v, want ErrForeignValue", err)
		}
		if err := kv.Purge(f.ctx, "job.intruder"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("snapshot is as of the checkpoint", func(t *testing.T) {
		// A record stored past the checkpoint, as a flush in progress
		// leaves it: a current-value read shows it, the snapshot the
		// version the checkpoint covers, and the audit agrees with that.
		kv, err := f.in.js.KeyValue(f.ctx, f.c.Names().LedgerBucket())
		if err != nil {
			t.Fatal(err)
		}
		before, err := f.c.Snapshot(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := before.State.Accounts["nlp"].Clone()
		a.Balance, a.Seq = 12345, before.Checkpoint+1000
		data, err := ledger.MarshalAccount(a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(f.ctx, "account.nlp", data); err != nil {
			t.Fatal(err)
		}
		now, err := f.c.Account(f.ctx, "nlp")
		if err != nil {
			t.Fatal(err)
		}
		snap, err := f.c.Snapshot(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.Balance != 12345 || snap.State.Accounts["nlp"].Balance != 980 || snap.Checkpoint < before.Checkpoint {
			t.Errorf("account nlp now %d, in the snapshot %d (checkpoint %d); want 12345 and 980", now.Balance, snap.State.Accounts["nlp"].Balance, snap.Checkpoint)
		}
		rep, err := f.c.Audit(f.ctx, client.AuditOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK {
			t.Errorf("audit with a record past the checkpoint: %+v", rep)
		}
	})
	t.Run("an archive past the checkpoint is undone in the snapshot", func(t *testing.T) {
		// An archive that a crash cut short after the delete, as each
		// marker version leaves it: v-0's marker names its account (the
		// record is in the history), v-1's holds the record.
		before, err := f.c.Snapshot(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := f.c.Names()
		at := before.Checkpoint + 500
		for _, c := range []struct {
			id     string
			marker func(j *ledger.Job) any
		}{
			{"v-0", func(*ledger.Job) any { return map[string]any{"v": 2, "archived": at, "account": "vision"} }},
			{"v-1", func(j *ledger.Job) any { return map[string]any{"v": 1, "archived": at, "record": j} }},
		} {
			j := before.State.Jobs[c.id]
			hist, err := json.Marshal(wire.History{V: 1, Seq: at, ArchivedAt: time.Now(), Job: j})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.in.js.Publish(f.ctx, n.History("vision", c.id), hist); err != nil {
				t.Fatal(err)
			}
			m := nats.NewMsg(subjects.KVSubject(n.LedgerBucket(), subjects.JobKey(c.id)))
			if m.Data, err = json.Marshal(c.marker(j)); err != nil {
				t.Fatal(err)
			}
			m.Header.Set("KV-Operation", "PURGE")
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			if _, err := f.in.js.PublishMsg(f.ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		page, err := f.c.Jobs(f.ctx, client.JobFilter{Account: "vision"})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.ID == "v-0" || j.ID == "v-1" {
				t.Errorf("the current read lists %s, which is archived", j.ID)
			}
		}
		snap, err := f.c.Snapshot(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"v-0", "v-1"} {
			if j := snap.State.Jobs[id]; j == nil || j.State != ledger.StateSucceeded || j.Seq != before.State.Jobs[id].Seq {
				t.Errorf("snapshot's %s: %+v, want the record as of the checkpoint", id, j)
			}
		}
		if rep, err := f.c.Audit(f.ctx, client.AuditOptions{}); err != nil || !rep.OK {
			t.Errorf("audit: %+v, %v", rep, err)
		}
	})
}

// TestLogsOfAJobThatWroteNothing: the worker stores no end marker for an
// attempt that wrote nothing and exited on its own; Logs ends its output
// with one made from the job's record, read or followed, and a follower
// of such an attempt while it runs ends once the record says it ended.
func TestLogsOfAJobThatWroteNothing(t *testing.T) {
	f := newFixture(t)
	f.run(t, "vision", "quiet", 10, "true")
	f.run(t, "vision", "quiet-fail", 10, "false")
	st, err := f.in.js.Stream(f.ctx, subjects.Default.LogsStream())
	if err != nil {
		t.Fatal(err)
	}
	for id, code := range map[string]int{"quiet": 0, "quiet-fail": 1} {
		if m, err := st.GetLastMsgForSubject(f.ctx, subjects.Default.Log("vision", id, "sim-1")); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("%s wrote nothing, yet its output subject holds %+v (%v)", id, m, err)
		}
		j, err := f.c.Job(f.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		for _, follow := range []bool{false, true} {
			got := readLogs(t, f, j, follow)
			if len(got) != 1 || !endOf(got[0], code) || got[0].Seq != 1 || got[0].Attempt != 1 || got[0].Host != "sim-1" {
				t.Errorf("%s, follow %v: %+v; want one end marker saying it exited %d", id, follow, got, code)
			}
		}
	}

	// A follower that starts while the attempt runs.
	ev, err := f.c.Submit(f.ctx, ledger.Submit{Account: "vision", ID: "sleeper", GPUs: 1, Cost: 10, Walltime: time.Minute,
		Command: []string{"sleep", "1"}})
	if err != nil {
		t.Fatal(err)
	}
	var j *ledger.Job
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if j, err = f.c.Job(f.ctx, "sleeper"); err != nil {
			t.Fatal(err)
		}
		if j.State == ledger.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sleeper is %s after 20s, want running", j.State)
		}
	}
	got := readLogs(t, f, j, true)
	if _, err := f.c.Wait(f.ctx, "vision", "sleeper", ev.Seq); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !endOf(got[0], 0) {
		t.Fatalf("following sleeper while it ran: %+v; want one end marker saying it exited 0", got)
	}
	// The worker times a run from its start's return, which the sleep
	// may begin a little before.
	if d, err := time.ParseDuration(strings.TrimPrefix(got[0].End, "exit 0 after ")); err != nil || d < 900*time.Millisecond || d > 20*time.Second {
		t.Errorf("following sleeper while it ran: end %q; want about 1s (%v)", got[0].End, err)
	}
	// Reading it without following while it runs ends with nothing.
	if got := readLogs(t, f, j, false); len(got) != 0 {
		t.Errorf("sleeper's output read from its record as running: %+v, want none", got)
	}
}

// TestFollowEndsWhenTheRecordCannotBeRead: a follow of an attempt whose
// record cannot be read (here, a job the ledger never had) ends with the
// error once reads of it have failed logRecordTries times in a row,
// rather than follow for ever.
func TestFollowEndsWhenTheRecordCannotBeRead(t *testing.T) {
	f := newFixture(t)
	ghost := &ledger.Job{ID: "ghost", Account: "vision", GPUs: 1, Attempt: 1, State: ledger.StateRunning,
		JobOutcome: &ledger.JobOutcome{Host: "sim-1"}}
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	var last error
	for _, err := range f.c.Logs(ctx, ghost, client.LogOptions{Follow: true}) {
		last = err
	}
	if !errors.Is(last, client.ErrNotFound) {
		t.Errorf("following a job with no record ended with %v, want ErrNotFound (context: %v)", last, ctx.Err())
	}
}

// readLogs reads attempt 1 of j's output through Logs, within 30s.
func readLogs(t *testing.T, f *fixture, j *ledger.Job, follow bool) []wire.LogChunk {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	var got []wire.LogChunk
	for ch, err := range f.c.Logs(ctx, j, client.LogOptions{Attempt: 1, Follow: follow}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ch)
	}
	if ctx.Err() != nil {
		t.Fatalf("reading %s's output (follow %v) did not end within 30s: %d chunks", j.ID, follow, len(got))
	}
	return got
}

// endOf reports whether c is an end marker saying its attempt exited with
// code.
func endOf(c wire.LogChunk, code int) bool {
	prefix := fmt.Sprintf("exit %d after ", code)
	return strings.HasPrefix(c.End, prefix) && string(c.Data) == "gpuq: "+c.End+"\n" && c.Stream == ""
}
