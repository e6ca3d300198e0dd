package gpuq_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// TestStolenMessageIDs: JetStream de-duplicates by message id across the
// whole command stream, so a publisher that knows the id of a command
// someone else will publish can store junk under it first, and the real
// command is then acknowledged as a duplicate and dropped. Here a submitter
// of account a takes, on its own subject, every id the kind's builder gives
// (the ids were once just these): the dispatch and the reports of b's job,
// b's cancel and b's admin op. Each real command still lands: b's job is
// dispatched at once, runs, and is charged its cost; b's cancel cancels;
// and the grant is applied.
func TestStolenMessageIDs(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s", schedOpts{})
	c.createAccount("a", 1000)
	c.createAccount("b", 1000)
	steal := func(id string) {
		for _, suffix := range []string{"", "." + "x"} {
			c.publishRaw(c.n.Submit("a"), id+suffix, []byte(`{"v":1}`))
		}
	}
	steal(wire.DispatchMsgID("victim", 1))
	steal(wire.ReportMsgID("h1", "victim", 1, ledger.ReportStarted))
	steal(wire.ReportMsgID("h1", "victim", 1, ledger.ReportDone))
	steal(wire.CancelMsgID("b", "long"))
	steal(wire.AdminMsgID("b", "topup"))
	c.startWorker("h1", workerOpts{gpus: 2})

	acc := c.submitCmd("b", "victim", 1, 100, time.Minute, "sh", "-c", "exit 0")
	if final := c.waitFinal("b", "victim", acc.Seq); final.Type != ledger.EventSucceeded || final.Charged != 100 || final.Balance != 900 {
		t.Errorf("b's job under stolen ids: %+v, want succeeded, charged 100, balance 900", final)
	}

	long := c.submitCmd("b", "long", 1, 10, time.Minute, "sleep", "300")
	c.waitEvent("b", "long", long.Seq, ledger.EventStarted)
	if ev, err := c.c.Cancel(c.ctx(), "b", "long"); err != nil || ev.Type != ledger.EventCancelRequested {
		t.Errorf("b's cancel under a stolen id: %+v, %v", ev, err)
	}
	if final := c.waitFinal("b", "long", long.Seq); final.Type != ledger.EventCancelled {
		t.Errorf("b's cancelled job: %+v", final)
	}

	if ev, err := c.c.Admin(c.ctx(), ledger.Admin{Account: "b", ID: "topup", Op: ledger.OpGrant, Amount: 5}); err != nil || ev.Type != ledger.EventGranted {
		t.Errorf("b's grant under a stolen id: %+v, %v", ev, err)
	}
	c.audit()
}
