// Tests of GPU-model constraints: a job that names a model is placed, and
// reserved for by backfill, only on hosts whose every GPU is that model;
// Explain and the wait facts say when no live host has it, and a job whose
// model no live host has fails as unplaceable after the grace period, as a
// job wider than every host does.
package scheduler_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

const (
	h100 = "NVIDIA H100 80GB HBM3"
	h200 = "NVIDIA H200 141GB HBM3e"
)

func modelHost(name string, gpus int, model string) wire.Heartbeat {
	hb := wire.Heartbeat{Host: name}
	for i := range gpus {
		hb.Devices = append(hb.Devices, wire.Device{UUID: fmt.Sprintf("%s-%d", name, i), Model: model, Healthy: true})
	}
	return hb
}

func (h *harness) submitModel(id string, gpus int, model string, walltime time.Duration) {
	h.t.Helper()
	res := h.apply(ledger.Submit{Account: "a", ID: id, GPUs: gpus, Cost: 1, Command: []string{"x"}, GPUModel: model, Walltime: walltime})
	if ev, _ := ledgertest.First[ledger.JobEvent](res); ev.Type != ledger.EventAccepted {
		h.t.Fatalf("submit %s: %+v", id, ev)
	}
}

func TestModelConstrainedJobGoesOnlyToMatchingHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	// Best fit alone would pick the smaller host, the H100 one.
	h.core.SetHost(modelHost("h100-host", 2, h100), h.l.Now)
	h.core.SetHost(modelHost("h200-host", 8, h200), h.l.Now)
	h.submitModel("wants-h200", 2, strings.ToLower(h200), 0) // case is ignored
	h.submitModel("wants-h100", 1, h100, 0)
	h.submitModel("any", 1, "", 0)
	got := dispatches(h.decide())
	if got["wants-h200"] != "h200-host" || got["wants-h100"] != "h100-host" || got["any"] == "" {
		t.Fatalf("dispatches = %v; want wants-h200 on h200-host, wants-h100 on h100-host, any somewhere", got)
	}
	// The H100 host is full: another H100 job waits even though the H200
	// host has 5 free GPUs.
	h.submitModel("h100-again", 1, h100, 0)
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Fatalf("dispatches = %v; want the H100 job to wait for the H100 host", got)
	}
}

func TestMixedHostMatchesNoModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	mixed := modelHost("mixed", 2, h100)
	mixed.Devices[1].Model = h200
	h.core.SetHost(mixed, h.l.Now)
	h.submitModel("j", 1, h100, 0)
	if got := dispatches(h.decide()); len(got) != 0 {
		t.Fatalf("dispatches = %v; a host with two models must not take a job asking for one", got)
	}
}

func TestBackfillReservesOnMatchingHost(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	h.core.SetHost(modelHost("h100-host", 2, h100), h.l.Now)
	h.core.SetHost(modelHost("h200-host", 2, h200), h.l.Now)
	// Both hosts busy, the H100 one for longer.
	h.submitModel("long", 2, h100, 4*time.Hour)
	h.submitModel("short", 2, h200, time.Hour)
	h.decide()
	// The H100 job reserves the H100 host though the H200 one frees first.
	h.submitModel("next", 2, h100, time.Hour)
	h.decide()
	sh, ok := h.core.Shadows()["next"]
	if !ok || sh.Host != "h100-host" {
		t.Fatalf("shadows = %+v; want next's reservation on h100-host", h.core.Shadows())
	}
}

func TestUnknownModelIsExplainedThenUnplaceable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{UnplaceableAfter: time.Minute})
	h.l.Create("a", 100)
	hosts := []wire.Heartbeat{modelHost("h100-host", 8, h100)}
	h.core.SetHost(hosts[0], h.l.Now)
	h.submitModel("j", 1, "NVIDIA B200", 0)
	bs, err := scheduler.Explain(h.l.State, hosts, "j", h.l.Now, scheduler.CoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := blockerKinds(bs)
	if msg := kinds["no_matching_host"]; !strings.Contains(msg, `needs GPU model "NVIDIA B200"; no live host has it`) || !strings.Contains(msg, h100) {
		t.Errorf("Explain = %v; want no_matching_host naming the model asked for and the live ones", kinds)
	}
	if cmds := h.decide(); len(cmds) != 0 {
		t.Fatalf("first sight: %+v, want the grace period", cmds)
	}
	ws, _ := h.core.Waiting(h.l.State, h.l.Now, 10)
	if len(ws) != 1 || blockerKinds(ws[0].Blockers)["no_matching_host"] != kinds["no_matching_host"] {
		t.Errorf("Waiting = %+v; want the same no_matching_host as Explain", ws)
	}
	h.l.Advance(time.Minute)
	cmds := h.decide()
	if len(cmds) != 1 {
		t.Fatalf("after the grace period: %+v", cmds)
	}
	u, ok := cmds[0].(ledger.Unplaceable)
	if !ok || u.Job != "j" || !strings.Contains(u.Message, `needs GPU model "NVIDIA B200"`) {
		t.Fatalf("verdict = %+v", cmds[0])
	}
	if j := h.l.Job("j"); j.State != ledger.StateFailed || j.Reason() != ledger.ReasonUnplaceable || j.Reserved != 0 {
		t.Errorf("job after verdict: %s %s reserved %d", j.State, j.Reason(), j.Reserved)
	}
	wantAvailable(t, h.l, 100)
}

func TestTooWideForItsModel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, scheduler.CoreConfig{})
	h.l.Create("a", 100)
	hosts := []wire.Heartbeat{modelHost("h100-host", 2, h100), modelHost("h200-host", 8, h200)}
	for _, hb := range hosts {
		h.core.SetHost(hb, h.l.Now)
	}
	h.submitModel("j", 4, h100, 0)
	bs, err := scheduler.Explain(h.l.State, hosts, "j", h.l.Now, scheduler.CoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if msg := blockerKinds(bs)["too_wide"]; !strings.Contains(msg, "the largest live host with that model has 2") {
		t.Errorf("Explain = %v; want too_wide among the H100 hosts", blockerKinds(bs))
	}
}

func wantAvailable(t *testing.T, l *ledgertest.Log, want ledger.Credits) {
	t.Helper()
	if got := l.Account("a").Available(); got != want {
		t.Errorf("available = %d, want %d", got, want)
	}
}
