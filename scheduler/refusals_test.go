// Tests of what Core does about hosts that cannot take what they are sent:
// GPUs a heartbeat shows held are never counted free, a host that refuses
// orders is backed off (and the count is the same whether observed command
// by command or read back from the ledger), a busy refusal starts no retry
// delay, and a start of a run nobody wants becomes a cancel order to the
// host that started it. Everything runs through the real fold (the harness
// of core_test.go); time is the test log's clock.
package scheduler_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestHeldGPUsAreNotFree: a worker frees a finished job's GPUs only after
// its done report is stored, so the fold may have ended the job while the
// host's heartbeat still shows its GPUs held. Core places nothing on those
// GPUs until a heartbeat shows them free; nor on GPUs held by an attempt the
// ledger never placed there (a restarted worker running a stale order), nor
// on GPUs a foreign process or a fault takes.
func TestHeldGPUsAreNotFree(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 2)
	h.submit("a", "first", 2, 0)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "first", Attempt: 1, Devices: []string{"h-0", "h-1"}})
	h.core.SetHost(beat("h", "first", "first", "first"), h.l.Now)
	h.apply(ledger.Report{Type: ledger.ReportDone, Host: "h", Job: "first", Attempt: 1})
	h.submit("a", "next", 1, 0)
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Fatalf("dispatched %v while the heartbeat shows both GPUs still held by the job that just ended", got)
	}
	// A worker restarted on stale orders runs attempt 1 of a job the
	// ledger has moved on from, on one GPU; the other is free.
	h.core.SetHost(beat("h", "first", "stale", ""), h.l.Now)
	if got := dispatches(h.decide()); got["next"] != "h" {
		t.Fatalf("dispatched %v, want next on h's one free GPU", got)
	}
	h.submit("a", "third", 1, 0)
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Errorf("dispatched %v onto the GPU the stale run holds", got)
	}

	// A busy device and an unhealthy one offer nothing either, even when
	// the heartbeat also names an attempt on them.
	h2 := newHarness(t, scheduler.CoreConfig{})
	h2.l.Create("a", 100)
	hb := wire.Heartbeat{Host: "g", Devices: []wire.Device{
		{UUID: "g-0", Healthy: true, Busy: true, Job: "old", Attempt: 1},
		{UUID: "g-1", Healthy: false, Job: "old", Attempt: 1},
		{UUID: "g-2", Healthy: true},
	}}
	h2.core.SetHost(hb, h2.l.Now)
	h2.submit("a", "one", 1, 0)
	h2.submit("a", "two", 1, 0)
	if got := dispatches(h2.decide()); len(got) != 1 || got["one"] != "g" {
		t.Errorf("dispatched %v, want only one, on g's one usable GPU (a busy or faulty GPU counted once, not twice)", got)
	}
}

// TestRefusingHostIsBackedOff: after a worker refuses an order, its host
// gets nothing for HostBackoff's delay, doubling with each refusal in a row
// and starting again once the host reports an attempt started; the job
// itself is not held back, and goes to another host at once.
func TestRefusingHostIsBackedOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 1)
	h.submit("a", "j", 1, 0)
	refuse := func(busy bool) {
		t.Helper()
		cmds := h.decide()
		d, ok := dispatches(cmds)["j"]
		if !ok {
			t.Fatalf("at %v: j not dispatched (%+v)", h.l.Now.Sub(ledgertest.Epoch), cmds)
		}
		j := h.l.Job("j")
		h.apply(ledger.Report{Type: ledger.ReportRejected, Host: d, Job: "j", Attempt: j.Attempt, Reason: "GPU-0 in use", Busy: busy})
	}
	waitOut := func(d time.Duration) {
		t.Helper()
		h.l.Advance(d - time.Millisecond)
		if got := dispatches(h.decide()); len(got) != 0 {
			t.Fatalf("dispatched %v %v into a backoff of %v", got, d-time.Millisecond, d)
		}
		if wake := h.core.NextWake(h.l.State, h.l.Now); !wake.Equal(h.l.Now.Add(time.Millisecond)) {
			t.Errorf("next wake %v, want the backoff's end", wake.Sub(h.l.Now))
		}
		h.l.Advance(time.Millisecond)
	}
	refuse(true)
	waitOut(time.Second)
	refuse(true)
	waitOut(2 * time.Second)
	refuse(false) // an ordinary refusal backs off as much; it also starts the job's retry delay
	if n, until := h.core.BackedOff("h"); n != 3 || !until.Equal(h.l.Now.Add(4*time.Second)) {
		t.Errorf("BackedOff = %d, %v from now; want 3 refusals, 4s", n, until.Sub(h.l.Now))
	}
	h.l.Advance(10 * time.Second) // the retry delay
	cmds := h.decide()
	j := h.l.Job("j")
	if dispatches(cmds)["j"] != "h" || j.Failures != 1 || j.BusyRefusals != 2 {
		t.Fatalf("after the retry delay: %+v; job has %d failures, %d busy refusals", cmds, j.Failures, j.BusyRefusals)
	}
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: j.Attempt, Devices: []string{"h-0"}})
	if n, until := h.core.BackedOff("h"); n != 0 || !until.IsZero() {
		t.Errorf("after a start: BackedOff = %d, %v; want none", n, until)
	}
	h.apply(ledger.Report{Type: ledger.ReportDone, Host: "h", Job: "j", Attempt: j.Attempt})

	// With another host, a refused job goes there at once: a busy refusal
	// is not the job's fault and waits no retry delay.
	h.host("h2", 1)
	h.host("h1", 1)
	h.l.Advance(time.Second)
	h.submit("a", "k", 1, 0)
	cmds = h.decide()
	first := dispatches(cmds)["k"]
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: first, Job: "k", Attempt: 1, Reason: "busy", Busy: true})
	got := dispatches(h.decide())
	if got["k"] == "" || got["k"] == first {
		t.Errorf("after %s refused k: dispatched %v, want k on another host at once", first, got)
	}
}

// TestHostFailingAttemptsIsBackedOff: a host whose attempts start and are
// then ended by the infrastructure (a worker that fails every job: its
// state replaced, its jobs' processes unkillable) is backed off as a
// refusing host is, and starting attempts does not reset the count; the
// jobs go to the healthy host meanwhile. A job's own exit code is not the
// host's failure; an attempt that ends by its job's doing resets the count.
// Explain says why the host is passed over.
func TestHostFailingAttemptsIsBackedOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("bad", 1)  // the tightest fit for a 1-GPU job
	h.host("good", 2) // idles unless bad is backed off
	run := func(id, want string, end ledger.Report) {
		t.Helper()
		h.submit("a", id, 1, 0)
		if got := dispatches(h.decide())[id]; got != want {
			t.Fatalf("%s dispatched to %q, want %s", id, got, want)
		}
		h.apply(ledger.Report{Type: ledger.ReportStarted, Host: want, Job: id, Attempt: 1, Devices: []string{want + "-0"}})
		end.Type, end.Host, end.Job, end.Attempt = ledger.ReportDone, want, id, 1
		h.apply(end)
	}
	infra := ledger.Report{Infra: "cannot kill the attempt's processes"}
	backedOff := func(wantN int, wantFor time.Duration) {
		t.Helper()
		if n, until := h.core.BackedOff("bad"); n != wantN || !until.Equal(h.l.Now.Add(wantFor)) {
			t.Errorf("BackedOff(bad) = %d, %v from now; want %d, %v", n, until.Sub(h.l.Now), wantN, wantFor)
		}
	}
	run("j1", "bad", infra)
	backedOff(1, time.Second)
	run("j2", "good", ledger.Report{}) // fits bad best, but goes to good meanwhile
	h.l.Advance(time.Second)
	run("j3", "bad", infra) // started, then failed: the start does not reset the count
	backedOff(2, 2*time.Second)
	h.submit("a", "waits", 1, 0)
	h.core.SetHost(beat("good", "", "x", "x"), h.l.Now) // good is full: waits has room only on bad
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Fatalf("dispatched %v onto a backed-off host", got)
	}
	bs, err := scheduler.Explain(h.l.State, h.core.Hosts(), "waits", h.l.Now, scheduler.CoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if why := blockerKinds(bs)["host_backoff"]; !strings.Contains(why, "bad had its last 2 attempts ended by the infrastructure") {
		t.Errorf("host_backoff = %q (all: %v), want it to say bad's attempts failed", why, blockerKinds(bs))
	}
	h.l.Advance(2 * time.Second)
	if got := dispatches(h.decide()); got["waits"] != "bad" {
		t.Fatalf("after the backoff: dispatched %v, want waits on bad", got)
	}
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: "bad", Job: "waits", Attempt: 1, Devices: []string{"bad-0"}})
	h.apply(ledger.Report{Type: ledger.ReportDone, Host: "bad", Job: "waits", Attempt: 1, ExitCode: 3})
	if n, until := h.core.BackedOff("bad"); n != 0 || !until.IsZero() {
		t.Errorf("after a job's own exit 3: BackedOff(bad) = %d, %v; want none (the job failed, the host did not)", n, until)
	}
}

// TestBusyRefusalStartsNoRetryDelay: a job in its retry delay after a lost
// attempt that is then refused busy is dispatched again at once, not after
// a new delay from the refusal.
func TestBusyRefusalStartsNoRetryDelay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h1", 1)
	h.host("h2", 1)
	h.submit("a", "j", 1, 0)
	h.decide()
	h.apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "gone"})
	h.l.Advance(10 * time.Second) // the first retry delay
	to := dispatches(h.decide())["j"]
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: to, Job: "j", Attempt: 2, Reason: "busy", Busy: true})
	if got := dispatches(h.decide()); got["j"] == "" {
		bs, _ := scheduler.Explain(h.l.State, h.core.Hosts(), "j", h.l.Now, scheduler.CoreConfig{})
		t.Errorf("after a busy refusal: dispatched %v, want j again at once (why: %+v)", got, bs)
	}
}

// TestBackoffReadFromTheLedger: the failures in a row Core counts as it
// observes reports are the ones a new Core reads back from the ledger, and
// the ones Explain reports, over random sequences of refusals, starts and
// ends (by the job, and by the infrastructure) on a few hosts, some of
// them at the same instant.
func TestBackoffReadFromTheLedger(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(seed(t), 1))
	for round := range 200 {
		h := newHarness(t, scheduler.CoreConfig{})
		h.l.Create("a", 1_000_000)
		hosts := []string{"h0", "h1", "h2"}
		for _, name := range hosts {
			h.host(name, 4)
		}
		for k := range 30 {
			if rng.IntN(3) > 0 {
				h.l.Advance(time.Duration(rng.IntN(3)) * time.Second)
			}
			id := fmt.Sprintf("j%d", k)
			host := hosts[rng.IntN(len(hosts))]
			h.submit("a", id, 1, 0)
			h.apply(ledger.Dispatch{Job: id, Attempt: 1, Host: host})
			if rng.IntN(2) == 0 {
				h.apply(ledger.Report{Type: ledger.ReportRejected, Host: host, Job: id, Attempt: 1, Reason: "no", Busy: rng.IntN(2) == 0})
			} else {
				h.apply(ledger.Report{Type: ledger.ReportStarted, Host: host, Job: id, Attempt: 1, Devices: []string{"d"}})
				if rng.IntN(3) > 0 && rng.IntN(3) > 0 {
					h.l.Advance(time.Duration(rng.IntN(2)) * time.Second)
				}
				switch rng.IntN(4) {
				case 1:
					h.apply(ledger.Report{Type: ledger.ReportDone, Host: host, Job: id, Attempt: 1})
				case 2:
					h.apply(ledger.Report{Type: ledger.ReportDone, Host: host, Job: id, Attempt: 1, ExitCode: 1})
				case 3:
					h.apply(ledger.Report{Type: ledger.ReportDone, Host: host, Job: id, Attempt: 1, Infra: "swept"})
				}
			}
		}
		fresh := scheduler.NewCore(scheduler.CoreConfig{})
		fresh.Load(h.l.State)
		for _, name := range hosts {
			n1, u1 := h.core.BackedOff(name)
			n2, u2 := fresh.BackedOff(name)
			r1, f1 := h.core.HostFailures(name)
			r2, f2 := fresh.HostFailures(name)
			if n1 != n2 || !u1.Equal(u2) || r1 != r2 || f1 != f2 {
				t.Fatalf("round %d, host %s: observed %d failures (%d refusals, %d ended by the infrastructure) until %v; "+
					"read from the ledger %d (%d, %d) until %v", round, name, n1, r1, f1, u1, n2, r2, f2, u2)
			}
		}
	}
}

// TestExplainSaysHostIsBackedOff: a job that waits only because the host
// with room refused an order is told so, and when the backoff ends.
func TestExplainSaysHostIsBackedOff(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h", 2)
	h.submit("a", "j", 1, 0)
	h.decide()
	h.apply(ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 1, Reason: "busy", Busy: true})
	bs, err := scheduler.Explain(h.l.State, h.core.Hosts(), "j", h.l.Now, scheduler.CoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got := blockerKinds(bs)
	if !strings.Contains(got["host_backoff"], "h refused its last 1 orders; it gets no new one until") || !strings.Contains(got["host_backoff"], "(1s from now)") {
		t.Errorf("host_backoff = %q (all: %v)", got["host_backoff"], got)
	}
	if r := got["backfill_reserved"]; !strings.Contains(r, "reserved for it on h") || !strings.Contains(r, "when its backoff ends") {
		t.Errorf("backfill_reserved = %q, want it reserved on h when the backoff ends", r)
	}
	if len(got) != 2 {
		t.Errorf("Explain = %v, want host_backoff and backfill_reserved only", got)
	}
	h.l.Advance(time.Second)
	if bs, _ := scheduler.Explain(h.l.State, h.core.Hosts(), "j", h.l.Now, scheduler.CoreConfig{}); len(bs) != 0 {
		t.Errorf("after the backoff: %+v, want nothing in the way", bs)
	}
}

// TestDecideIsDeterministic: the same state and heartbeats, given to fresh
// cores in shuffled orders, give the same decisions and reservations, even
// where hosts tie on every measure but their names.
func TestDecideIsDeterministic(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 1000)
	var beats []wire.Heartbeat
	for i := range 6 {
		name := fmt.Sprintf("h%d", i)
		h.host(name, 4)
		h.apply(ledger.Submit{Account: "a", ID: "run" + name, GPUs: 3, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	}
	h.decide()
	for i := range 6 {
		name := fmt.Sprintf("h%d", i)
		h.apply(ledger.Report{Type: ledger.ReportStarted, Host: name, Job: "run" + name, Attempt: 1,
			Devices: []string{name + "-0", name + "-1", name + "-2"}})
		beats = append(beats, beat(name, "run"+name, "run"+name, "run"+name, "run"+name, ""))
	}
	h.apply(ledger.Submit{Account: "a", ID: "wide", GPUs: 4, Cost: 1, Command: []string{"x"}, Walltime: time.Hour})
	for k := range 4 {
		h.apply(ledger.Submit{Account: "a", ID: fmt.Sprintf("small%d", k), GPUs: 1, Cost: 1, Command: []string{"x"}, Walltime: 30 * time.Minute})
	}
	var want []ledger.Command
	var wantShadows map[string]scheduler.Shadow
	for try := range 50 {
		core := scheduler.NewCore(scheduler.CoreConfig{})
		core.Load(h.l.State)
		order := rand.Perm(len(beats))
		for _, i := range order {
			core.SetHost(beats[i], h.l.Now)
		}
		got := core.Decide(h.l.State, h.l.Now)
		if try == 0 {
			want, wantShadows = got, core.Shadows()
			continue
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(core.Shadows(), wantShadows) {
			t.Fatalf("hosts in order %v: decided %+v, reserved %+v; first try decided %+v, reserved %+v", order, got, core.Shadows(), want, wantShadows)
		}
	}
}

// TestStaleStartBecomesACancelOrder: a restarted worker that starts an
// attempt already lost and retried elsewhere gets a cancel order for it on
// its own dispatch subject; a second such start of the same attempt, and a
// user's cancel of the job, are orders of their own that the stream's
// de-duplication cannot mistake for one another.
func TestStaleStartBecomesACancelOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.host("h1", 1)
	h.host("h2", 1)
	h.submit("a", "j", 1, 0)
	first := dispatches(h.decide())["j"]
	other := map[string]string{"h1": "h2", "h2": "h1"}[first]
	h.apply(ledger.Lost{Job: "j", Attempt: 1, Reason: "gone"})
	h.l.Advance(10 * time.Second)
	h.core.RemoveHost(first, h.l.Now)
	if got := dispatches(h.decide())["j"]; got != other {
		t.Fatalf("the retry went to %q, want %s", got, other)
	}
	h.apply(ledger.Report{Type: ledger.ReportStarted, Host: other, Job: "j", Attempt: 2, Devices: []string{other + "-0"}})
	ids := map[string]bool{}
	orders := func(res ledger.Result, seq uint64, host string, attempt int) {
		t.Helper()
		found := false
		for i, e := range res.Effects {
			o, ok := e.(ledger.CancelOrder)
			if !ok {
				continue
			}
			found = true
			msg, err := wire.EncodeEffect(subjects.Default, seq, h.l.Now, i, o)
			if err != nil {
				t.Fatal(err)
			}
			if msg.Subject != subjects.Default.Dispatch(host) || o.Attempt != attempt {
				t.Errorf("cancel order %+v on %s, want attempt %d on %s", o, msg.Subject, attempt, subjects.Default.Dispatch(host))
			}
			if ids[msg.MsgID] {
				t.Errorf("cancel order id %s used twice", msg.MsgID)
			}
			ids[msg.MsgID] = true
		}
		if !found {
			t.Errorf("no cancel order in %+v", res.Effects)
		}
	}
	stale := ledger.Report{Type: ledger.ReportStarted, Host: first, Job: "j", Attempt: 1, Devices: []string{first + "-0"}}
	orders(h.apply(stale), h.l.Seq, first, 1)
	orders(h.apply(stale), h.l.Seq, first, 1) // started again, later
	orders(h.apply(ledger.Cancel{Account: "a", Job: "j"}), h.l.Seq, other, 2)
	if j := h.l.Job("j"); j.State != ledger.StateRunning || j.Host() != other || j.Attempt != 2 {
		t.Errorf("the stale starts moved the job: %s on %s attempt %d", j.State, j.Host(), j.Attempt)
	}
}
