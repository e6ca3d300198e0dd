// End-to-end tests on a 3-node embedded JetStream cluster with every stream
// and bucket replicated three times: the real schedulers and workers (on
// simulated GPUs, running real child processes) while the test kills the
// node that leads a stream, as a crash would (natstest.Cluster.Kill: no
// hand-over, the others elect after their timeouts), and brings it back. Properties checked: every
// job ends, and succeeds; the journal audit is clean; replication is still
// 3 everywhere; and no scheduler's or worker's Run returned, since a daemon
// exits only when it is stopped.
package gpuq_test

import (
	"fmt"
	"testing"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natstest"
)

func TestClusterLosesTheCommandLeaderTwice(t *testing.T) {
	t.Parallel()
	cl := natstest.StartCluster(t)
	c := newClusterOn(t, cl.Nodes[0], natsbus.SetupConfig{Replicas: 3})
	c.wantReplicas(3)
	scheds := []*sched{c.startScheduler("s1", schedOpts{}), c.startScheduler("s2", schedOpts{})}
	c.createAccount("a", 100_000)
	workers := []*runningWorker{c.startWorker("h1", workerOpts{gpus: 2}), c.startWorker("h2", workerOpts{gpus: 2})}
	var jobs []string
	submit := func(batch string, n int) {
		t.Helper()
		for i := range n {
			id := fmt.Sprintf("%s-%d", batch, i)
			c.submitThrough("a", id, 1, 10, "sh", "-c", "sleep 0.2")
			jobs = append(jobs, id)
		}
	}
	alive := func(when string) {
		t.Helper()
		for _, s := range scheds {
			s.stillUp(t)
		}
		for _, w := range workers {
			w.stillUp(t)
		}
		if t.Failed() {
			t.Fatalf("a daemon stopped %s", when)
		}
	}
	submit("warm-up", 2)
	c.waitJobs(jobs...)

	var downs []*natstest.Server
	for round := range 2 {
		// Jobs flow: queued behind the four GPUs, running, reporting.
		submit(fmt.Sprintf("round%d-before", round), 6)
		leader := cl.StreamLeader(t, c.n.CmdStream())
		t.Logf("round %d: killing %s, the leader of %s", round, leader.Name(), c.n.CmdStream())
		cl.Kill(t, leader)
		downs = append(downs, leader)
		submit(fmt.Sprintf("round%d-down", round), 6) // with the node away
		wantSucceeded(t, c.waitJobs(jobs...), false)
		alive(fmt.Sprintf("with %s down", leader.Name()))
		if round == 0 {
			leader.Restart(t) // back, with its store; the next round stops whichever leads now
			c.settle(cl)
		}
	}
	downs[1].Restart(t)
	c.settle(cl)
	submit("after", 4)
	wantSucceeded(t, c.waitJobs(jobs...), false)
	alive("after both nodes came back")
	// A scheduler started now without --replicas sets up as gpuq
	// scheduler does: it must adopt R3, not lower it.
	if err := natsbus.Setup(c.ctx(), c.js, c.n, natsbus.SetupConfig{}); err != nil {
		t.Fatalf("setup without a replication factor: %v", err)
	}
	c.wantReplicas(3)
	c.settle(cl)
	c.audit()
}

func TestWorkerTakesOrdersAfterItsStreamNodeGoes(t *testing.T) {
	t.Parallel()
	cl := natstest.StartCluster(t)
	c := newClusterOn(t, cl.Nodes[0], natsbus.SetupConfig{Replicas: 3})
	s := c.startScheduler("s1", schedOpts{})
	c.createAccount("a", 1000)
	w := c.startWorker("h1", workerOpts{gpus: 1})
	c.submitThrough("a", "first", 1, 1, "true")
	wantSucceeded(t, c.waitJobs("first"), true)

	// Each round kills the node that leads the worker's consumer. In the
	// first the worker is connected elsewhere: its connection stays up,
	// its pull request dies with the node, and the new leader tells it
	// so. In the second the node is also the worker's server: the worker
	// reconnects to another node and asks for orders again, perhaps
	// before a new leader is elected.
	cons := natsbus.ConsumerName("h1")
	for round, onItsServer := range []bool{false, true} {
		leader := cl.ConsumerLeader(t, c.n.DispatchStream(), cons)
		for range 20 {
			if (leader.Name() == w.nc.ConnectedServerName()) == onItsServer {
				break
			}
			if err := leader.JetStreamStepdownConsumer(natstest.Account, c.n.DispatchStream(), cons); err != nil {
				t.Fatal(err)
			}
			leader = cl.ConsumerLeader(t, c.n.DispatchStream(), cons)
		}
		if (leader.Name() == w.nc.ConnectedServerName()) != onItsServer {
			t.Fatalf("round %d: cannot move the leadership of %s on or off %s, the worker's server", round, cons, w.nc.ConnectedServerName())
		}
		t.Logf("round %d: killing %s, the leader of consumer %s; the worker is connected to %s",
			round, leader.Name(), cons, w.nc.ConnectedServerName())
		cl.Kill(t, leader)
		job := fmt.Sprintf("after-loss-%d", round)
		c.submitThrough("a", job, 1, 1, "true")
		wantSucceeded(t, c.waitJobs(job), true)
		w.stillUp(t)
		s.stillUp(t)
		if t.Failed() {
			t.FailNow()
		}
		leader.Restart(t)
		c.settle(cl)
	}
	c.submitThrough("a", "after-return", 1, 1, "true")
	wantSucceeded(t, c.waitJobs("after-return"), true)
	w.stillUp(t)
	s.stillUp(t)
	c.wantReplicas(3)
	c.settle(cl)
	c.audit()
}
