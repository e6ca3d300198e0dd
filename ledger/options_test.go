// Tests of the submit options a job carries besides its price: its display
// name, working directory, GPU model and place in an array. Each is kept in
// the job's record, is part of its terms (another value under the same id
// is a conflict), and is checked by the fold like every other field.
package ledger_test

import (
	"strings"
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
)

func optSubmit(id string) ledger.Submit {
	return ledger.Submit{Account: "a", ID: id, GPUs: 1, Cost: 1, Command: []string{"true"}}
}

func TestSubmitKeepsItsName(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	s := optSubmit("j")
	s.Name = "resnet sweep ▸ lr 3e-4"
	wantEvent(t, l.Apply(s), ledger.EventAccepted, "")
	if got := l.Job("j").Name(); got != s.Name {
		t.Errorf("name = %q, want %q", got, s.Name)
	}
	wantEvent(t, l.Apply(s), ledger.EventIgnored, ledger.ReasonDuplicate)
	other := s
	other.Name = "another"
	ev := wantEvent(t, l.Apply(other), ledger.EventRejected, ledger.ReasonDuplicateConflict)
	if !strings.Contains(ev.Message, `name "resnet sweep ▸ lr 3e-4", not "another"`) {
		t.Errorf("conflict message %q does not name the names", ev.Message)
	}
}

func TestSubmitNameChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		reason      ledger.Reason
		want        string
	}{
		{"line break", "two\nlines", ledger.ReasonInvalid, "printable"},
		{"escape sequence", "red \x1b[31m", ledger.ReasonInvalid, "printable"},
		{"invalid UTF-8", "caf\xe9", ledger.ReasonInvalid, "not valid UTF-8"},
		{"too long", strings.Repeat("n", ledger.MaxNameBytes+1), ledger.ReasonTooLarge, "name is 129 bytes, more than 128"},
	}
	for _, tt := range tests {
		l := ledgertest.NewLog(t)
		l.Create("a", 100)
		s := optSubmit("j")
		s.Name = tt.value
		ev := wantEvent(t, l.Apply(s), ledger.EventRejected, tt.reason)
		if !strings.Contains(ev.Message, tt.want) {
			t.Errorf("%s: message %q does not say %q", tt.name, ev.Message, tt.want)
		}
	}
}

func TestSubmitWorkdirReachesTheOrder(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	s := optSubmit("j")
	s.Workdir = "/data/run-7"
	wantEvent(t, l.Apply(s), ledger.EventAccepted, "")
	if got := l.Job("j").Workdir(); got != s.Workdir {
		t.Errorf("workdir = %q, want %q", got, s.Workdir)
	}
	res := l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h"})
	o, ok := ledgertest.First[ledger.DispatchOrder](res)
	if !ok || o.Workdir != s.Workdir {
		t.Errorf("dispatch order = %+v, want workdir %s", o, s.Workdir)
	}
	other := s
	other.Workdir = "/data/run-8"
	ev := wantEvent(t, l.Apply(other), ledger.EventRejected, ledger.ReasonDuplicateConflict)
	if !strings.Contains(ev.Message, `workdir "/data/run-7", not "/data/run-8"`) {
		t.Errorf("conflict message %q does not name the workdirs", ev.Message)
	}
}

func TestSubmitWorkdirChecks(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, value string
		reason      ledger.Reason
		want        string
	}{
		{"relative", "data/run", ledger.ReasonInvalid, "not an absolute, clean path"},
		{"dot dot", "/data/../etc", ledger.ReasonInvalid, "not an absolute, clean path"},
		{"trailing slash", "/data/", ledger.ReasonInvalid, "not an absolute, clean path"},
		{"line break", "/data/a\nb", ledger.ReasonInvalid, "printable"},
		{"too long", "/" + strings.Repeat("d", ledger.MaxWorkdirBytes), ledger.ReasonTooLarge, "more than 4096"},
	}
	for _, tt := range tests {
		l := ledgertest.NewLog(t)
		l.Create("a", 100)
		s := optSubmit("j")
		s.Workdir = tt.value
		ev := wantEvent(t, l.Apply(s), ledger.EventRejected, tt.reason)
		if !strings.Contains(ev.Message, tt.want) {
			t.Errorf("%s: message %q does not say %q", tt.name, ev.Message, tt.want)
		}
	}
}

func TestSubmitArrayTask(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	s := optSubmit("sweep-7")
	s.ArrayID, s.ArrayIndex = "sweep", 7
	wantEvent(t, l.Apply(s), ledger.EventAccepted, "")
	if j := l.Job("sweep-7"); j.ArrayID() != "sweep" || j.ArrayIndex() != 7 {
		t.Errorf("record = array %q index %d", j.ArrayID(), j.ArrayIndex())
	}
	o, ok := ledgertest.First[ledger.DispatchOrder](l.Apply(ledger.Dispatch{Job: "sweep-7", Attempt: 1, Host: "h"}))
	if !ok || o.ArrayID != "sweep" || o.ArrayIndex != 7 {
		t.Errorf("dispatch order = %+v, want array sweep index 7", o)
	}
	other := s
	other.ArrayIndex = 8
	ev := wantEvent(t, l.Apply(other), ledger.EventRejected, ledger.ReasonDuplicateConflict)
	if !strings.Contains(ev.Message, `array task "sweep"[7], not "sweep"[8]`) {
		t.Errorf("conflict message %q does not name the array places", ev.Message)
	}
	// A task refused for credits keeps its array, so listing the array shows it.
	l.Create("poor", 0)
	p := optSubmit("poor-0")
	p.Account, p.ArrayID = "poor", "poor"
	wantEvent(t, l.Apply(p), ledger.EventRejected, ledger.ReasonInsufficientCredits)
	if j := l.Job("poor-0"); j.ArrayID() != "poor" || j.State != ledger.StateRejected {
		t.Errorf("rejected task = %s of array %q", j.State, j.ArrayID())
	}
	for _, bad := range []ledger.Submit{
		{ArrayIndex: 3},
		{ArrayID: "s", ArrayIndex: -1},
		{ArrayID: "s", ArrayIndex: ledger.MaxArrayIndex + 1},
		{ArrayID: "s\n"},
	} {
		s := optSubmit("bad")
		s.ArrayID, s.ArrayIndex = bad.ArrayID, bad.ArrayIndex
		wantEvent(t, l.Apply(s), ledger.EventRejected, ledger.ReasonInvalid)
	}
}

func TestSubmitGPUModel(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	s := optSubmit("j")
	s.GPUModel = "NVIDIA H100 80GB HBM3"
	wantEvent(t, l.Apply(s), ledger.EventAccepted, "")
	if got := l.Job("j").GPUModel(); got != s.GPUModel {
		t.Errorf("gpu_model = %q", got)
	}
	other := s
	other.GPUModel = ""
	ev := wantEvent(t, l.Apply(other), ledger.EventRejected, ledger.ReasonDuplicateConflict)
	if !strings.Contains(ev.Message, `gpu_model "NVIDIA H100 80GB HBM3", not ""`) {
		t.Errorf("conflict message %q", ev.Message)
	}
	long := optSubmit("k")
	long.GPUModel = strings.Repeat("m", ledger.MaxModelBytes+1)
	wantEvent(t, l.Apply(long), ledger.EventRejected, ledger.ReasonTooLarge)
	ctl := optSubmit("k")
	ctl.GPUModel = "H100\x7f"
	wantEvent(t, l.Apply(ctl), ledger.EventRejected, ledger.ReasonInvalid)
}
