package gpuq_test

// The rest of the security suite, on a deployment of its own started from
// deploy/: commands built to hurt the fold (an oversized submission, bodies
// with duplicate keys or invalid UTF-8, a fixed cost of 0 under a price
// floor, big refused submissions), message ids taken ahead of the commands
// that need them, and jobs as the attacker (reading the worker's
// credentials and state, escaping with setsid, planting files for the next
// job). Each probe checks that the victim's ledger did not move, the
// scheduler still folds, and the audit is clean.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// answer is what every event says of the command it answers.
type answer struct {
	Seq     uint64 `json:"seq"`
	Type    string `json:"type"`
	Job     string `json:"job"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Charged int64  `json:"charged"`
}

// publish publishes body on subject as role, under a message id of its
// own, and returns the command's sequence.
func (d *deployment) publish(role, subject, msgID string, body []byte) uint64 {
	d.t.Helper()
	m := nats.NewMsg(subject)
	m.Data = body
	m.Header.Set(subjects.MsgIDHeader, msgID)
	ack, err := d.js(role).PublishMsg(d.ctx, m)
	if err != nil {
		d.t.Fatalf("%s publishes on %s: %v", role, subject, err)
	}
	return ack.Sequence
}

// answerTo reads, as role, account's events until the one that answers the
// command at seq.
func (d *deployment) answerTo(role, account string, seq uint64) answer {
	d.t.Helper()
	cons, err := d.js(role).OrderedConsumer(d.ctx, d.n.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{d.n.AccountEvents(account)}, NamePrefix: client.ConsumerName()})
	if err != nil {
		d.t.Fatalf("%s reads %s's events: %v", role, account, err)
	}
	for {
		m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			d.t.Fatalf("no answer to command %d on %s's events: %v", seq, account, err)
		}
		var a answer
		if err := json.Unmarshal(m.Data(), &a); err != nil {
			d.t.Fatal(err)
		}
		if a.Seq == seq {
			return a
		}
	}
}

// noRecord checks that the ledger has no record of job.
func (d *deployment) noRecord(job string) {
	d.t.Helper()
	if e, err := d.ledger.Get(d.ctx, subjects.JobKey(job)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		d.t.Errorf("job.%s: %v, want no record", job, err)
		if err == nil {
			d.t.Logf("record: %.200s", e.Value())
		}
	}
}

// run submits a one-GPU job of account through c and waits for its end.
func (d *deployment) run(c *client.Client, account, id string, cost ledger.Credits, command ...string) wire.JobEvent {
	d.t.Helper()
	ev, err := c.Submit(d.ctx, ledger.Submit{Account: account, ID: id, GPUs: 1, Cost: cost, Command: command})
	if err != nil {
		d.t.Fatalf("submit %s: %+v, %v", id, ev, err)
	}
	final, err := c.Wait(d.ctx, account, id, ev.Seq)
	if err != nil {
		d.t.Fatalf("job %s: %v", id, err)
	}
	return final
}

func TestSecurityCommandsAndJobs(t *testing.T) {
	// The worker runs in this process: its environment holds credentials
	// (as a worker started with NATS_URL and NATS_NKEY does), which no job
	// may see.
	const canary = "canary-7f3a9c"
	t.Setenv("NATS_URL", "nats://gpu-host-1:"+canary+"@127.0.0.1:4222")
	d := newDeployment(t)
	t.Setenv("NATS_NKEY", d.seeds[roleHost1])
	vision, nlp := d.client(roleVision), d.client(roleNLP)

	t.Run("OversizedSubmission", func(t *testing.T) {
		// 196,672 bytes of '<', which JSON escaping would make a 1.18 MB
		// job record: it used to stop the fold for good.
		before := d.account(roleVision)
		prefix, suffix := `{"v":1,"id":"poison","gpus":1,"cost":10,"command":["sh","`, `"]}`
		body := prefix + strings.Repeat("<", 196_672-len(prefix)-len(suffix)) + suffix
		seq := d.publish(roleVision, d.n.Submit(roleVision), "poison."+rand.Text(), []byte(body))
		if a := d.answerTo(roleVision, roleVision, seq); a.Reason != string(ledger.ReasonTooLarge) || a.Job != "poison" {
			t.Errorf("the oversized submission was answered %+v, want too_large", a)
		}
		d.noRecord("poison")
		d.healthy(roleVision, before)
	})

	t.Run("StrictBodies", func(t *testing.T) {
		before := d.account(roleVision)
		for id, body := range map[string]string{
			"dupkeys": `{"v":1,"id":"dupkeys","gpus":1,"cost":10,"cost":0,"command":["true"]}`,
			"badutf8": "{\"v\":1,\"id\":\"badutf8\",\"gpus\":1,\"cost\":10,\"command\":[\"echo\",\"\xff\xfe\"]}",
		} {
			seq := d.publish(roleVision, d.n.Submit(roleVision), id+"."+rand.Text(), []byte(body))
			if a := d.answerTo(roleVision, roleVision, seq); a.Type != string(ledger.EventRejected) || a.Reason != string(ledger.ReasonInvalid) {
				t.Errorf("%s was answered %+v, want rejected, invalid", id, a)
			}
			d.noRecord(id)
		}
		d.healthy(roleVision, before)
	})

	t.Run("FixedCostUnderAPriceFloor", func(t *testing.T) {
		before := d.account(roleVision)
		floor := ledger.SetPricing{ID: "floor-1", PerGPUHour: map[string]ledger.Credits{"NVIDIA H100 80GB HBM3": 360},
			Default: 100, FailurePercent: 50, FixedCost: ledger.FixedCostFloor}
		if ev, err := d.admin.SetPricing(d.ctx, floor); err != nil || ev.Type != ledger.EventPricingSet {
			t.Fatalf("admin sets a price floor: %+v, %v", ev, err)
		}
		_, err := vision.Submit(d.ctx, ledger.Submit{Account: roleVision, ID: "free-ride", GPUs: 8, Cost: 0,
			Walltime: 720 * time.Hour, Command: []string{"sleep", "inf"}})
		var rej *client.RejectedError
		if !errors.As(err, &rej) || rej.Reason != ledger.ReasonBelowPriceFloor {
			t.Errorf("cost 0 for 8 GPUs × 720 h: %v, want below_price_floor", err)
		}
		anyCost := ledger.SetPricing{ID: "floor-2", PerGPUHour: floor.PerGPUHour, Default: 100, FailurePercent: 50}
		if _, err := d.admin.SetPricing(d.ctx, anyCost); err != nil {
			t.Fatal(err)
		}
		d.healthy(roleVision, before)
	})

	t.Run("RefusedSubmissionsKeepLittle", func(t *testing.T) {
		before := d.account(roleVision)
		for i := range 3 {
			id := fmt.Sprintf("too-dear-%d", i)
			_, err := vision.Submit(d.ctx, ledger.Submit{Account: roleVision, ID: id, GPUs: 1, Cost: 1_000_000,
				Command: []string{"sh", "-c", strings.Repeat("x", 120_000)}})
			var rej *client.RejectedError
			if !errors.As(err, &rej) || rej.Reason != ledger.ReasonInsufficientCredits {
				t.Fatalf("submission %s: %v, want insufficient_credits", id, err)
			}
			e, err := d.ledger.Get(d.ctx, subjects.JobKey(id))
			if err != nil {
				t.Fatalf("the refusal's record: %v", err)
			}
			if len(e.Value()) > 2048 || bytes.Contains(e.Value(), []byte("xxxx")) {
				t.Errorf("a refused 120 kB submission keeps a %d-byte record", len(e.Value()))
			}
		}
		d.healthy(roleVision, before)
	})

	t.Run("StolenMessageIDs", func(t *testing.T) {
		// vision stores junk, on its own subject, under the ids the kinds'
		// builders give nlp's next commands (the ids were once just these).
		for _, id := range []string{
			wire.DispatchMsgID("nlp-victim", 1),
			wire.ReportMsgID(roleHost1, "nlp-victim", 1, ledger.ReportStarted),
			wire.ReportMsgID(roleHost1, "nlp-victim", 1, ledger.ReportDone),
			wire.CancelMsgID(roleNLP, "nlp-long"),
			wire.AdminMsgID(roleNLP, "nlp-topup"),
		} {
			d.publish(roleVision, d.n.Submit(roleVision), id, []byte(`{"v":1}`))
		}
		before := d.account(roleNLP)
		if final := d.run(nlp, roleNLP, "nlp-victim", 100, "true"); final.Type != ledger.EventSucceeded || final.Charged != 100 || final.Balance != before.Balance-100 {
			t.Errorf("nlp's job under stolen ids: %+v, want succeeded and charged 100", final)
		}
		ev, err := nlp.Submit(d.ctx, ledger.Submit{Account: roleNLP, ID: "nlp-long", GPUs: 1, Cost: 10, Command: []string{"sleep", "300"}})
		if err != nil {
			t.Fatal(err)
		}
		waitStarted(t, d, nlp, roleNLP, "nlp-long", ev.Seq)
		if c, err := nlp.Cancel(d.ctx, roleNLP, "nlp-long"); err != nil || c.Type != ledger.EventCancelRequested {
			t.Errorf("nlp's cancel under a stolen id: %+v, %v", c, err)
		}
		if final, err := nlp.Wait(d.ctx, roleNLP, "nlp-long", ev.Seq); err != nil || final.Type != ledger.EventCancelled {
			t.Errorf("nlp's cancelled job: %+v, %v", final, err)
		}
		if g, err := d.admin.Admin(d.ctx, ledger.Admin{Account: roleNLP, ID: "nlp-topup", Op: ledger.OpGrant, Amount: 5}); err != nil || g.Type != ledger.EventGranted {
			t.Errorf("the admin's grant under a stolen id: %+v, %v", g, err)
		}
		if diffs := d.audit(); len(diffs) > 0 {
			t.Errorf("audit: %v", diffs)
		}
	})

	t.Run("JobReadsTheWorkersCredentials", func(t *testing.T) {
		before := d.account(roleNLP)
		script := fmt.Sprintf(`env; cat /proc/$PPID/environ >/dev/null 2>&1 && echo ENVIRON-READ
cat %[1]s >/dev/null 2>&1 && echo SEED-READ
ls %[2]s >/dev/null 2>&1 && echo STATE-LISTED
touch %[2]s/planted 2>/dev/null && echo STATE-WRITTEN
echo probe-done`, d.seeds[roleHost1], d.state[roleHost1])
		if final := d.run(vision, roleVision, "cred-thief", 10, "sh", "-c", script); final.Type != ledger.EventSucceeded {
			t.Fatalf("the probe job: %+v", final)
		}
		out := readLogs(t, d.js(roleVision), d.n, roleVision, "cred-thief", roleHost1)
		if !strings.Contains(out, "probe-done") {
			t.Fatalf("the probe's output is incomplete: %q", out)
		}
		for _, leak := range []string{canary, "NATS_", "ENVIRON-READ"} {
			if strings.Contains(out, leak) {
				t.Errorf("the job saw %q:\n%s", leak, out)
			}
		}
		if d.pooled {
			for _, leak := range []string{"SEED-READ", "STATE-LISTED", "STATE-WRITTEN"} {
				if strings.Contains(out, leak) {
					t.Errorf("a job under its own uid got %s:\n%s", leak, out)
				}
			}
		} else {
			t.Log("not root: jobs run as the worker's user and can read its files (the worker says so at start)")
		}
		d.healthy(roleNLP, before)
	})

	t.Run("JobEscapesWithSetsid", func(t *testing.T) {
		before := d.account(roleNLP)
		ev, err := vision.Submit(d.ctx, ledger.Submit{Account: roleVision, ID: "escaper", GPUs: 1, Cost: 10,
			Command: []string{"sh", "-c", "setsid sleep 3017 & sleep 3017"}})
		if err != nil {
			t.Fatal(err)
		}
		waitStarted(t, d, vision, roleVision, "escaper", ev.Seq)
		if c, err := vision.Cancel(d.ctx, roleVision, "escaper"); err != nil || c.Type != ledger.EventCancelRequested {
			t.Fatalf("cancel: %+v, %v", c, err)
		}
		if final, err := vision.Wait(d.ctx, roleVision, "escaper", ev.Seq); err != nil || final.Type != ledger.EventCancelled {
			t.Fatalf("the cancelled job: %+v, %v", final, err)
		}
		// Its GPUs are free again only once every process of the job is
		// gone, the one that left its session too.
		if pids := processesRunning(t, "sleep\x003017\x00"); len(pids) > 0 {
			t.Errorf("processes of the cancelled job still run: %v", pids)
		}
		d.healthy(roleNLP, before)
	})

	t.Run("JobPlantsFilesForTheNext", func(t *testing.T) {
		if final := d.run(nlp, roleNLP, "planter", 10, "sh", "-c",
			`printf 'echo PWNED\n' > train.sh; chmod +x train.sh; echo "planted in $(pwd)"`); final.Type != ledger.EventSucceeded {
			t.Fatalf("the planting job: %+v", final)
		}
		planted := readLogs(t, d.js(roleNLP), d.n, roleNLP, "planter", roleHost1)
		if final := d.run(vision, roleVision, "next-job", 10, "sh", "-c", `./train.sh 2>/dev/null; echo "ran in $(pwd)"`); final.Type != ledger.EventSucceeded {
			t.Fatalf("the next job: %+v", final)
		}
		ran := readLogs(t, d.js(roleVision), d.n, roleVision, "next-job", roleHost1)
		before := d.account(roleVision) // vision paid for its job, and nothing else moves
		if strings.Contains(ran, "PWNED") {
			t.Errorf("vision's job ran a file nlp's job planted:\n%s\n%s", planted, ran)
		}
		dir := func(out, prefix string) string {
			_, after, _ := strings.Cut(out, prefix)
			return strings.TrimSpace(after)
		}
		if a, b := dir(planted, "planted in "), dir(ran, "ran in "); a == "" || a == b {
			t.Errorf("two attempts shared the directory %q (%q)", a, b)
		} else if _, err := os.Stat(filepath.Join(a, "train.sh")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the planting attempt's directory outlived it: %v", err)
		}
		d.healthy(roleVision, before)
	})
}

// waitStarted waits, through c, for job's started event.
func waitStarted(t *testing.T, d *deployment, c *client.Client, account, job string, from uint64) {
	t.Helper()
	errStarted := errors.New("started")
	_, err := c.Watch(d.ctx, account, job, from, func(ev wire.JobEvent) error {
		if ev.Type == ledger.EventStarted {
			return errStarted
		}
		return nil
	})
	if !errors.Is(err, errStarted) {
		t.Fatalf("%s never started: %v", job, err)
	}
}

// processesRunning returns the pids of live processes whose command line is
// cmdline (NUL-separated, as /proc shows it); zombies are dead.
func processesRunning(t *testing.T, cmdline string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to look for processes in: %v", err)
	}
	var pids []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || string(b) != cmdline {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if _, rest, ok := strings.Cut(string(st), ") "); ok && strings.HasPrefix(rest, "Z") {
				continue
			}
		}
		pids = append(pids, e.Name())
	}
	return pids
}

// TestSecurityHistory: archived jobs leave the ledger for GPUQ_HISTORY
// (gpuq.history.<account>.<job>); a tenant finds its own there and nobody
// else's, and the admin finds every one.
func TestSecurityHistory(t *testing.T) {
	d := newDeployment(t, func(c *scheduler.Config) { c.Core.JobRetention = time.Second })
	vision, nlp := d.client(roleVision), d.client(roleNLP)
	if final := d.run(nlp, roleNLP, "nlp-old", 10, "true"); final.Type != ledger.EventSucceeded {
		t.Fatalf("nlp's job: %+v", final)
	}
	if final := d.run(vision, roleVision, "vision-old", 10, "true"); final.Type != ledger.EventSucceeded {
		t.Fatalf("vision's job: %+v", final)
	}
	archived := func(c *client.Client, account, id string) (wire.History, error) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			h, err := c.History(d.ctx, account, id)
			if !errors.Is(err, client.ErrNotFound) || time.Now().After(deadline) {
				return h, err
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if h, err := archived(vision, roleVision, "vision-old"); err != nil || h.Job == nil || h.Job.ID != "vision-old" {
		t.Fatalf("vision reads its archived job: %+v, %v", h, err)
	}
	if h, err := archived(d.admin, "", "nlp-old"); err != nil || h.Job == nil || h.Job.Account != roleNLP {
		t.Fatalf("the admin reads nlp's archived job: %+v, %v", h, err)
	}
	d.noRecord("nlp-old") // it left the ledger
	short, cancel := context.WithTimeout(d.ctx, 2*time.Second)
	defer cancel()
	if h, err := vision.History(short, roleNLP, "nlp-old"); err == nil {
		t.Errorf("vision read nlp's archived job: %+v", h)
	}
	if h, err := vision.History(short, "", "nlp-old"); err == nil {
		t.Errorf("vision read nlp's archived job through every account's history: %+v", h)
	}
	// Listing (gpuq jobs --since, gpuq usage): a tenant its own, the admin
	// everyone's.
	list := func(c *client.Client, account string) ([]string, error) {
		var ids []string
		err := c.Histories(d.ctx, account, time.Time{}, func(h wire.History) error {
			ids = append(ids, h.Job.ID)
			return nil
		})
		return ids, err
	}
	if ids, err := list(vision, roleVision); err != nil || len(ids) != 1 || ids[0] != "vision-old" {
		t.Errorf("vision lists its history: %v, %v", ids, err)
	}
	if ids, err := list(d.admin, ""); err != nil || len(ids) != 2 {
		t.Errorf("the admin lists every history: %v, %v", ids, err)
	}
	if ids, err := list(vision, roleNLP); err == nil {
		t.Errorf("vision listed nlp's history: %v", ids)
	}
	if diffs := d.audit(); len(diffs) > 0 {
		t.Errorf("audit: %v", diffs)
	}
}
