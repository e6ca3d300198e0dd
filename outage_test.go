// End-to-end test of a server outage longer than every TTL: the real
// schedulers and workers on one embedded nats-server that the test stops,
// keeps away past the leader lease and the heartbeat TTLs, and restarts on
// the same port and store. Properties checked: a job running through the
// outage keeps running and succeeds on its first attempt; no scheduler's or
// worker's Run returned; a job submitted afterwards runs; the journal audit
// is clean.
package gpuq_test

import (
	"testing"
	"time"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
)

// outage is longer than the harness's lease TTL (1s) and worker heartbeat
// TTL (1s), and longer than a JetStream request's default timeout (5s): a
// request sent just before the server went is buffered by the client and
// would be answered after a shorter outage, hiding that every request
// during it fails.
const outage = 6 * time.Second

func TestOutageLongerThanEveryTTL(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	c := newClusterOn(t, srv, natsbus.SetupConfig{})
	scheds := []*sched{c.startScheduler("s1", schedOpts{}), c.startScheduler("s2", schedOpts{})}
	c.createAccount("a", 1000)
	workers := []*runningWorker{c.startWorker("h1", workerOpts{gpus: 1}), c.startWorker("h2", workerOpts{gpus: 1})}

	// The job outlasts the outage by a couple of seconds, so it ends after
	// the restart and its report meets a server that is back.
	through := c.submitCmd("a", "through", 1, 10, time.Minute, "sh", "-c", "sleep 8")
	c.waitEvent("a", "through", through.Seq, ledger.EventStarted)
	srv.Stop()
	stopped := time.Now()
	time.Sleep(outage) // the point of the test: away for longer than every TTL
	srv.Restart(t)
	t.Logf("the server was away %v", time.Since(stopped).Round(time.Millisecond))

	wantSucceeded(t, c.waitJobs("through"), true)
	c.submitThrough("a", "after", 1, 10, "true")
	wantSucceeded(t, c.waitJobs("after"), true)
	for _, s := range scheds {
		s.stillUp(t)
	}
	for _, w := range workers {
		w.stillUp(t)
	}
	c.audit()
}
