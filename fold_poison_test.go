package gpuq_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// runNext submits a job and plays its worker to success, so the test sees
// the fold still dispatching and settling.
func (c *cluster) runNext(w *orderReader, account, id string, cost ledger.Credits) {
	c.t.Helper()
	ev := c.submit(account, id, 1, cost, 0)
	d := w.nextDispatch(id)
	w.start(d)
	w.finish(d, 0)
	if fin := c.waitFinal(account, id, ev.Seq); fin.Type != ledger.EventSucceeded || fin.Charged != cost {
		c.t.Fatalf("%s ended %+v, want succeeded charged %d", id, fin, cost)
	}
}

// TestAPoisonSubmissionIsRefusedAndTheFoldGoesOn replays the probe of
// issue 10: a 196,672-byte submission of '<', which JSON escaping would
// make a 1.18 MB job record. It is refused as too large, leaves no record
// and moves no credit, and the next job runs.
func TestAPoisonSubmissionIsRefusedAndTheFoldGoesOn(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	c.registerHost("h1", 1)
	w := c.worker("h1")
	prefix, suffix := `{"v":1,"id":"poison","gpus":1,"cost":10,"command":["sh","`, `"]}`
	body := prefix + strings.Repeat("<", 196_672-len(prefix)-len(suffix)) + suffix
	ack := c.publishRaw(c.n.Submit("a"), "poison-probe", []byte(body))
	ev := c.waitInvalid("a", ack.Sequence)
	if ev.Job != "poison" || ev.Reason != ledger.ReasonTooLarge || !strings.Contains(ev.Message, "131072") {
		t.Errorf("rejection = %s: %s; want too_large naming the limit", ev.Reason, ev.Message)
	}
	if _, err := c.ledger.Get(c.ctx(), subjects.JobKey("poison")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("job.poison: %v, want no record", err)
	}
	c.runNext(w, "a", "next", 10)
	c.waitSettled("next") // the answer is sent before the checkpoint passes it
	st := c.audit()
	if a := st.Accounts["a"]; a.Balance != 90 || a.Reserved != 0 {
		t.Errorf("account a: balance %d, reserved %d; want 90, 0 (only the next job charged)", a.Balance, a.Reserved)
	}
}

// TestARecordTheStoreRefusesIsAnsweredNotRetried lowers the ledger bucket's
// maximum message size below a valid job's record: the store refuses the
// write for good, so the scheduler records the submission as refused,
// answers it with a too_large rejection and folds on, where it would
// otherwise step down and fail the same write forever.
func TestARecordTheStoreRefusesIsAnsweredNotRetried(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	ctx := c.ctx()
	stream, err := c.js.Stream(ctx, "KV_"+c.n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgSize = 16 << 10
	if _, err := c.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	s := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	c.registerHost("h1", 1)
	w := c.worker("h1")
	big := ledger.Submit{Account: "a", ID: "big", GPUs: 1, Cost: 10, Command: []string{"sh", "-c", strings.Repeat("x", 40<<10)}}
	_, err = c.c.Submit(ctx, big)
	var rej *client.RejectedError
	if !errors.As(err, &rej) || rej.Reason != ledger.ReasonTooLarge || !strings.Contains(rej.Message, "job.big") {
		t.Fatalf("submit of a job whose record the bucket refuses: %v; want a too_large rejection naming job.big", err)
	}
	if _, err := c.ledger.Get(ctx, subjects.JobKey("big")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("job.big: %v, want no record", err)
	}
	c.runNext(w, "a", "next", 10)
	c.waitSettled("next") // the answer is sent before the checkpoint passes it
	st := c.audit()
	if a := st.Accounts["a"]; a.Balance != 90 || a.Reserved != 0 {
		t.Errorf("account a: balance %d, reserved %d; want 90, 0", a.Balance, a.Reserved)
	}
	if n := s.leading.Load(); n > 3 {
		t.Errorf("the scheduler led %d terms; one refused write should cost one", n)
	}
}

// TestAForeignValueAtALedgerKeyIsRepaired puts a server answer at the
// checkpoint and an account key, as a reply-subject injection did in issue
// 10, while no scheduler runs: the next leader reports each, restores the
// value gpuq wrote from the key's history, and folds on.
func TestAForeignValueAtALedgerKeyIsRepaired(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s1 := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 100)
	c.registerHost("h1", 1)
	w := c.worker("h1")
	c.runNext(w, "a", "first", 10)
	c.waitSettled("first")
	if err := s1.stop(t); err != nil {
		t.Fatal(err)
	}
	info := []byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"GPUQ_CMD"}}`)
	for _, key := range []string{subjects.CheckpointKey, subjects.AccountKey("a")} {
		if _, err := c.ledger.Put(c.ctx(), key, info); err != nil {
			t.Fatal(err)
		}
	}
	c.startScheduler("s2", schedOpts{})
	c.runNext(w, "a", "second", 10)
	c.waitSettled("second") // the answer is sent before the checkpoint passes it
	st := c.audit()
	if a := st.Accounts["a"]; a.Balance != 80 || a.Reserved != 0 {
		t.Errorf("account a: balance %d, reserved %d; want 80, 0", a.Balance, a.Reserved)
	}
}
