package ledger_test

import (
	"fmt"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// One account through one job: created with 1000 credits, a 120-credit job
// reserved at submit, dispatched, started, and charged when it exits 0.
// Dispatch and start move no money; only the settlement does.
func Example() {
	s := ledger.New()
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	seq := uint64(0)
	apply := func(c ledger.Command) {
		seq++
		at = at.Add(time.Minute)
		res := s.Apply(c, seq, at)
		for _, e := range res.Effects {
			switch e := e.(type) {
			case ledger.JobEvent:
				fmt.Printf("%-10s job %s: balance %d, available %d\n", e.Type, e.Job, e.Balance, e.Available)
			case ledger.AccountEvent:
				fmt.Printf("%-10s account %s: balance %d\n", e.Type, e.Account, e.Balance)
			case ledger.Entry:
				fmt.Printf("  journal %-7s %4d -> balance %d, reserved %d\n", e.Kind, e.Amount, e.Balance, e.Reserved)
			case ledger.DispatchOrder:
				fmt.Printf("  order: run %s attempt %d on %s\n", e.Job, e.Attempt, e.Host)
			}
		}
	}

	apply(ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 1000})
	apply(ledger.Submit{Account: "vision", ID: "train-42", GPUs: 2, Cost: 120, Priority: 5,
		Command: []string{"python", "train.py"}, Walltime: 2 * time.Hour})
	apply(ledger.Dispatch{Job: "train-42", Attempt: 1, Host: "gpu-host-1"})
	apply(ledger.Report{Type: ledger.ReportStarted, Host: "gpu-host-1", Job: "train-42", Attempt: 1,
		Devices: []string{"GPU-0", "GPU-1"}})
	apply(ledger.Report{Type: ledger.ReportDone, Host: "gpu-host-1", Job: "train-42", Attempt: 1,
		ExitCode: 0, Runtime: 95 * time.Minute})

	if err := s.CheckInvariants(); err != nil {
		fmt.Println(err)
	}
	// Output:
	//   journal grant   1000 -> balance 1000, reserved 0
	// created    account vision: balance 1000
	//   journal reserve  120 -> balance 1000, reserved 120
	// accepted   job train-42: balance 1000, available 880
	// dispatched job train-42: balance 1000, available 880
	//   order: run train-42 attempt 1 on gpu-host-1
	// started    job train-42: balance 1000, available 880
	//   journal settle   120 -> balance 880, reserved 0
	// succeeded  job train-42: balance 880, available 880
}
