// Codec tests: every contract example decodes, every kind of bad input is
// refused with a message that says what is wrong (and the right reason), and
// what the encoders write the decoders read back unchanged.
package wire_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

var n = subjects.Default

func TestDecodeContractExamples(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject, body string
		want          ledger.Command
	}{
		{n.Submit("vision"), `{"v":1,"id":"train-42","priority":5,"gpus":2,"cost":120,"command":["python","train.py"],"env":{},"walltime":"2h","max_attempts":3}`,
			ledger.Submit{Account: "vision", ID: "train-42", Priority: 5, GPUs: 2, Cost: 120, Command: []string{"python", "train.py"}, Walltime: 2 * time.Hour, MaxAttempts: 3}},
		{n.Cancel("vision"), `{"v":1,"id":"train-42"}`, ledger.Cancel{Account: "vision", Job: "train-42"}},
		{n.Submit("vision"), `{"v":1,"id":"eval","gpus":1,"cost":5,"command":["x"],"after":["train-42"],"after_any":["prep"]}`,
			ledger.Submit{Account: "vision", ID: "eval", GPUs: 1, Cost: 5, Command: []string{"x"}, After: []string{"train-42"}, AfterAny: []string{"prep"}}},
		{n.Modify("vision"), `{"v":1,"id":"train-42","op":"hold"}`, ledger.Modify{Account: "vision", Job: "train-42", Op: ledger.OpHold}},
		{n.Modify("vision"), `{"v":1,"id":"train-42","op":"priority","priority":-3}`, ledger.Modify{Account: "vision", Job: "train-42", Op: ledger.OpPriority, Priority: -3}},
		{n.Admin("vision"), `{"v":1,"id":"op-7","op":"create","balance":1000}`, ledger.Admin{Account: "vision", ID: "op-7", Op: ledger.OpCreate, Balance: 1000}},
		{n.Admin("vision"), `{"v":1,"id":"op-8","op":"grant","amount":-5}`, ledger.Admin{Account: "vision", ID: "op-8", Op: ledger.OpGrant, Amount: -5}},
		{n.Admin("vision"), `{"v":1,"id":"op-9","op":"limits","max_running_jobs":4,"max_running_gpus":16}`,
			ledger.Admin{Account: "vision", ID: "op-9", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 4, MaxRunningGPUs: 16}}},
		{n.Admin("vision"), `{"v":1,"id":"op-10","op":"refill","rate_per_hour":100,"cap":5000}`, ledger.Admin{Account: "vision", ID: "op-10", Op: ledger.OpRefill, RatePerHour: 100, Cap: 5000}},
		{n.Admin("vision"), `{"v":1,"id":"op-11","op":"weight","weight":3}`, ledger.Admin{Account: "vision", ID: "op-11", Op: ledger.OpWeight, Weight: 3}},
		{n.Report("h1"), `{"v":1,"job":"train-42","attempt":1,"type":"started","devices":["GPU-0","GPU-1"]}`,
			ledger.Report{Type: ledger.ReportStarted, Host: "h1", Job: "train-42", Attempt: 1, Devices: []string{"GPU-0", "GPU-1"}}},
		{n.Report("h1"), `{"v":1,"job":"train-42","attempt":1,"type":"done","exit_code":3,"runtime_ms":1500}`,
			ledger.Report{Type: ledger.ReportDone, Host: "h1", Job: "train-42", Attempt: 1, ExitCode: 3, Runtime: 1500 * time.Millisecond}},
		{n.Report("h1"), `{"v":1,"job":"train-42","attempt":1,"type":"rejected","reason":"GPU busy"}`,
			ledger.Report{Type: ledger.ReportRejected, Host: "h1", Job: "train-42", Attempt: 1, Reason: "GPU busy"}},
		{n.Sched(subjects.SchedDispatch), `{"v":1,"job":"train-42","attempt":2,"host":"h2"}`, ledger.Dispatch{Job: "train-42", Attempt: 2, Host: "h2"}},
		{n.Sched(subjects.SchedLost), `{"v":1,"job":"train-42","attempt":2,"reason":"heartbeat expired"}`, ledger.Lost{Job: "train-42", Attempt: 2, Reason: "heartbeat expired"}},
		{n.Submit("vision"), `{"v":1,"id":"m","gpus":2,"command":["x"],"walltime":"30m","hold":true}`,
			ledger.Submit{Account: "vision", ID: "m", GPUs: 2, Metered: true, Command: []string{"x"}, Walltime: 30 * time.Minute, Hold: true}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"prices-1","per_gpu_hour":{"NVIDIA H100 80GB HBM3":360},"default":100,"failure_percent":50}`,
			ledger.SetPricing{ID: "prices-1", PerGPUHour: map[string]ledger.Credits{"NVIDIA H100 80GB HBM3": 360}, Default: 100, FailurePercent: 50}},
		{n.Sched(subjects.SchedAdmit), `{"v":1,"account":"vision"}`, ledger.Admit{Account: "vision"}}, // logged before "due" existed
		{n.Sched(subjects.SchedAdmit), `{"v":1,"account":"vision","due":"2026-12-01T10:30:00.000000001+01:00"}`,
			ledger.Admit{Account: "vision", Due: time.Date(2026, 12, 1, 9, 30, 0, 1, time.UTC)}},
		// Unknown fields are ignored, and a body may repeat its own account.
		{n.Cancel("vision"), `{"v":1,"id":"j","account":"vision","future_field":[1,2]}`, ledger.Cancel{Account: "vision", Job: "j"}},
	}
	for _, tt := range tests {
		got, err := wire.DecodeCommand(n, tt.subject, []byte(tt.body))
		if err != nil {
			t.Errorf("DecodeCommand(%s, %s) = %v", tt.subject, tt.body, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeCommand(%s, %s) = %+v, want %+v", tt.subject, tt.body, got, tt.want)
		}
	}
}

func TestDecodeRejectsBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		subject, body string
		reason        ledger.Reason
		account       string
		says          []string
	}{
		{n.Submit("a"), `not json`, ledger.ReasonInvalid, "a", []string{"not a JSON object"}},
		{n.Submit("a"), `[1]`, ledger.ReasonInvalid, "a", []string{"not a JSON object"}},
		{n.Submit("a"), ``, ledger.ReasonInvalid, "a", []string{"empty"}},
		{n.Submit("a"), `{"id":"j","gpus":1,"cost":1,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{`missing required field "v"`}},
		{n.Submit("a"), `{"v":2,"id":"j"}`, ledger.ReasonInvalid, "a", []string{"unsupported version 2"}},
		{n.Submit("a"), `{"v":"1"}`, ledger.ReasonInvalid, "a", []string{`unsupported version "1"`}},
		{n.Submit("a"), `{"v":1}`, ledger.ReasonInvalid, "a", []string{`missing required field "id"`, `"gpus"`, `"command"`}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"hold":"yes"}`, ledger.ReasonInvalid, "a", []string{`hold: want true or false`}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","failure_percent":101,"per_gpu_hour":{"x":1.5}}`, ledger.ReasonInvalid, "", []string{`per_gpu_hour "x": 1.5 is not an integer`}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","failure_percent":101}`, ledger.ReasonInvalid, "", []string{"failure_percent 101"}},
		// Prices are JSON integers, as every other integer field is.
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","per_gpu_hour":{"x":"360"},"failure_percent":50}`, ledger.ReasonInvalid, "", []string{`per_gpu_hour "x": want an integer, got "360"`}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","per_gpu_hour":{"x":null},"failure_percent":50}`, ledger.ReasonInvalid, "", []string{`per_gpu_hour "x": want an integer, got null`}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","per_gpu_hour":{"x":99999999999999999999},"failure_percent":50}`, ledger.ReasonInvalid, "", []string{`per_gpu_hour "x": 99999999999999999999 is out of range`}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","failure_percent":"50"}`, ledger.ReasonInvalid, "", []string{`failure_percent: want an integer, got "50"`}},
		{n.Config(subjects.ConfigPricing), `{"v":1,"id":"p","per_gpu_hour":[360],"failure_percent":50}`, ledger.ReasonInvalid, "", []string{"per_gpu_hour: want an object of integer prices"}},
		{"gpuq.cmd.config.colours", `{"v":1}`, ledger.ReasonInvalid, "", []string{"unknown configuration"}},
		{n.Submit("a"), `{"v":1,"id":"a.b","gpus":1,"cost":1,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{`job id "a.b" has '.'`}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":-3,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"cost -3 is negative"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":0,"cost":1,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"gpus 0 is out of range"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":999,"cost":1,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"gpus 999 is out of range [1, 256]"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1.5,"cost":1,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"gpus: 1.5 is not an integer"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":"two","cost":1,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{`gpus: want an integer, got "two"`}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":99999999999999999999,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"cost: 99999999999999999999 is out of range"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1e30,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"cost: 1e30 is not an integer"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":9007199254740992,"command":["x"]}`, ledger.ReasonInvalid, "a", []string{"more than the maximum"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":[]}`, ledger.ReasonInvalid, "a", []string{"command is empty"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":"python train.py"}`, ledger.ReasonInvalid, "a", []string{"command: want an array of strings"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"walltime":"2 hours"}`, ledger.ReasonInvalid, "a", []string{`walltime: "2 hours" is not a duration`}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"walltime":"-1h"}`, ledger.ReasonInvalid, "a", []string{"not positive"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"walltime":"9999h"}`, ledger.ReasonInvalid, "a", []string{"walltime 9999h0m0s is out of range"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"env":{"1X":"y"}}`, ledger.ReasonInvalid, "a", []string{`env name "1X"`}},
		{n.Submit("a"), `{"v":1,"id":"j","account":"b","gpus":1,"cost":1,"command":["x"]}`, ledger.ReasonAccountMismatch, "a", []string{`names account "b"`}},
		{n.Cancel("a"), `{"v":1}`, ledger.ReasonInvalid, "a", []string{`missing required field "id"`}},
		{n.Modify("a"), `{"v":1,"id":"j","op":"pause"}`, ledger.ReasonInvalid, "a", []string{`unknown op "pause"`}},
		{n.Modify("a"), `{"v":1,"id":"j","op":"priority","priority":5000}`, ledger.ReasonInvalid, "a", []string{"priority 5000 is out of range"}},
		{n.Submit("a"), `{"v":1,"id":"j","gpus":1,"cost":1,"command":["x"],"after":["j"]}`, ledger.ReasonInvalid, "a", []string{"cannot depend on itself"}},
		{n.Admin("a"), `{"v":1,"id":"op","op":"frobnicate"}`, ledger.ReasonInvalid, "a", []string{`unknown op "frobnicate"`}},
		{n.Admin("a"), `{"v":1,"id":"op","op":"grant"}`, ledger.ReasonInvalid, "a", []string{`missing required field "amount"`}},
		{n.Admin("a"), `{"v":1,"id":"op","op":"weight","weight":0}`, ledger.ReasonInvalid, "a", []string{"weight 0 is out of range"}},
		{n.Admin("a"), `{"v":1,"op":"create"}`, ledger.ReasonInvalid, "a", []string{`missing required field "id"`}},
		{n.Report("h1"), `{"v":1,"job":"j","attempt":1,"type":"started"}`, ledger.ReasonInvalid, "", []string{`missing required field "devices"`}},
		{n.Report("h1"), `{"v":1,"job":"j","attempt":1,"type":"done"}`, ledger.ReasonInvalid, "", []string{`missing required field "exit_code"`}},
		{n.Report("h1"), `{"v":1,"job":"j","attempt":0,"type":"exploded"}`, ledger.ReasonInvalid, "", []string{`unknown report type "exploded"`, "attempt 0"}},
		{n.Report("h1"), `{"v":1,"job":"j","attempt":1,"type":"started","devices":["GPU-0","GPU-0"]}`, ledger.ReasonInvalid, "", []string{"listed twice"}},
		{n.Report("h1"), `{"v":1,"job":"j","attempt":1,"type":"done","exit_code":0,"host":"h2"}`, ledger.ReasonInvalid, "", []string{`names host "h2"`}},
		{n.Sched(subjects.SchedDispatch), `{"v":1,"job":"j","attempt":1,"host":"a b"}`, ledger.ReasonInvalid, "", []string{`host "a b"`}},
		{n.Sched(subjects.SchedLost), `{"v":1,"job":"j","attempt":1}`, ledger.ReasonInvalid, "", []string{`missing required field "reason"`}},
		{"gpuq.cmd.submit.caf\u00e9", `{"v":1}`, ledger.ReasonInvalid, "", []string{"account"}},
		{"gpuq.cmd.nonsense.x", `{"v":1}`, ledger.ReasonInvalid, "", []string{"unknown command kind"}},
	}
	for _, tt := range tests {
		cmd, err := wire.DecodeCommand(n, tt.subject, []byte(tt.body))
		var de *wire.DecodeError
		if !errors.As(err, &de) {
			t.Errorf("DecodeCommand(%s, %s) = %+v, %v; want a *DecodeError", tt.subject, tt.body, cmd, err)
			continue
		}
		if de.Reason != tt.reason || de.Account != tt.account {
			t.Errorf("DecodeCommand(%s, %s): reason %s, account %q; want %s, %q", tt.subject, tt.body, de.Reason, de.Account, tt.reason, tt.account)
		}
		for _, s := range tt.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("DecodeCommand(%s, %s) = %q, want it to say %q", tt.subject, tt.body, err, s)
			}
		}
		if inv := de.Command(); inv.Message != err.Error() || inv.Reason != tt.reason {
			t.Errorf("DecodeError.Command() = %+v", inv)
		}
	}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	cmds := []ledger.Command{
		ledger.Submit{Account: "vision", ID: "train-42", Priority: -3, GPUs: 8, Cost: 0, Command: []string{"sh", "-c", "echo 'hi'"},
			Env: map[string]string{"SEED": "7"}, Walltime: 90 * time.Minute, MaxAttempts: 2},
		ledger.Submit{Account: "vision", ID: "minimal", GPUs: 1, Cost: 5, Command: []string{"true"}},
		ledger.Cancel{Account: "vision", Job: "train-42"},
		ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 0},
		ledger.Admin{Account: "vision", ID: "op-2", Op: ledger.OpLimits},
		ledger.Admin{Account: "vision", ID: "op-3", Op: ledger.OpRefill, RatePerHour: 0, Cap: 0},
		ledger.Admin{Account: "vision", ID: "op-4", Op: ledger.OpGrant, Amount: ledger.MaxCredits},
		ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: 3, Devices: []string{"GPU-x", "MIG-y"}},
		ledger.Report{Type: ledger.ReportDone, Host: "h", Job: "j", Attempt: 3, ExitCode: -1, Runtime: 0},
		ledger.Report{Type: ledger.ReportDone, Host: "h", Job: "j", Attempt: 3, ExitCode: 137, Runtime: time.Minute, Infra: "Xid 79 on GPU-x"},
		ledger.Report{Type: ledger.ReportRejected, Host: "h", Job: "j", Attempt: 3, Reason: "GPU-x has 1 compute process"},
		ledger.Dispatch{Job: "j", Attempt: 4, Host: "h"},
		ledger.Lost{Job: "j", Attempt: 4, Reason: "h heartbeat expired"},
		ledger.Unplaceable{Job: "j", Message: "needs 16 GPUs; the largest host has 8"},
		ledger.Submit{Account: "vision", ID: "metered", GPUs: 4, Metered: true, Command: []string{"x"}, Hold: true},
		ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: 1, Devices: []string{"GPU-x"}, Model: "NVIDIA H200 141GB HBM3e"},
		ledger.SetPricing{ID: "p", PerGPUHour: map[string]ledger.Credits{"a": 1, "b": 2}, Default: 3, FailurePercent: 0},
		ledger.Admit{Account: "vision"},
		ledger.Admit{Account: "vision", Due: time.Date(2026, 12, 1, 9, 30, 0, 1, time.UTC)},
		ledger.Archive{Job: "j", Seq: 12, Retention: 168 * time.Hour},
	}
	for _, c := range cmds {
		msg, err := wire.EncodeCommand(n, c)
		if err != nil {
			t.Errorf("encode %+v: %v", c, err)
			continue
		}
		got, err := wire.DecodeCommand(n, msg.Subject, msg.Data)
		if err != nil {
			t.Errorf("decode %s %s: %v", msg.Subject, msg.Data, err)
			continue
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("round trip of %+v gave %+v", c, got)
		}
	}
}

func TestEncodersRefuseBadCommands(t *testing.T) {
	t.Parallel()
	if _, err := wire.EncodeSubmit(n, ledger.Submit{Account: "a.b", ID: "j", GPUs: 1, Command: []string{"x"}}); err == nil {
		t.Error("EncodeSubmit with a bad account token succeeded")
	}
	if _, err := wire.EncodeSubmit(n, ledger.Submit{Account: "a", ID: "j", GPUs: 1, Cost: -1, Command: []string{"x"}}); err == nil {
		t.Error("EncodeSubmit with a negative cost succeeded")
	}
	if _, err := wire.EncodeReport(n, ledger.Report{Type: ledger.ReportStarted, Host: "h", Job: "j", Attempt: 1}); err == nil {
		t.Error("EncodeReport of started without devices succeeded")
	}
}

func TestMsgIDsDoNotCollideAcrossKinds(t *testing.T) {
	t.Parallel()
	ids := []string{
		wire.SubmitMsgID("a", "x", nil), wire.CancelMsgID("a", "x"), wire.AdminMsgID("a", "x"),
		wire.ReportMsgID("x", "x", 1, ledger.ReportDone), wire.DispatchMsgID("x", 1), wire.LostMsgID("x", 1), wire.UnplaceableMsgID("x"),
		wire.AdmitMsgID("x", time.Unix(0, 1)), wire.PricingMsgID("x"),
		wire.SubmitMsgID("b", "x", nil),
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Errorf("msg id %q is used by two kinds", id)
		}
		seen[id] = true
	}
}

// TestCommandMsgIDs pins the de-duplication id each encoder gives its
// message: a changed id would let a retry across an upgrade be stored twice.
func TestCommandMsgIDs(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cmd  ledger.Command
		want string
	}{
		{ledger.Admit{Account: "vision", Due: time.Unix(0, 42)}, "admit.vision.42"},
		{ledger.SetPricing{ID: "prices-1", Default: 1, FailurePercent: 50}, "config.pricing.prices-1"},
		{ledger.Cancel{Account: "vision", Job: "j"}, "cancel.vision.j"},
		{ledger.Dispatch{Job: "j", Attempt: 2, Host: "h"}, "dispatch.j.2"},
		{ledger.Unplaceable{Job: "j", Message: "too wide"}, "unplaceable.j"},
		{ledger.Lost{Job: "j", Attempt: 2, Reason: "heartbeat expired"}, "lost.j.2"},
		{ledger.Admin{Account: "vision", ID: "op", Op: ledger.OpGrant, Amount: 5}, "admin.vision.op"},
		{ledger.Report{Type: ledger.ReportDone, Host: "h", Job: "j", Attempt: 2}, "report.h.j.2.done"},
		{ledger.Submit{Account: "vision", ID: "j", GPUs: 1, Command: []string{"x"}}, "submit.vision.j.a62195010a568fce"},
	} {
		msg, err := wire.EncodeCommand(n, tt.cmd)
		if err != nil {
			t.Errorf("encode %+v: %v", tt.cmd, err)
			continue
		}
		if msg.MsgID != tt.want {
			t.Errorf("encode %T: msg id %q, want %q", tt.cmd, msg.MsgID, tt.want)
		}
	}
}

func TestEncodeEffects(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.FixedZone("x", 3600))
	code := 0
	tests := []struct {
		effect          ledger.Effect
		subject, msgID  string
		stream          string
		decodeAndVerify func(data []byte) error
	}{
		{ledger.JobEvent{Type: ledger.EventSucceeded, Job: "j", Account: "a", State: ledger.StateSucceeded, Attempt: 1, Host: "h", Charged: 5, Balance: 10, Available: 10, ExitCode: &code},
			n.JobEvent("a", "j"), "7.0", n.EventsStream(), func(d []byte) error {
				e, err := wire.DecodeJobEvent(d)
				if err == nil && (e.Seq != 7 || e.Charged != 5 || e.ExitCode == nil || !e.Time.Equal(at) || e.Time.Location() != time.UTC) {
					err = errors.New("fields lost: " + string(d))
				}
				return err
			}},
		{ledger.AccountEvent{Type: ledger.EventGranted, Account: "a", OpID: "op", Op: ledger.OpGrant, Balance: 3},
			n.AccountEvent("a"), "7.1", n.EventsStream(), func(d []byte) error { _, err := wire.DecodeAccountEvent(d); return err }},
		{ledger.InvalidEvent{Account: "a", Reason: ledger.ReasonInvalid, Message: "bad"},
			n.InvalidEvent("a"), "7.2", n.EventsStream(), func(d []byte) error { _, err := wire.DecodeInvalidEvent(d); return err }},
		{ledger.InvalidEvent{Account: "not valid", Job: "a.b", Reason: ledger.ReasonInvalid, Message: "bad"},
			n.UnaddressedEvent(), "7.3", n.EventsStream(), func(d []byte) error {
				e, err := wire.DecodeInvalidEvent(d)
				if err == nil && (e.Account != "" || e.Job != "") {
					err = errors.New("invalid tokens leaked into the body: " + string(d))
				}
				return err
			}},
		{ledger.Entry{Kind: ledger.EntrySettle, Account: "a", Job: "j", Amount: 5, Reservation: 8, Released: 3, Balance: 10},
			n.Journal("a"), "7.4", n.JournalStream(), func(d []byte) error { _, err := wire.DecodeJournalEntry(d); return err }},
		{ledger.DispatchOrder{Host: "h", Job: "j", Account: "a", Attempt: 2, GPUs: 1, Command: []string{"x"}, Walltime: time.Hour},
			n.Dispatch("h"), "j.2.dispatch.7", n.DispatchStream(), func(d []byte) error {
				o, seq, err := wire.DecodeOrder("h", d)
				if err == nil && (seq != 7 || !reflect.DeepEqual(o, ledger.DispatchOrder{Host: "h", Job: "j", Account: "a", Attempt: 2, GPUs: 1, Command: []string{"x"}, Walltime: time.Hour})) {
					err = errors.New("order changed: " + string(d))
				}
				return err
			}},
		{ledger.CancelOrder{Host: "h", Job: "j", Account: "a", Attempt: 2},
			n.Dispatch("h"), "j.2.cancel.7", n.DispatchStream(), func(d []byte) error {
				o, _, err := wire.DecodeOrder("h", d)
				if err == nil && o != (ledger.CancelOrder{Host: "h", Job: "j", Account: "a", Attempt: 2}) {
					err = errors.New("order changed: " + string(d))
				}
				return err
			}},
	}
	for i, tt := range tests {
		msg, err := wire.EncodeEffect(n, 7, at, i, tt.effect)
		if err != nil {
			t.Errorf("EncodeEffect(%+v) = %v", tt.effect, err)
			continue
		}
		if msg.Subject != tt.subject || msg.MsgID != tt.msgID {
			t.Errorf("EncodeEffect(%T) = subject %s id %s, want %s %s", tt.effect, msg.Subject, msg.MsgID, tt.subject, tt.msgID)
		}
		if !inStream(msg.Subject, tt.stream) {
			t.Errorf("%T is published on %s, outside stream %s", tt.effect, msg.Subject, tt.stream)
		}
		if err := tt.decodeAndVerify(msg.Data); err != nil {
			t.Errorf("decoding %T: %v", tt.effect, err)
		}
	}
}

func inStream(subject, stream string) bool {
	for _, s := range n.Streams() {
		if s.Name != stream {
			continue
		}
		for _, f := range s.Subjects {
			if subjects.Match(f, subject) {
				return true
			}
		}
	}
	return false
}

func TestDecodeOrderRejectsBadOrders(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"v":1,"type":"dispatch","job":"j","account":"a","attempt":1,"gpus":1,"command":["x"]}`:                 `missing required field "walltime"`,
		`{"v":1,"type":"dispatch","job":"j","account":"a","attempt":1,"gpus":0,"command":["x"],"walltime":"1h"}`: "gpus 0",
		`{"v":1,"type":"explode","job":"j","account":"a","attempt":1}`:                                           `unknown order type "explode"`,
		`{"v":1,"type":"cancel","job":"j","account":"a","attempt":0}`:                                            "attempt 0",
	} {
		if _, _, err := wire.DecodeOrder("h", []byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeOrder(%s) = %v, want it to say %q", body, err, want)
		}
	}
}

// TestSubmitMsgIDFollowsTheTerms: the server de-duplicates a submission only
// when its terms are the same bytes, so a resubmission with another command
// or GPU count under the same job id reaches the fold instead of being
// answered with the first submission's outcome; a nonce makes a new call of
// the same terms a new command.
func TestSubmitMsgIDFollowsTheTerms(t *testing.T) {
	t.Parallel()
	base := ledger.Submit{Account: "vision", ID: "train-1", GPUs: 2, Cost: 10, Command: []string{"python", "train.py"}}
	id := func(s ledger.Submit) string {
		t.Helper()
		msg, err := wire.EncodeSubmit(n, s)
		if err != nil {
			t.Fatal(err)
		}
		return msg.MsgID
	}
	if a, b := id(base), id(base); a != b {
		t.Errorf("the same terms gave ids %q and %q", a, b)
	}
	other := base
	other.Command = []string{"python", "eval.py"}
	wider := base
	wider.GPUs = 4
	for _, s := range []ledger.Submit{other, wider} {
		if id(s) == id(base) {
			t.Errorf("terms %+v share the id %q of %+v", s, id(base), base)
		}
	}
	msg, err := wire.EncodeSubmit(n, base)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := wire.WithNonce(msg, "n1").MsgID, wire.WithNonce(msg, "n2").MsgID; a == b || a == msg.MsgID {
		t.Errorf("nonces gave ids %q and %q from %q", a, b, msg.MsgID)
	}
}
