// Parity test of the account caps: the rule is one function,
// ledger.CapBlocks, and the fold (which refuses a dispatch past a cap),
// Core.Decide (which starts no job past one) and Explain (which names each
// one a waiting job is past) must all give its verdict. Generated accounts,
// with running jobs, caps and a job decided ahead in the same pass, are put
// to all three and to a plain statement of the rule written here.
package scheduler_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

func TestCapRuleOneVerdict(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		l := ledgertest.NewLog(rt)
		l.Create("a", 1_000_000)
		submit := func(id string, gpus, priority int) {
			res := l.Apply(ledger.Submit{Account: "a", ID: id, GPUs: gpus, Cost: 1, Priority: priority, Command: []string{"x"}})
			if ev, _ := ledgertest.First[ledger.JobEvent](res); ev.Type != ledger.EventAccepted {
				rt.Fatalf("submit %s: %+v", id, ev)
			}
		}
		// Jobs already running, on a host that is not heartbeating (so
		// they take no room where the waiting jobs could go).
		running := rapid.SliceOfN(rapid.IntRange(1, 4), 0, 4).Draw(rt, "running_gpus")
		for i, g := range running {
			id := fmt.Sprintf("r%d", i)
			submit(id, g, 0)
			l.Start(id, "elsewhere")
		}
		maxJobs := rapid.IntRange(0, 5).Draw(rt, "max_running_jobs")
		maxGPUs := rapid.IntRange(0, 12).Draw(rt, "max_running_gpus")
		l.Apply(ledger.Admin{Account: "a", ID: "lim", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: maxJobs, MaxRunningGPUs: maxGPUs}})
		ahead := rapid.IntRange(0, 4).Draw(rt, "ahead_gpus") // 0: no job ahead
		if ahead > 0 {
			submit("ahead", ahead, 9) // first in the queue: Decide counts it before j
		}
		gpus := rapid.IntRange(1, 6).Draw(rt, "gpus")
		submit("j", gpus, 0)

		// The rule, stated plainly: at the running-jobs cap, or past the
		// GPU cap with the job's GPUs, nothing more starts.
		jobs, used := len(running), 0
		for _, g := range running {
			used += g
		}
		capped := func(g int) (out []string) {
			if maxJobs > 0 && jobs >= maxJobs {
				out = append(out, string(ledger.ReasonMaxRunningJobs))
			}
			if maxGPUs > 0 && used+g > maxGPUs {
				out = append(out, string(ledger.ReasonMaxRunningGPUs))
			}
			return out
		}
		aheadGoes := ahead > 0 && len(capped(ahead)) == 0
		if aheadGoes {
			jobs, used = jobs+1, used+ahead
		}
		want := capped(gpus)

		// Decide, with room for everything on h: only the caps hold a job
		// back, and ahead, once decided, counts against them.
		h := wire.Heartbeat{Host: "h"}
		for i := range 64 {
			h.Devices = append(h.Devices, wire.Device{UUID: fmt.Sprintf("h-%d", i), Healthy: true})
		}
		core := scheduler.NewCore(scheduler.CoreConfig{})
		core.Load(l.State)
		core.SetHost(h, l.Now)
		decided := dispatches(core.Decide(l.State, l.Now))
		if _, ok := decided["ahead"]; ok != aheadGoes {
			rt.Fatalf("Decide dispatched ahead: %v, the rule says %v (decisions %v)", ok, aheadGoes, decided)
		}
		if _, ok := decided["j"]; ok != (len(want) == 0) {
			rt.Fatalf("Decide dispatched j: %v, the rule says blocked by %v (decisions %v)", ok, want, decided)
		}

		// The fold, given the same decisions in the order Decide made them
		// (and given ahead's even when Decide held it back), accepts
		// exactly those the rule allows, refusing with the first cap.
		if ahead > 0 {
			ev, _ := ledgertest.First[ledger.JobEvent](l.Apply(ledger.Dispatch{Job: "ahead", Attempt: 1, Host: "h"}))
			if (ev.Type == ledger.EventDispatched) != aheadGoes {
				rt.Fatalf("the fold's answer to ahead's dispatch: %s %s, the rule says go: %v", ev.Type, ev.Reason, aheadGoes)
			}
		}

		// Explain, on the ledger the fold left, names exactly the caps
		// the rule names, in its order, and nothing at all when none
		// applies and no job waits ahead (the next pass dispatches it).
		bs, err := scheduler.Explain(l.State, []wire.Heartbeat{h}, "j", l.Now, scheduler.CoreConfig{})
		if err != nil {
			rt.Fatal(err)
		}
		var named []string
		says := map[string]string{}
		for _, b := range bs {
			if strings.HasPrefix(b.Kind, "max_running_") {
				named = append(named, b.Kind)
				says[b.Kind] = b.Message
			}
		}
		if !slices.Equal(named, want) {
			rt.Fatalf("Explain names caps %v, the rule says %v (all blockers %+v)", named, want, bs)
		}
		if len(want) == 0 && (ahead == 0 || aheadGoes) && len(bs) > 0 {
			rt.Fatalf("no cap applies, yet Explain says %+v", bs)
		}

		ev, _ := ledgertest.First[ledger.JobEvent](l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"}))
		switch {
		case len(want) == 0 && ev.Type != ledger.EventDispatched:
			rt.Fatalf("the fold refused j's dispatch (%s: %s); the rule allows it", ev.Reason, ev.Message)
		case len(want) > 0 && (ev.Type != ledger.EventIgnored || string(ev.Reason) != want[0]):
			rt.Fatalf("the fold's answer to j's dispatch: %s %s, want ignored for %s", ev.Type, ev.Reason, want[0])
		case len(want) > 0 && !strings.HasSuffix(ev.Message, says[want[0]]):
			rt.Fatalf("the fold says %q, Explain says %q: one cap, two messages", ev.Message, says[want[0]])
		}
	})
}
