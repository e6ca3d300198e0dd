package wire_test

import (
	"testing"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// BenchmarkDecodeCommand decodes the commands of one job's lifecycle, as
// the fold does for each entry of the command log: the submission, the
// scheduler's dispatch decision, and the worker's started and done reports.
func BenchmarkDecodeCommand(b *testing.B) {
	cmds := []ledger.Command{
		ledger.Submit{Account: "vision", ID: "train-0042", GPUs: 2, Cost: 40, Priority: 3,
			Command: []string{"python", "train.py", "--epochs", "10"}, Walltime: 3600e9},
		ledger.Dispatch{Job: "train-0042", Attempt: 1, Host: "gpu-host-1"},
		ledger.Report{Type: ledger.ReportStarted, Host: "gpu-host-1", Job: "train-0042", Attempt: 1,
			Devices: []string{"GPU-0", "GPU-1"}, Model: "NVIDIA H100 80GB HBM3"},
		ledger.Report{Type: ledger.ReportDone, Host: "gpu-host-1", Job: "train-0042", Attempt: 1, Runtime: 61e9},
	}
	msgs := make([]wire.Message, len(cmds))
	for i, c := range cmds {
		m, err := wire.EncodeCommand(n, c)
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = m
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range msgs {
			if _, err := wire.DecodeCommand(n, m.Subject, m.Data); err != nil {
				b.Fatal(err)
			}
		}
	}
}
