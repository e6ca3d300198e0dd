package gpuq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/natstest"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Helpers for the tests of outages and of a 3-node cluster: the harness of
// harness_test.go over a server the test stops and restarts, or over a node
// of a natstest.Cluster (whose connections go to every node, so schedulers,
// workers and the client fail over as in a real deployment); reads that
// wait out a fail-over; and checks that no daemon's Run returned.

// newClusterOn builds the harness on srv, with gpuq's streams and buckets
// set up with cfg: srv is a single server (natstest.Start) or a node of a
// natstest.Cluster.
func newClusterOn(t testing.TB, srv *natstest.Server, cfg natsbus.SetupConfig) *cluster {
	t.Helper()
	nc, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := subjects.Default
	if err := natsbus.Setup(ctx, js, n, cfg); err != nil {
		t.Fatalf("setup: %v", err)
	}
	lkv, err := js.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	hkv, err := js.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(nc, client.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, srv: srv, nc: nc, js: js, n: n, c: c, ledger: lkv, hosts: hkv}
}

// allStreams names every stream of the installation, buckets' included.
func (c *cluster) allStreams() []string {
	var out []string
	for _, s := range c.n.Streams() {
		out = append(out, s.Name)
	}
	return append(out, "KV_"+c.n.LedgerBucket(), "KV_"+c.n.HostsBucket())
}

// wantReplicas fails the test unless every stream and bucket is configured
// with r replicas.
func (c *cluster) wantReplicas(r int) {
	c.t.Helper()
	for _, name := range c.allStreams() {
		s, err := c.js.Stream(c.ctx(), name)
		if err != nil {
			c.t.Fatalf("stream %s: %v", name, err)
		}
		if got := s.CachedInfo().Config.Replicas; got != r {
			c.t.Errorf("%s has %d replicas, want %d", name, got, r)
		}
	}
}

// stillUp fails the test if the scheduler's Run has returned: a daemon
// exits only when it is stopped.
func (s *sched) stillUp(t testing.TB) {
	t.Helper()
	select {
	case err, ok := <-s.done:
		if ok {
			close(s.done) // as wait does, so the cleanup does not wait again
			t.Errorf("scheduler %s's Run returned while the test ran: %v", s.name, err)
		}
	default:
	}
}

// stillUp fails the test if the worker's Run has returned.
func (rw *runningWorker) stillUp(t testing.TB) {
	t.Helper()
	select {
	case err, ok := <-rw.done:
		if ok {
			close(rw.done) // as stop does
			t.Errorf("worker %s's Run returned while the test ran: %v", rw.host, err)
		}
	default:
	}
}

// failOverWait bounds every wait of these tests for the system to recover.
const failOverWait = 40 * time.Second

// submitThrough submits a job running command as submitCmd does, but tries
// again while the servers fail over (a lost publish, an answer that did not
// come): the same id with the same terms is the same job, and a try whose
// earlier one was stored is answered ignored as a duplicate. It fails the
// test on a rejection or when failOverWait passes.
func (c *cluster) submitThrough(account, id string, gpus int, cost ledger.Credits, command ...string) wire.JobEvent {
	c.t.Helper()
	deadline := time.Now().Add(failOverWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := c.c.Submit(ctx, ledger.Submit{Account: account, ID: id, GPUs: gpus, Cost: cost,
			Command: command, Walltime: time.Minute, MaxAttempts: 3})
		cancel()
		var rej *client.RejectedError
		switch {
		case err == nil && (ev.Type == ledger.EventAccepted || ev.Type == ledger.EventIgnored && ev.Reason == ledger.ReasonDuplicate):
			return ev
		case errors.As(err, &rej), err == nil:
			c.t.Fatalf("submit %s: %+v, %v", id, ev, err)
		case time.Now().After(deadline):
			c.t.Fatalf("submit %s: still failing after %v: %v", id, failOverWait, err)
		}
		c.t.Logf("submit %s: %v; trying again", id, err)
		time.Sleep(100 * time.Millisecond)
	}
}

// waitJobs waits until the stored ledger shows every job in a final state,
// reading again when a read fails during a fail-over, and returns them. It
// fails the test after failOverWait, naming the jobs still open.
func (c *cluster) waitJobs(jobs ...string) map[string]*ledger.Job {
	c.t.Helper()
	deadline := time.Now().Add(failOverWait)
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		view, err := natsstore.New(c.js, c.ledger).Load(ctx)
		cancel()
		var open []string
		if err == nil {
			for _, id := range jobs {
				if j := view.State.Jobs[id]; j == nil || !j.State.Terminal() {
					open = append(open, fmt.Sprintf("%s (%s)", id, describe(j)))
				}
			}
			if len(open) == 0 {
				out := make(map[string]*ledger.Job, len(jobs))
				for _, id := range jobs {
					out[id] = view.State.Jobs[id]
				}
				return out
			}
		}
		lastErr = err
		if time.Now().After(deadline) {
			c.t.Fatalf("after %v, jobs still open: %s; last read error: %v", failOverWait, strings.Join(open, ", "), lastErr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func describe(j *ledger.Job) string {
	if j == nil {
		return "not in the ledger"
	}
	return fmt.Sprintf("%s, attempt %d on %q", j.State, j.Attempt, j.Host())
}

// wantSucceeded fails the test unless every job succeeded, on its first
// attempt when firstAttempt is set.
func wantSucceeded(t testing.TB, jobs map[string]*ledger.Job, firstAttempt bool) {
	t.Helper()
	for id, j := range jobs {
		switch {
		case j.State != ledger.StateSucceeded:
			t.Errorf("job %s: %s, want succeeded", id, describe(j))
		case firstAttempt && j.Attempt != 1:
			t.Errorf("job %s: %s, want succeeded on attempt 1", id, describe(j))
		}
	}
}

// settle waits until every running node is current on every stream, so
// that the reads of audit see the whole history: its readers are served by
// any replica, and one that lags shows a journal or a ledger from the past.
func (c *cluster) settle(cl *natstest.Cluster) {
	c.t.Helper()
	cl.WaitCurrent(c.t, c.allStreams()...)
}
