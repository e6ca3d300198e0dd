package gpuq_test

// Resubmitting a job id: the fold, not the transport's duplicate window,
// decides what a submission under a used id means. The same terms are the
// existing job; other terms are a duplicate_conflict and change nothing;
// after a rejection the same terms are evaluated afresh. Each case runs
// inside the stream's 2-minute duplicate window, where the transport would
// otherwise answer with the first submission's outcome. A command refused
// before the fold (a body naming another account, a cost out of range)
// names its job id in the rejection.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

func TestResubmissionIsJudgedByTheFold(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	orig := ledger.Submit{Account: "a", ID: "train", GPUs: 1, Cost: 40, Command: []string{"python", "train.py"}}
	first, err := c.c.Submit(c.ctx(), orig)
	if err != nil || first.Type != ledger.EventAccepted {
		t.Fatalf("first submission = %+v, %v", first, err)
	}

	otherCommand := orig
	otherCommand.Command = []string{"python", "eval.py"}
	wider := orig
	wider.GPUs = 2
	for _, s := range []ledger.Submit{otherCommand, wider} {
		ev, err := c.c.Submit(c.ctx(), s)
		var rej *client.RejectedError
		if !errors.As(err, &rej) || rej.Reason != ledger.ReasonDuplicateConflict || ev.Type != ledger.EventRejected {
			t.Errorf("submission of %v on %d GPUs under a used id = %+v, %v; want duplicate_conflict", s.Command, s.GPUs, ev, err)
		}
	}
	again, err := c.c.Submit(c.ctx(), orig)
	if err != nil || again.Type != ledger.EventIgnored || again.Reason != ledger.ReasonDuplicate || again.State != ledger.StatePending {
		t.Errorf("the same terms again = %+v, %v; want the existing pending job", again, err)
	}
	j, err := c.c.Job(c.ctx(), "train")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.Command, orig.Command) || j.GPUs != 1 || j.SubmitSeq != first.Seq {
		t.Errorf("job after resubmissions = %+v, want the first submission's terms", j)
	}
	acct, err := c.c.Account(c.ctx(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Reserved != 40 {
		t.Errorf("reserved %d after four submissions of one job, want 40", acct.Reserved)
	}
	c.audit()
}

func TestRejectedSubmissionIsEvaluatedAfreshAfterATopUp(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 10)
	s := ledger.Submit{Account: "a", ID: "big", GPUs: 1, Cost: 50, Command: []string{"x"}}
	_, err := c.c.Submit(c.ctx(), s)
	var rej *client.RejectedError
	if !errors.As(err, &rej) || rej.Reason != ledger.ReasonInsufficientCredits {
		t.Fatalf("submission over the balance: %v, want insufficient_credits", err)
	}
	ev, err := c.c.Admin(c.ctx(), ledger.Admin{Account: "a", ID: "top-up", Op: ledger.OpGrant, Amount: 100})
	if err != nil || ev.Type != ledger.EventGranted {
		t.Fatalf("grant: %+v, %v", ev, err)
	}
	acc, err := c.c.Submit(c.ctx(), s)
	if err != nil || acc.Type != ledger.EventAccepted {
		t.Fatalf("the same submission after a top-up = %+v, %v; want it accepted", acc, err)
	}
	acct, err := c.c.Account(c.ctx(), "a")
	if err != nil {
		t.Fatal(err)
	}
	if acct.Reserved != 50 || acct.Balance != 110 {
		t.Errorf("account after the accepted resubmission: balance %d reserved %d, want 110 and 50", acct.Balance, acct.Reserved)
	}
	c.audit()
}

func TestRefusedBodiesNameTheirJob(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	for _, tt := range []struct {
		job, body string
		reason    ledger.Reason
	}{
		{"stolen", `{"v":1,"id":"stolen","account":"b","gpus":1,"cost":1,"command":["x"]}`, ledger.ReasonAccountMismatch},
		{"huge", fmt.Sprintf(`{"v":1,"id":"huge","gpus":1,"cost":%d,"command":["x"]}`, int64(1)<<60), ledger.ReasonInvalid},
	} {
		ack := c.publishRaw(c.n.Submit("a"), "raw-"+tt.job, []byte(tt.body))
		ev := c.waitInvalid("a", ack.Sequence)
		if ev.Job != tt.job || ev.Reason != tt.reason {
			t.Errorf("rejection of %s = %+v, want job %s and reason %s", tt.job, ev, tt.job, tt.reason)
		}
	}
	c.audit()
}

// waitInvalid waits for the rejection of the command at seq on account's
// invalid-event subject.
func (c *cluster) waitInvalid(account string, seq uint64) wire.InvalidEvent {
	c.t.Helper()
	ctx := c.ctx()
	cons, err := c.js.OrderedConsumer(ctx, c.n.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{c.n.InvalidEvent(account)}})
	if err != nil {
		c.t.Fatal(err)
	}
	it, err := cons.Messages()
	if err != nil {
		c.t.Fatal(err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			c.t.Fatalf("no rejection of command %d on %s: %v", seq, c.n.InvalidEvent(account), err)
		}
		ev, err := wire.DecodeInvalidEvent(m.Data())
		if err != nil {
			c.t.Fatal(err)
		}
		if ev.Seq == seq {
			return ev
		}
	}
}
