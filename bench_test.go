package gpuq_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/internal/jslimit"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// BenchmarkSubmitAccepted measures submissions per second through the real
// scheduler on an embedded server with file storage: b.N submissions are
// published, pipelined as a busy pipeline would (at most 1,024
// unacknowledged), and the clock stops when the scheduler has folded the
// last one, written its records, sent its accepted event and journal entry,
// and checkpointed. Client, server and scheduler
// share the machine's cores. Beside submits/s it reports the stored writes
// per submission (the submission itself included), the JetStream limit of
// the same server measured just before (jslimit.Measure), and the stored
// writes per second as a share of it (%limit-pub).
func BenchmarkSubmitAccepted(b *testing.B) {
	c := newClusterOn(b, benchServer(b), natsbus.SetupConfig{})
	hook, wait := waitCheckpoint()
	c.startScheduler("bench", schedOpts{hooks: scheduler.Hooks{Checkpointed: hook}})
	c.createAccountAlone("a", ledger.MaxCredits)
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
	lim, err := jslimit.Measure(context.Background(), c.js)
	if err != nil {
		b.Fatal(err)
	}
	before := streamSeqs(b, c.js)
	b.ResetTimer()
	// At most publishAll's window unacknowledged: past the client's limit
	// of async publishes in flight a loaded machine stalls the publish
	// and fails the run.
	wait(b, publishAll(b, c.js, msgs))
	b.StopTimer()
	per := writesPer(b, before, streamSeqs(b, c.js), b.N)
	rate := float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, "submits/s")
	b.ReportMetric(per, "writes/submit")
	b.ReportMetric(lim.PublishPerSec, "limit-pub/s")
	b.ReportMetric(100*rate*per/lim.PublishPerSec, "%limit-pub")
}
