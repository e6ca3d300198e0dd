// Tests of the size limits: every record and effect the fold can produce
// fits MaxRecordBytes by construction, a command past a limit is refused
// with too_large and leaves nothing behind, a refused submission keeps only
// what its answer needs, and strings that are not valid UTF-8 are refused.
package ledger_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/ledger/ledgertest"
)

func TestEncodedLenIsWhatEncodingJSONWrites(t *testing.T) {
	t.Parallel()
	var cases []string
	for b := range 256 {
		cases = append(cases, string([]byte{byte(b)}), "a"+string([]byte{byte(b)})+"z")
	}
	cases = append(cases, "", "plain", "é", "€", "🙂", "\u2028", "\u2029", "\xe2\x82", "\xf0\x9f\x99",
		"<script>&amp;</script>", "a\"b\\c\n\t\r\b\f", strings.Repeat("<", 1000), "\ufffd", "\x7f")
	for _, s := range cases {
		data, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := ledger.EncodedLen(s); got != len(data) {
			t.Errorf("EncodedLen(%q) = %d, encoding/json writes %d bytes (%s)", s, got, len(data), data)
		}
	}
}

// worst returns n bytes of the character JSON escapes most ('<', six bytes
// each), with the encoded size of the result at most limit.
func worst(limit int) string { return strings.Repeat("<", (limit-2)/6) }

// largestSubmit is the largest submission the ledger accepts: every
// argument and env value filled with '<' up to the encoded limits.
func largestSubmit(account, id string) ledger.Submit {
	const args = 64
	per := (ledger.MaxCommandBytes-2-(args-1))/args - 2 // each argument's escaped body
	cmd := make([]string, args)
	for i := range cmd {
		cmd[i] = strings.Repeat("<", per/6)
	}
	env := map[string]string{}
	const vars = 64
	for i := range vars {
		name := fmt.Sprintf("V%02d", i)
		per := (ledger.MaxEnvBytes-2-(vars-1))/vars - len(name) - 2 - 1 - 2
		env[name] = strings.Repeat("<", per/6)
	}
	return ledger.Submit{Account: account, ID: id, GPUs: ledger.MaxJobGPUs, Cost: 10, Command: cmd, Env: env,
		Walltime: ledger.MaxWalltime, MaxAttempts: ledger.MaxMaxAttempts, Priority: ledger.MaxPriority}
}

// checkSizes fails if a changed record or an effect of res is larger than
// MaxRecordBytes, or res refused its command as too large, and returns the
// largest size seen.
func checkSizes(t *testing.T, l *ledgertest.Log, res ledger.Result) int {
	t.Helper()
	largest := 0
	for _, k := range res.Changed {
		var data []byte
		var err error
		switch k.Kind {
		case ledger.KeyJob:
			data, err = ledger.MarshalJob(l.State.Jobs[k.ID])
		case ledger.KeyAccount:
			data, err = ledger.MarshalAccount(l.State.Accounts[k.ID])
		case ledger.KeyPricing:
			data, err = ledger.MarshalPricing(l.State.Pricing)
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > ledger.MaxRecordBytes {
			t.Errorf("record %v takes %d bytes, more than %d", k, len(data), ledger.MaxRecordBytes)
		}
		largest = max(largest, len(data))
	}
	for _, e := range res.Effects {
		data, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > ledger.MaxRecordBytes {
			t.Errorf("effect %T takes %d bytes", e, len(data))
		}
		largest = max(largest, len(data))
		if ev, ok := e.(ledger.InvalidEvent); ok && ev.Reason == ledger.ReasonTooLarge {
			t.Errorf("a valid command was refused as too large: %s", ev.Message)
		}
	}
	return largest
}

func TestTheLargestValidCommandsMakeRecordsThatFit(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", ledger.MaxCredits)
	sub := largestSubmit("a", "big")
	if err := sub.Validate(); err != nil {
		t.Fatalf("the largest submission is not valid: %v", err)
	}
	largest := checkSizes(t, l, l.Apply(sub))
	devices := make([]string, ledger.MaxJobGPUs)
	for i := range devices {
		devices[i] = fmt.Sprintf("GPU-%0*d", ledger.MaxDeviceBytes-4, i)
	}
	reason := strings.Repeat("<", ledger.MaxReasonBytes)
	model := strings.Repeat("&", ledger.MaxModelBytes)
	// Every attempt a job can record: busy refusals, then attempts spent,
	// each with the worst reason a worker may give.
	host := strings.Repeat("h", ledger.MaxIDBytes)
	for n := 1; l.Job("big").State == ledger.StatePending; n++ {
		largest = max(largest, checkSizes(t, l, l.Apply(ledger.Dispatch{Job: "big", Attempt: n, Host: host})))
		if l.Job("big").BusyRefusals < ledger.MaxBusyRefusals {
			largest = max(largest, checkSizes(t, l, l.Apply(ledger.Report{Type: ledger.ReportRejected, Host: host,
				Job: "big", Attempt: n, Reason: reason, Busy: true})))
			continue
		}
		largest = max(largest, checkSizes(t, l, l.Apply(ledger.Report{Type: ledger.ReportStarted, Host: host,
			Job: "big", Attempt: n, Devices: devices, Model: model})))
		largest = max(largest, checkSizes(t, l, l.Apply(ledger.Report{Type: ledger.ReportDone, Host: host,
			Job: "big", Attempt: n, Infra: reason})))
	}
	j := l.Job("big")
	if len(j.Attempts()) != ledger.MaxRecordedAttempts-1 || j.State != ledger.StateFailed {
		t.Errorf("job ended %s with %d attempts recorded, want failed with %d", j.State, len(j.Attempts()), ledger.MaxRecordedAttempts-1)
	}
	for _, a := range j.Attempts() {
		if n := ledger.EncodedLen(a.Message); n > ledger.MaxMessageBytes {
			t.Fatalf("attempt message takes %d bytes, more than %d", n, ledger.MaxMessageBytes)
		}
	}
	// The largest admin and pricing commands.
	for i := range ledger.MaxRecentOps + 1 {
		largest = max(largest, checkSizes(t, l, l.Apply(ledger.Admin{Account: "a", ID: fmt.Sprintf("%0*d", ledger.MaxIDBytes, i),
			Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: ledger.MaxLimit, MaxRunningGPUs: ledger.MaxLimit}})))
	}
	prices := map[string]ledger.Credits{}
	for i := range ledger.MaxPricedModels {
		prices[fmt.Sprintf("%03d", i)+strings.Repeat("<", ledger.MaxModelBytes-3)] = ledger.MaxCredits
	}
	largest = max(largest, checkSizes(t, l, l.Apply(ledger.SetPricing{ID: strings.Repeat("p", ledger.MaxIDBytes), PerGPUHour: prices,
		Default: ledger.MaxCredits, FailurePercent: 100})))
	t.Logf("the largest record or effect takes %d bytes (limit %d)", largest, ledger.MaxRecordBytes)
	if largest < ledger.MaxCommandBytes {
		t.Errorf("the largest record takes %d bytes, less than the command alone: the test does not fill the limits", largest)
	}
}

// TestAnAngleBracketSubmissionIsRefused replays the probe of issue 10: a
// 196,672-byte submission of '<' whose record would take 1.18 MB as JSON.
func TestAnAngleBracketSubmissionIsRefused(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	res := l.Apply(ledger.Submit{Account: "a", ID: "poison", GPUs: 1, Cost: 10, Command: []string{"sh", strings.Repeat("<", 196_600)}})
	ev := wantEvent(t, res, ledger.EventRejected, ledger.ReasonTooLarge)
	if !strings.Contains(ev.Message, fmt.Sprint(ledger.MaxCommandBytes)) {
		t.Errorf("message %q does not name the limit %d", ev.Message, ledger.MaxCommandBytes)
	}
	if len(res.Changed) != 0 || l.State.Jobs["poison"] != nil {
		t.Errorf("the refused submission left records: changed %v", res.Changed)
	}
	wantMoney(t, l, "a", 100, 100)
	wantEvent(t, l.Submit("a", "next", 10, 0), ledger.EventAccepted, "")
}

func TestARefusalKeepsOnlyWhatTheAnswerNeeds(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 5)
	big := strings.Repeat("x", 120_000)
	res := l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 2, Cost: 10, Command: []string{"python", big}, Env: map[string]string{"BIG": big[:60_000]}})
	ev := wantEvent(t, res, ledger.EventRejected, ledger.ReasonInsufficientCredits)
	if !strings.Contains(ev.Message, "costs 10") {
		t.Errorf("message %q lost the amounts", ev.Message)
	}
	j := l.Job("j")
	data, err := ledger.MarshalJob(j)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 1024 || j.Command != nil || j.Env() != nil {
		t.Errorf("the rejected job's record takes %d bytes, command %d args, env %d vars; want under 1 KiB, none kept", len(data), len(j.Command), len(j.Env()))
	}
	if j.ID != "j" || j.Account != "a" || j.State != ledger.StateRejected || j.Reason() != ledger.ReasonInsufficientCredits || j.Cost != 10 || j.GPUs != 2 {
		t.Errorf("the rejected record lost what the answer states: %+v", j)
	}
	// The id is free again: the same terms after a top-up are accepted.
	l.Apply(ledger.Admin{Account: "a", ID: "top", Op: ledger.OpGrant, Amount: 100})
	wantEvent(t, l.Apply(ledger.Submit{Account: "a", ID: "j", GPUs: 2, Cost: 10, Command: []string{"python", big}}), ledger.EventAccepted, "")
	if got := l.Job("j").Command; len(got) != 2 || got[1] != big {
		t.Errorf("the accepted job did not keep its command")
	}
}

// TestAnOutcomeTooLargeToStoreIsNotApplied gives Apply a command whose
// effect would pass MaxRecordBytes: it is refused, and the records it
// touched are as they were.
func TestAnOutcomeTooLargeToStoreIsNotApplied(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	wantEvent(t, l.Submit("a", "j", 10, 0), ledger.EventAccepted, "")
	before := l.State.Clone()
	res := l.Apply(ledger.Invalid{Account: "a", Job: "j", Reason: ledger.Reason(strings.Repeat("r", ledger.MaxRecordBytes))})
	ev, ok := ledgertest.First[ledger.InvalidEvent](res)
	if !ok || len(res.Effects) != 1 || ev.Reason != ledger.ReasonTooLarge || ev.Job != "j" || ev.Account != "a" {
		t.Fatalf("effects %.300v, want one invalid event too_large about j of a", res.Effects)
	}
	after := l.State.Clone()
	before.Seq, after.Seq = 0, 0
	if !reflect.DeepEqual(before, after) || len(res.Changed) != 0 {
		t.Errorf("the refused command changed %v", res.Changed)
	}
}

// TestAJobStoredWithLargerLimitsCanStillEnd holds a job stored by a version
// with larger limits, its record past MaxRecordBytes: its dispatch order
// could not be sent, so the dispatch fails it with too_large and releases
// its credits; such a job can also still be cancelled.
func TestAJobStoredWithLargerLimitsCanStillEnd(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	for _, id := range []string{"old1", "old2"} {
		wantEvent(t, l.Submit("a", id, 10, 0), ledger.EventAccepted, "")
		l.State.Jobs[id].Command = []string{"sh", strings.Repeat("x", ledger.MaxRecordBytes)}
	}
	ev := wantEvent(t, l.Apply(ledger.Dispatch{Job: "old1", Attempt: 1, Host: "h1"}), ledger.EventFailed, ledger.ReasonTooLarge)
	if ev.State != ledger.StateFailed {
		t.Errorf("old1 is %s, want failed", ev.State)
	}
	wantEvent(t, l.Apply(ledger.Cancel{Account: "a", Job: "old2"}), ledger.EventCancelled, ledger.ReasonCancelled)
	wantMoney(t, l, "a", 100, 100)
}

func TestStringsMustBeValidUTF8(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]ledger.Submit{
		"argv":  {Account: "a", ID: "j", GPUs: 1, Command: []string{"echo", "caf\xe9"}},
		"env":   {Account: "a", ID: "j", GPUs: 1, Command: []string{"echo"}, Env: map[string]string{"X": "\xff"}},
		"first": {Account: "a", ID: "j", GPUs: 1, Command: []string{"\xc3"}},
	} {
		err := s.Validate()
		if err == nil || !strings.Contains(err.Error(), "UTF-8") || ledger.ReasonFor(err) != ledger.ReasonInvalid {
			t.Errorf("%s: Validate = %v, want invalid UTF-8", name, err)
		}
	}
	for name, r := range map[string]ledger.Report{
		"reason": {Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 1, Reason: "bad \xff"},
		"infra":  {Type: ledger.ReportDone, Host: "h", Job: "j", Attempt: 1, Infra: "\xff"},
		"model":  {Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: 1, Devices: []string{"GPU-1"}, Model: "\xff"},
	} {
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "UTF-8") {
			t.Errorf("%s: Validate = %v, want invalid UTF-8", name, err)
		}
	}
	if err := (ledger.SetPricing{ID: "p", PerGPUHour: map[string]ledger.Credits{"\xff": 1}}).Validate(); err == nil {
		t.Errorf("a model name that is not UTF-8 was accepted")
	}
}

func TestMessagesAreCut(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 100)
	l.Submit("a", "j", 10, 0)
	l.Apply(ledger.Dispatch{Job: "j", Attempt: 1, Host: "h1"})
	res := l.Apply(ledger.Report{Type: ledger.ReportRejected, Host: "h1", Job: "j", Attempt: 1, Reason: strings.Repeat("<", ledger.MaxReasonBytes)})
	for _, ev := range ledgertest.All[ledger.JobEvent](res) {
		if n := ledger.EncodedLen(ev.Message); n > ledger.MaxMessageBytes || !utf8.ValidString(ev.Message) || !strings.HasSuffix(ev.Message, "…") {
			t.Errorf("event message takes %d bytes (limit %d), ends %q", n, ledger.MaxMessageBytes, ev.Message[max(len(ev.Message)-8, 0):])
		}
	}
	if n := ledger.EncodedLen(l.Job("j").Message()); n > ledger.MaxMessageBytes {
		t.Errorf("job message takes %d bytes", n)
	}
	// An invalid command quotes only the start of what it names.
	res = l.Apply(ledger.Submit{Account: "a", ID: "k", GPUs: 1, Command: []string{"x"}, Env: map[string]string{strings.Repeat("-", 60_000): "v"}})
	ev := wantEvent(t, res, ledger.EventRejected, ledger.ReasonInvalid)
	if len(ev.Message) > 300 {
		t.Errorf("the rejection of a bad env name takes %d bytes: %.80s…", len(ev.Message), ev.Message)
	}
}

func TestAPriceTableSetsTheFloorOfFixedCosts(t *testing.T) {
	t.Parallel()
	l := ledgertest.NewLog(t)
	l.Create("a", 3_000_000)
	// A cheap model does not lower the floor: a fixed-cost job may be
	// placed on the dearest GPUs.
	l.Apply(ledger.SetPricing{ID: "p1", PerGPUHour: map[string]ledger.Credits{"H100": 360, "T4": 0}, Default: 100, FixedCost: ledger.FixedCostFloor})
	// The probe of issue 10: cost 0 for 8 GPUs × 720 h.
	big := ledger.Submit{Account: "a", ID: "free", GPUs: 8, Cost: 0, Command: []string{"train"}, Walltime: 720 * time.Hour}
	ev := wantEvent(t, l.Apply(big), ledger.EventRejected, ledger.ReasonBelowPriceFloor)
	const floor = 8 * 720 * 360
	if !strings.Contains(ev.Message, fmt.Sprint(floor)) {
		t.Errorf("message %q does not give the floor %d", ev.Message, floor)
	}
	wantMoney(t, l, "a", 3_000_000, 3_000_000)
	big.Cost, big.ID = floor-1, "cheap"
	wantEvent(t, l.Apply(big), ledger.EventRejected, ledger.ReasonBelowPriceFloor)
	big.Cost, big.ID = floor, "fair"
	wantEvent(t, l.Apply(big), ledger.EventAccepted, "")
	wantMoney(t, l, "a", 3_000_000, 3_000_000-floor)

	l.Apply(ledger.SetPricing{ID: "p2", Default: 100, FixedCost: ledger.FixedCostRefused})
	if !strings.Contains(l.State.Pricing.String(), "metered jobs only") {
		t.Errorf("the table says %q", l.State.Pricing.String())
	}
	big.ID, big.Cost = "named", 1_000
	wantEvent(t, l.Apply(big), ledger.EventRejected, ledger.ReasonMeteredOnly)
	wantEvent(t, l.Apply(ledger.Submit{Account: "a", ID: "metered", GPUs: 1, Metered: true, Command: []string{"train"}, Walltime: time.Hour}),
		ledger.EventAccepted, "")
	if err := (ledger.SetPricing{ID: "p3", FixedCost: "cheap"}).Validate(); err == nil {
		t.Errorf("an unknown fixed-cost policy was accepted")
	}
	// The policy is stored with the table.
	data, err := ledger.MarshalPricing(l.State.Pricing)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ledger.UnmarshalPricing(data)
	if err != nil || p.FixedCost != ledger.FixedCostRefused {
		t.Errorf("stored table = %+v, %v; want fixed_cost metered_only", p, err)
	}
}
