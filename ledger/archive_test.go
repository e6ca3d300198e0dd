// Tests of the archive decision: a finished job leaves the state, with its
// final record handed over for the history store, only when the fold's own
// checks hold (final state, ended at least the retention before the
// command's time, the record the decider saw); every other case changes
// nothing and says why. ledgertest.Log checks every invariant and the
// journal after each command.
package ledger_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
)

const week = 7 * 24 * time.Hour

// finished runs job id of account a to success and returns its record.
func finished(t *testing.T, l *ledgertest.Log, id string) *ledger.Job {
	t.Helper()
	wantEvent(t, l.Submit("a", id, 10, 0), ledger.EventAccepted, "")
	l.Start(id, "h1")
	wantEvent(t, l.Done(id, 0), ledger.EventSucceeded, "")
	return l.Job(id).Clone()
}

func TestArchiveMovesAFinishedJobOut(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	final := finished(t, l, "j1")
	before := l.Account("a").Clone()
	l.Advance(week)
	res := l.Apply(ledger.Archive{Job: "j1", Seq: final.Seq, Retention: week})
	wantEvent(t, res, ledger.EventArchived, "")
	if _, ok := l.State.Jobs["j1"]; ok {
		t.Fatal("j1 is still in the state after its archive")
	}
	if want := []ledger.Key{{Kind: ledger.KeyJob, ID: "j1"}}; !reflect.DeepEqual(res.Changed, want) {
		t.Errorf("Changed = %v, want %v (the job key, to remove)", res.Changed, want)
	}
	got, ok := ledgertest.First[ledger.ArchivedJob](res)
	if !ok {
		t.Fatalf("no ArchivedJob effect in %+v", res.Effects)
	}
	if !reflect.DeepEqual(got.Job, final) {
		t.Errorf("archived record = %+v, want the final record %+v", got.Job, final)
	}
	if a := l.Account("a"); !reflect.DeepEqual(a, before) {
		t.Errorf("account changed by the archive: %+v, was %+v", a, before)
	}
	// The same decision again (a second term, a re-sent copy): nothing.
	res = l.Apply(ledger.Archive{Job: "j1", Seq: final.Seq, Retention: week})
	if ev, ok := ledgertest.First[ledger.InvalidEvent](res); !ok || ev.Reason != ledger.ReasonUnknownJob || len(res.Changed) != 0 {
		t.Errorf("second archive: %+v changed %v, want an unknown_job rejection changing nothing", res.Effects, res.Changed)
	}
	// The id is free again: a new submission under it is a new job.
	wantEvent(t, l.Submit("a", "j1", 10, 0), ledger.EventAccepted, "")
}

func TestArchiveRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cmd  func(l *ledgertest.Log, j *ledger.Job) ledger.Archive
		at   time.Duration // after the job ended
	}{
		{"too early", func(_ *ledgertest.Log, j *ledger.Job) ledger.Archive {
			return ledger.Archive{Job: j.ID, Seq: j.Seq, Retention: week}
		}, week - time.Second},
		{"another record", func(_ *ledgertest.Log, j *ledger.Job) ledger.Archive {
			return ledger.Archive{Job: j.ID, Seq: j.Seq - 1, Retention: week}
		}, week},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := ledgertest.NewLog(t)
			l.Create("a", 100)
			j := finished(t, l, "j1")
			l.Advance(tc.at)
			res := l.Apply(tc.cmd(l, j))
			wantEvent(t, res, ledger.EventIgnored, ledger.ReasonNotArchivable)
			if len(res.Changed) != 0 || l.Job("j1").Seq != j.Seq {
				t.Errorf("a refused archive changed %v", res.Changed)
			}
		})
	}
	t.Run("unfinished", func(t *testing.T) {
		t.Parallel()
		l := ledgertest.NewLog(t)
		l.Create("a", 100)
		l.Submit("a", "j1", 10, 0)
		l.Start("j1", "h1")
		l.Advance(4 * week)
		res := l.Apply(ledger.Archive{Job: "j1", Seq: l.Job("j1").Seq, Retention: week})
		wantEvent(t, res, ledger.EventIgnored, ledger.ReasonNotArchivable)
		if l.Job("j1").State != ledger.StateRunning || l.Account("a").Reserved != 10 {
			t.Errorf("a running job was touched by a refused archive")
		}
	})
	t.Run("malformed", func(t *testing.T) {
		t.Parallel()
		l := ledgertest.NewLog(t)
		for _, c := range []ledger.Archive{{Job: "j1", Seq: 0, Retention: week}, {Job: "j1", Seq: 3, Retention: 0}, {Job: "", Seq: 3, Retention: week}} {
			if ev, ok := ledgertest.First[ledger.InvalidEvent](l.Apply(c)); !ok || ev.Reason != ledger.ReasonInvalid {
				t.Errorf("archive %+v: %+v, want an invalid rejection", c, ev)
			}
		}
	})
}

// A rejected submission is a final record too, and is archived like one;
// a rejected id submitted again before the archive is applied makes the
// decision stale.
func TestArchiveRejectedAndResubmitted(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 5)
	wantEvent(t, l.Submit("a", "j1", 10, 0), ledger.EventRejected, ledger.ReasonInsufficientCredits)
	seen := l.Job("j1").Seq
	l.Advance(week)
	wantEvent(t, l.Submit("a", "j1", 10, 0), ledger.EventRejected, ledger.ReasonInsufficientCredits)
	wantEvent(t, l.Apply(ledger.Archive{Job: "j1", Seq: seen, Retention: week}), ledger.EventIgnored, ledger.ReasonNotArchivable)
	l.Advance(week)
	wantEvent(t, l.Apply(ledger.Archive{Job: "j1", Seq: l.Job("j1").Seq, Retention: week}), ledger.EventArchived, "")
}

// Replaying an archive from before it (a term that stopped after the key
// was removed, before the checkpoint moved) finds the job as the checkpoint
// had it and archives it the same way.
func TestArchiveReplayFromCheckpoint(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	j := finished(t, l, "j1")
	checkpoint := l.State.Clone()
	l.Advance(week)
	cmd := ledger.Archive{Job: "j1", Seq: j.Seq, Retention: week}
	first := l.Apply(cmd)
	again := checkpoint.Apply(cmd, l.Seq, l.Now)
	if !reflect.DeepEqual(first, again) {
		t.Errorf("replay from the checkpoint = %+v, first = %+v", again, first)
	}
	if !reflect.DeepEqual(checkpoint, l.State) {
		t.Error("the replayed state differs from the first")
	}
}
