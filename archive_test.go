// Archiving on a real server, with a retention of a second: a job that
// ended is archived by the scheduler; its KV key is gone, the view the next
// leader loads does not hold it, and its final record is in the history
// stream, where the client finds it; the audit stays clean, and the id is
// free for a new job. A scheduler stopped right after the flush that
// deleted the key (before its effects and checkpoint) is followed by one
// that puts the record back from the key's marker and archives it again.
package gpuq_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

const testRetention = time.Second

// runToSuccess submits job id for vision and runs it to success on h1.
func runToSuccess(c *cluster, w *orderReader, id string) uint64 {
	c.t.Helper()
	acc := c.submit("vision", id, 1, 10, 0)
	d := w.nextDispatch(id)
	// Reports carry a nonce, as a worker's do: the same id used again
	// must not have its reports taken for the first job's.
	for _, r := range []ledger.Report{
		{Type: ledger.ReportStarted, Host: d.Host, Job: id, Attempt: d.Attempt, Devices: []string{"GPU-h1-0"}},
		{Type: ledger.ReportDone, Host: d.Host, Job: id, Attempt: d.Attempt, Runtime: time.Second},
	} {
		msg, err := wire.EncodeReport(c.n, r)
		if err != nil {
			c.t.Fatal(err)
		}
		msg = wire.WithNonce(msg, fmt.Sprint(acc.Seq))
		c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
	}
	if ev := c.waitFinal("vision", id, acc.Seq); ev.Type != ledger.EventSucceeded {
		c.t.Fatalf("%s ended %s", id, ev.Type)
	}
	return acc.Seq
}

func TestFinishedJobsAreArchived(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s1 := c.startScheduler("s1", schedOpts{core: scheduler.CoreConfig{JobRetention: testRetention}})
	c.createAccount("vision", 100)
	c.registerHost("h1", 2)
	w := c.worker("h1")
	from := runToSuccess(c, w, "j1")

	arch := c.waitArchived("vision", "j1", from)
	c.waitCheckpointed(arch.Seq) // the event is sent before the checkpoint passes it
	if _, err := c.ledger.Get(c.ctx(), subjects.JobKey("j1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("the archived job's key: %v, want it gone", err)
	}
	h, err := c.c.History(c.ctx(), "vision", "j1")
	if err != nil {
		t.Fatalf("history of j1: %v", err)
	}
	if h.Job.State != ledger.StateSucceeded || h.Job.Charged != 10 || h.ArchivedAt.Before(h.Job.EndedAt().Add(testRetention)) {
		t.Errorf("history of j1: %+v archived %v", h.Job, h.ArchivedAt)
	}
	j, archived, err := c.c.Lookup(c.ctx(), "", "j1")
	if err != nil || archived == nil || j.ID != "j1" {
		t.Errorf("Lookup(j1) = %+v, %+v, %v; want the archived record", j, archived, err)
	}
	if _, err := c.c.History(c.ctx(), "nlp", "j1"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("history of j1 under another account: %v, want not found", err)
	}
	if st := c.audit(); st.Jobs["j1"] != nil || st.Accounts["vision"].Balance != 90 {
		t.Errorf("the stored ledger after the archive: j1 %+v, vision %+v", st.Jobs["j1"], st.Accounts["vision"])
	}

	// A new leader loads without it, and the id is free for a new job.
	if err := s1.stop(t); err != nil {
		t.Fatal(err)
	}
	s2 := c.startScheduler("s2", schedOpts{core: scheduler.CoreConfig{JobRetention: time.Hour}})
	s2.waitLeading(t, 10*time.Second)
	runToSuccess(c, w, "j1")
	c.waitSettled("j1") // the answer is sent before the checkpoint passes it
	st := c.audit()
	if j := st.Jobs["j1"]; j == nil || j.SubmitSeq <= h.Seq {
		t.Errorf("the id used again: %+v, want a new job submitted after the archive at %d", j, h.Seq)
	}
	if st.Accounts["vision"].Balance != 80 {
		t.Errorf("vision after two jobs: %+v", st.Accounts["vision"])
	}
}

func TestArchiveCutAfterTheDeleteIsRedone(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	var existed, cut atomic.Bool
	stop := errors.New("stopped after the delete")
	hooks := scheduler.Hooks{AfterPersist: func(uint64) error {
		_, err := c.ledger.Get(c.ctx(), subjects.JobKey("j1"))
		if err == nil {
			existed.Store(true)
		}
		if errors.Is(err, jetstream.ErrKeyNotFound) && existed.Load() && cut.CompareAndSwap(false, true) {
			return stop
		}
		return nil
	}}
	s1 := c.startScheduler("s1", schedOpts{hooks: hooks, core: scheduler.CoreConfig{JobRetention: testRetention}})
	c.createAccount("vision", 100)
	c.registerHost("h1", 2)
	w := c.worker("h1")
	from := runToSuccess(c, w, "j1")
	if err := s1.wait(t, 20*time.Second); !errors.Is(err, scheduler.ErrStopped) {
		t.Fatalf("s1: %v, want stopped by the hook", err)
	}
	// The key is gone but the checkpoint is below the archive: the view
	// as of the checkpoint still holds the job.
	if st := c.audit(); st.Jobs["j1"] == nil {
		t.Fatal("the view as of the checkpoint lost the job whose archive was cut short")
	}
	c.startScheduler("s2", schedOpts{core: scheduler.CoreConfig{JobRetention: testRetention}})
	c.waitArchived("vision", "j1", from)
	deadline := time.Now().Add(20 * time.Second)
	for c.audit().Jobs["j1"] != nil {
		if time.Now().After(deadline) {
			t.Fatal("j1 is still in the stored ledger 20s after its archive was redone")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h, err := c.c.History(c.ctx(), "vision", "j1"); err != nil || h.Job.State != ledger.StateSucceeded {
		t.Errorf("history of j1 after the redone archive: %+v, %v", h, err)
	}
	// One record: the second term sent the same message again, which the
	// stream's duplicate window dropped.
	if msgs := c.streamMsgs(c.n.HistoryStream(), c.n.History("vision", "j1")); msgs != 1 {
		t.Errorf("%d history records of j1, want 1", msgs)
	}
}

// waitArchived waits for the archived event of job, after the events from
// fromSeq on (a watch ends at the job's final event, before it).
// waitCheckpointed waits until the stored ledger's checkpoint reaches seq,
// so a view loaded from it shows what the command at seq did.
func (c *cluster) waitCheckpointed(seq uint64) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		view, err := natsstore.New(c.js, c.ledger).Load(c.ctx())
		if err != nil {
			c.t.Fatal(err)
		}
		if view.Checkpoint >= seq {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the checkpoint is at %d, not %d, after 20s", view.Checkpoint, seq)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) waitArchived(account, job string, fromSeq uint64) wire.JobEvent {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, m := range c.events(c.n.JobEvent(account, job)) {
			ev, err := wire.DecodeJobEvent(m.Data())
			if err != nil {
				c.t.Fatal(err)
			}
			if ev.Seq >= fromSeq && ev.Type == ledger.EventArchived {
				if ev.State != ledger.StateSucceeded {
					c.t.Errorf("archived event: %+v", ev)
				}
				return ev
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("no archived event of %s within 20s", job)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// streamMsgs counts the messages of stream on subject.
func (c *cluster) streamMsgs(stream, subject string) uint64 {
	c.t.Helper()
	s, err := c.js.Stream(c.ctx(), stream)
	if err != nil {
		c.t.Fatal(err)
	}
	info, err := s.Info(c.ctx(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		c.t.Fatal(err)
	}
	return info.State.Subjects[subject]
}
