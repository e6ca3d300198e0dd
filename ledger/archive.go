package ledger

import (
	"fmt"
	"time"
)

// Archive is the scheduler's decision to move a job that ended long ago out
// of the ledger: the fold removes it from [State.Jobs] and hands its final
// record to the history store ([ArchivedJob]). The ledger's memory, and the
// load at a takeover, then grow with the jobs in flight and within the
// retention, not with every job ever run.
//
// The fold re-checks what the decision assumed: the job is still the record
// the decider saw (its Seq), it is in a final state, and it ended at least
// Retention before the command's own time. A decision that no longer holds
// is a logged no-op; one for a job the ledger no longer has (archived by an
// earlier copy of the decision) changes nothing either.
//
// An archived job's id is free again: the fold no longer knows it, so a new
// submission under it is a new job. Ids are unique among the jobs in the
// ledger, which hold every job unfinished or ended within the retention.
type Archive struct {
	Job string
	// Seq is the job record's sequence ([Job.Seq]) when the decision was
	// made.
	Seq uint64
	// Retention is how long ago the job must have ended.
	Retention time.Duration
}

// ArchivedJob is the final record of a job the fold archived, for the
// history stream (gpuq.history.<account>.<job>). Job is the record as it
// was before the archive removed it; the command's sequence and time say
// when it was archived.
type ArchivedJob struct {
	Job *Job
}

// EventArchived is the type of the [JobEvent] that says a job left the
// ledger for the history store.
const EventArchived EventType = "archived"

// ReasonNotArchivable is why an archive decision changed nothing: the job
// is unfinished, ended too recently, or changed since the decision.
const ReasonNotArchivable Reason = "not_archivable"

// MaxRetention bounds an archive decision's retention.
const MaxRetention = 100 * 365 * 24 * time.Hour

func (Archive) Kind() string  { return "archive" }
func (Archive) isCommand()    {}
func (ArchivedJob) isEffect() {}

// Validate reports whether a names a job, a sequence ≥ 1 and a retention in
// (0, MaxRetention].
func (a Archive) Validate() error {
	errs := nonNil(checkID("job", a.Job))
	if a.Seq < 1 {
		errs = append(errs, fmt.Errorf("seq %d is not ≥ 1", a.Seq))
	}
	if a.Retention <= 0 || a.Retention > MaxRetention {
		errs = append(errs, fmt.Errorf("retention %v is out of range (0, %v]", a.Retention, MaxRetention))
	}
	return joinProblems(errs)
}

// Archivable reports whether j may be archived at time at with the given
// retention: it is in a final state and ended at least retention before at.
// The fold and the scheduler's decider both ask it.
func Archivable(j *Job, retention time.Duration, at time.Time) bool {
	return j.State.Terminal() && !j.EndedAt().IsZero() && !at.Before(j.EndedAt().Add(retention))
}

// archive applies the scheduler's decision to archive a job.
func (t *tx) archive(c Archive) {
	if err := c.Validate(); err != nil {
		t.emit(InvalidEvent{Job: c.Job, Reason: ReasonFor(err), Message: "archive decision rejected: " + err.Error()})
		return
	}
	j := t.s.Jobs[c.Job]
	if j == nil {
		t.emit(InvalidEvent{Job: c.Job, Reason: ReasonUnknownJob,
			Message: fmt.Sprintf("archive decision for job %s, which the ledger does not hold (archived already, or never submitted)", c.Job)})
		return
	}
	ignore := func(format string, args ...any) {
		t.jobEvent(j.Account, j, JobEvent{Type: EventIgnored, Reason: ReasonNotArchivable,
			Message: "archive decision ignored: " + fmt.Sprintf(format, args...)})
	}
	switch {
	case j.Seq != c.Seq:
		ignore("the job changed since the decision (its record is at %d, the decision saw %d)", j.Seq, c.Seq)
	case !j.State.Terminal():
		ignore("the job is %s", j.State)
	case !Archivable(j, c.Retention, t.at):
		ignore("the job ended %s, less than the retention of %v before this command (%s)",
			j.EndedAt().Format(time.RFC3339), c.Retention, t.at.Format(time.RFC3339))
	default:
		// The record leaves the state as it was: its Seq stays that of the
		// last command that changed it, so the history holds the job's
		// final record.
		delete(t.s.Jobs, j.ID)
		t.res.Changed = append(t.res.Changed, Key{KeyJob, j.ID})
		t.jobEvent(j.Account, j, JobEvent{Type: EventArchived,
			Message: fmt.Sprintf("job %s (%s, ended %s) moved to the history store", j.ID, j.State, j.EndedAt().Format(time.RFC3339))})
		t.emit(ArchivedJob{Job: j})
	}
}
