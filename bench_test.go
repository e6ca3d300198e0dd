package gpuq_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// BenchmarkSubmitAccepted measures submissions per second through the real
// scheduler on an embedded server with file storage: b.N submissions are
// published, pipelined as a busy pipeline would, and the clock stops when the
// scheduler has folded the last one, written its records, sent its accepted
// event and journal entry, and checkpointed. Client, server and scheduler
// share the machine's cores.
func BenchmarkSubmitAccepted(b *testing.B) {
	c := newCluster(b)
	hook, wait := waitCheckpoint()
	c.startScheduler("bench", schedOpts{hooks: scheduler.Hooks{Checkpointed: hook}})
	c.createAccount("a", ledger.MaxCredits)
	msgs := make([]*nats.Msg, b.N)
	for i := range msgs {
		m, err := wire.EncodeSubmit(c.n, ledger.Submit{Account: "a", ID: fmt.Sprintf("job-%d", i), GPUs: 1, Cost: 1,
			Command: []string{"python", "train.py", "--epochs", "10"}})
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = nats.NewMsg(m.Subject)
		msgs[i].Data = m.Data
		msgs[i].Header.Set(subjects.MsgIDHeader, m.MsgID)
	}
	b.ResetTimer()
	futs := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		f, err := c.js.PublishMsgAsync(m)
		if err != nil {
			b.Fatal(err)
		}
		futs = append(futs, f)
	}
	var last uint64
	for _, f := range futs {
		select {
		case ack := <-f.Ok():
			last = max(last, ack.Sequence)
		case err := <-f.Err():
			b.Fatal(err)
		}
	}
	wait(b, last)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "submits/s")
}
