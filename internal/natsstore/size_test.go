package natsstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestTheLargestRecordsAndEffectsAreStored folds the largest valid command
// of each kind, every limit filled with the character JSON escapes most,
// and writes every record it changes through the store and every effect
// through the publisher to a real server: each is accepted.
func TestTheLargestRecordsAndEffectsAreStored(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	store := natsstore.New(js, kv)
	if _, err := store.Load(ctx); err != nil {
		t.Fatal(err)
	}
	pub := natsbus.NewPublisher(js)
	st := ledger.New()
	seq := uint64(0)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	largest := 0
	apply := func(cmd ledger.Command) {
		t.Helper()
		seq++
		res := st.Apply(cmd, seq, at)
		var recs []scheduler.Record
		for _, k := range res.Changed {
			var rec scheduler.Record
			var err error
			switch k.Kind {
			case ledger.KeyAccount:
				rec.Key, rec.Seq = subjects.AccountKey(k.ID), st.Accounts[k.ID].Seq
				rec.Value, err = ledger.MarshalAccount(st.Accounts[k.ID])
			case ledger.KeyJob:
				rec.Key, rec.Seq = subjects.JobKey(k.ID), st.Jobs[k.ID].Seq
				rec.Value, err = ledger.MarshalJob(st.Jobs[k.ID])
			case ledger.KeyPricing:
				rec.Key, rec.Seq = subjects.PricingKey, st.Pricing.Seq
				rec.Value, err = ledger.MarshalPricing(st.Pricing)
			}
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, len(rec.Value))
			recs = append(recs, rec)
		}
		if err := store.Write(ctx, recs); err != nil {
			t.Fatalf("%s at %d: write: %v", cmd.Kind(), seq, err)
		}
		var msgs []wire.Message
		for i, e := range res.Effects {
			if ev, ok := e.(ledger.InvalidEvent); ok {
				t.Fatalf("%s at %d was refused: %s", cmd.Kind(), seq, ev.Message)
			}
			msg, err := wire.EncodeEffect(subjects.Default, seq, at, i, e)
			if err != nil {
				t.Fatal(err)
			}
			largest = max(largest, len(msg.Data))
			msgs = append(msgs, msg)
		}
		if _, err := pub.Publish(ctx, msgs); err != nil {
			t.Fatalf("%s at %d: publish: %v", cmd.Kind(), seq, err)
		}
		if err := store.Checkpoint(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	apply(ledger.Admin{Account: "a", ID: "create", Op: ledger.OpCreate, Balance: ledger.MaxCredits})
	const args, vars = 64, 64
	cmd := make([]string, args)
	for i := range cmd {
		cmd[i] = strings.Repeat("<", ((ledger.MaxCommandBytes-2-(args-1))/args-2)/6)
	}
	env := map[string]string{}
	for i := range vars {
		env[fmt.Sprintf("V%02d", i)] = strings.Repeat("&", ((ledger.MaxEnvBytes-2-(vars-1))/vars-8)/6)
	}
	sub := ledger.Submit{Account: "a", ID: strings.Repeat("j", ledger.MaxIDBytes), GPUs: ledger.MaxJobGPUs, Cost: 10, Command: cmd, Env: env,
		Walltime: ledger.MaxWalltime, MaxAttempts: ledger.MaxMaxAttempts}
	if err := sub.Validate(); err != nil {
		t.Fatal(err)
	}
	apply(sub)
	host := strings.Repeat("h", ledger.MaxIDBytes)
	devices := make([]string, ledger.MaxJobGPUs)
	for i := range devices {
		devices[i] = fmt.Sprintf("GPU-%0*d", ledger.MaxDeviceBytes-4, i)
	}
	reason := strings.Repeat("<", ledger.MaxReasonBytes)
	for n := 1; st.Jobs[sub.ID].State == ledger.StatePending; n++ {
		apply(ledger.Dispatch{Job: sub.ID, Attempt: n, Host: host})
		if st.Jobs[sub.ID].BusyRefusals < ledger.MaxBusyRefusals {
			apply(ledger.Report{Type: ledger.ReportRejected, Host: host, Job: sub.ID, Attempt: n, Reason: reason, Busy: true})
			continue
		}
		apply(ledger.Report{Type: ledger.ReportStarted, Host: host, Job: sub.ID, Attempt: n, Devices: devices, Model: strings.Repeat("&", ledger.MaxModelBytes)})
		apply(ledger.Report{Type: ledger.ReportDone, Host: host, Job: sub.ID, Attempt: n, Infra: reason})
	}
	if j := st.Jobs[sub.ID]; j.State != ledger.StateFailed || len(j.Attempts()) != ledger.MaxRecordedAttempts-1 {
		t.Fatalf("the job ended %s with %d attempts", j.State, len(j.Attempts()))
	}
	prices := map[string]ledger.Credits{}
	for i := range ledger.MaxPricedModels {
		prices[fmt.Sprintf("%03d", i)+strings.Repeat("<", ledger.MaxModelBytes-3)] = ledger.MaxCredits
	}
	apply(ledger.SetPricing{ID: strings.Repeat("p", ledger.MaxIDBytes), PerGPUHour: prices, Default: 1, FailurePercent: 100, FixedCost: ledger.FixedCostFloor})
	for i := range ledger.MaxRecentOps + 1 {
		apply(ledger.Admin{Account: "a", ID: fmt.Sprintf("%0*d", ledger.MaxIDBytes, i), Op: ledger.OpGrant, Amount: -1})
	}
	view, err := natsstore.New(js, kv).Load(ctx)
	if err != nil {
		t.Fatalf("load what was written: %v", err)
	}
	if view.Checkpoint != seq || view.State.Jobs[sub.ID] == nil || len(view.State.Jobs[sub.ID].Command) != args {
		t.Errorf("loaded checkpoint %d (want %d), job %v", view.Checkpoint, seq, view.State.Jobs[sub.ID] != nil)
	}
	t.Logf("the largest record or message took %d bytes", largest)
	if largest < ledger.MaxCommandBytes {
		t.Errorf("the largest took %d bytes: the test does not fill the limits", largest)
	}
}
