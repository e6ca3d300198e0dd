package gpuq_test

// A seeded fault campaign over the real daemons: two schedulers and three
// workers on simulated GPUs against one embedded nats-server, jobs flowing
// from three accounts, while one seeded PRNG kills the leader, a standby or
// a worker (restarted on its own state directory), restarts the server,
// republishes submissions and forges reports. After the faults stop and
// every job settles it checks what must hold under every fault:
//
//   - every job is final;
//   - each account is charged exactly the costs of its succeeded jobs, and
//     holds no reservation;
//   - no job's command ran twice for one attempt, nor for an attempt that
//     was no longer current when it started;
//   - the journal recomputes every balance (audit);
//   - no daemon's Run returned unless the campaign stopped it.
//
// The seed is printed; -campaign.seed replays a run and -campaign.duration
// makes it longer (the CI default is short).

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/wire"
)

var (
	campaignSeed     = flag.Uint64("campaign.seed", 0, "seed of TestFaultCampaign (0: from the clock)")
	campaignDuration = flag.Duration("campaign.duration", 40*time.Second, "how long TestFaultCampaign injects faults")
)

// fault is one kind of trouble the campaign makes, with its weight.
type fault struct {
	name   string
	weight int
	do     func(*campaign)
}

type campaign struct {
	t       *testing.T
	c       *cluster
	rng     *rand.Rand
	markers string
	scheds  []*sched
	workers map[string]*runningWorker
	dirs    map[string]string // a worker's state dir, kept across restarts
	down    map[string]int    // a crashed worker's host -> steps until it restarts
	jobs    []campaignJob
	subs    []wire.Message // submissions published, for duplicates
	next    int            // the next scheduler name's number
	counts  map[string]int
	// takeovers are how long the cluster was without a leader after each
	// leader kill or server restart.
	takeovers []time.Duration
}

type campaignJob struct {
	account, id string
	cost        ledger.Credits
}

func TestFaultCampaign(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" {
		t.Skip("the jobs' marker lines take their start time from GNU date's %N")
	}
	seed := *campaignSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("fault campaign seed %d (replay: go test -run TestFaultCampaign -campaign.seed=%d .)", seed, seed)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fault campaign seed %d failed; replay with -campaign.seed=%d", seed, seed)
		}
	})
	k := &campaign{t: t, c: newCluster(t), rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), markers: t.TempDir(),
		workers: map[string]*runningWorker{}, dirs: map[string]string{}, down: map[string]int{}, counts: map[string]int{}}
	accounts := []string{"a0", "a1", "a2"}
	const balance = 1_000_000
	for range 2 {
		k.startScheduler()
	}
	for _, a := range accounts {
		k.c.createAccount(a, balance)
	}
	for _, h := range []string{"w0", "w1", "w2"} {
		k.dirs[h] = t.TempDir()
		k.startWorker(h)
	}
	faults := []fault{
		{"submit", 40, func(k *campaign) { k.submit(accounts) }},
		{"duplicate", 6, (*campaign).duplicate},
		{"forged_report", 6, (*campaign).forge},
		{"kill_leader", 3, (*campaign).killLeader},
		{"kill_standby", 2, (*campaign).killStandby},
		{"kill_worker", 3, (*campaign).killWorker},
		{"restart_server", 1, (*campaign).restartServer},
	}
	total := 0
	for _, f := range faults {
		total += f.weight
	}
	end := time.Now().Add(*campaignDuration)
	half := time.Now().Add(*campaignDuration / 2)
	for time.Now().Before(end) {
		k.reviveWorkers(false)
		if time.Now().After(half) && k.counts["restart_server"] == 0 {
			// Every run has at least one outage, whatever the seed draws.
			k.restartServer()
			k.counts["restart_server"]++
			continue
		}
		pick := k.rng.IntN(total)
		for _, f := range faults {
			if pick < f.weight {
				f.do(k)
				k.counts[f.name]++
				break
			}
			pick -= f.weight
		}
		time.Sleep(time.Duration(20+k.rng.IntN(120)) * time.Millisecond)
	}
	k.reviveWorkers(true)
	k.settle()
	k.check(balance, accounts)
}

func (k *campaign) startScheduler() {
	k.t.Helper()
	name := fmt.Sprintf("s%d", k.next)
	k.next++
	k.scheds = append(k.scheds, k.c.startScheduler(name, schedOpts{core: scheduler.CoreConfig{
		LostAfter: 2 * time.Second, StartTimeout: 5 * time.Second}}))
}

func (k *campaign) startWorker(host string) {
	k.t.Helper()
	k.workers[host] = k.c.startWorker(host, workerOpts{gpus: 2, stateDir: k.dirs[host], ackWait: 5 * time.Second})
}

// submit submits a job that records each run of its command (job, attempt,
// start time) in a marker file, then sleeps and exits 0, or 1 one time in
// five.
func (k *campaign) submit(accounts []string) {
	k.t.Helper()
	j := campaignJob{account: accounts[k.rng.IntN(len(accounts))], id: fmt.Sprintf("job-%d", len(k.jobs)),
		cost: ledger.Credits(1 + k.rng.IntN(50))}
	code := 0
	if k.rng.IntN(5) == 0 {
		code = 1
	}
	script := fmt.Sprintf(`echo "$GPUQ_JOB_ID $GPUQ_ATTEMPT $(date +%%s%%N)" >> %s/$GPUQ_JOB_ID; sleep 0.%d; exit %d`,
		k.markers, 1+k.rng.IntN(4), code)
	s := ledger.Submit{Account: j.account, ID: j.id, GPUs: 1 + k.rng.IntN(2), Cost: j.cost,
		Command: []string{"sh", "-c", script}, Walltime: time.Minute, MaxAttempts: 10}
	msg, err := wire.EncodeSubmit(k.c.n, s)
	if err != nil {
		k.t.Fatal(err)
	}
	// Published as a pipeline would, without waiting for the answer: a
	// leader may be down, and the command is in the log either way.
	k.c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
	k.jobs = append(k.jobs, j)
	k.subs = append(k.subs, msg)
}

// duplicate publishes an earlier submission again, with its id (a retried
// publish) or with another (the same terms past the window).
func (k *campaign) duplicate() {
	if len(k.subs) == 0 {
		return
	}
	msg := k.subs[k.rng.IntN(len(k.subs))]
	if k.rng.IntN(2) == 0 {
		msg = wire.WithNonce(msg, strconv.Itoa(k.rng.Int()))
	}
	k.c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
}

// forge publishes a report no worker sent: from a host that does not exist,
// or for an attempt that is not the job's.
func (k *campaign) forge() {
	if len(k.jobs) == 0 {
		return
	}
	j := k.jobs[k.rng.IntN(len(k.jobs))]
	r := ledger.Report{Host: "forger", Job: j.id, Attempt: 1, Type: ledger.ReportDone, ExitCode: 0, Runtime: time.Second}
	switch k.rng.IntN(3) {
	case 0:
		r.Host, r.Attempt = fmt.Sprintf("w%d", k.rng.IntN(3)), 50+k.rng.IntN(10)
	case 1:
		r.Type, r.Devices, r.Runtime = ledger.ReportStarted, []string{"GPU-forged"}, 0
	}
	msg, err := wire.EncodeReport(k.c.n, r)
	if err != nil {
		k.t.Fatal(err)
	}
	k.c.publishRaw(msg.Subject, msg.MsgID, msg.Data)
}

// leader returns the index of the scheduler in a term, or -1.
func (k *campaign) leader() int {
	for i, s := range k.scheds {
		if s.leading.Load() > s.ended.Load() {
			return i
		}
	}
	return -1
}

func (k *campaign) killLeader() {
	i := k.leader()
	if i < 0 {
		return
	}
	start := time.Now()
	k.kill(i)
	k.startScheduler()
	k.waitTakeover(start)
}

func (k *campaign) killStandby() {
	l := k.leader()
	for i := range k.scheds {
		if i != l {
			k.kill(i)
			k.startScheduler()
			return
		}
	}
}

// kill stops scheduler i as a killed process would: its connection goes
// first, so nothing more reaches the server. It fails the test if the
// scheduler had already returned on its own.
func (k *campaign) kill(i int) {
	k.t.Helper()
	s := k.scheds[i]
	s.stillUp(k.t)
	s.nc.Close()
	// A scheduler that sees its connection closed for good before the
	// cancel reaches it stops on that, as it should: that is no failure.
	if err := s.stop(k.t); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, jetstream.ErrConnectionClosed) {
		k.t.Errorf("killed scheduler %s: Run returned %v", s.name, err)
	}
	k.scheds = append(k.scheds[:i], k.scheds[i+1:]...)
}

// waitTakeover waits until a scheduler leads and records how long the
// cluster went without a leader since the fault at start.
func (k *campaign) waitTakeover(start time.Time) {
	k.t.Helper()
	for k.leader() < 0 {
		if time.Since(start) > 30*time.Second {
			k.t.Fatalf("no scheduler led within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	k.takeovers = append(k.takeovers, time.Since(start))
}

func (k *campaign) killWorker() {
	var live []string
	for h := range k.workers {
		live = append(live, h)
	}
	if len(live) <= 1 {
		return // keep one host, so jobs keep ending
	}
	sort.Strings(live)
	h := live[k.rng.IntN(len(live))]
	w := k.workers[h]
	w.stillUp(k.t)
	w.crash(k.t)
	delete(k.workers, h)
	k.down[h] = 3 + k.rng.IntN(40) // it comes back after that many steps, often past LostAfter
}

// reviveWorkers restarts crashed workers whose time has come, or all of
// them.
func (k *campaign) reviveWorkers(all bool) {
	hosts := make([]string, 0, len(k.down))
	for h := range k.down {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		if k.down[h]--; k.down[h] <= 0 || all {
			delete(k.down, h)
			k.startWorker(h)
		}
	}
}

// restartServer stops the server for 1.2s to 3s, longer than the lease and
// the heartbeat TTL (1s each), and starts it again on the same port and
// data.
func (k *campaign) restartServer() {
	k.t.Helper()
	start := time.Now()
	k.c.srv.Stop()
	time.Sleep(time.Duration(1200+k.rng.IntN(1800)) * time.Millisecond)
	k.c.srv.Restart(k.t)
	k.waitTakeover(start)
}

// settle waits until every job is final.
func (k *campaign) settle() {
	k.t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for _, j := range k.jobs {
		for {
			rec, err := k.c.c.Job(k.c.ctx(), j.id)
			if err == nil && rec.State.Terminal() {
				break
			}
			if time.Now().After(deadline) {
				k.t.Fatalf("job %s not final 3m after the faults stopped: %+v, %v", j.id, rec, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// run is one start of a job's command, as its marker file recorded it.
type run struct {
	attempt int
	at      time.Time
}

func (k *campaign) runs(job string) []run {
	k.t.Helper()
	f, err := os.Open(filepath.Join(k.markers, job))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		k.t.Fatal(err)
	}
	defer f.Close()
	var out []run
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || fields[0] != job {
			k.t.Errorf("marker of %s: bad line %q", job, sc.Text())
			continue
		}
		n, err1 := strconv.Atoi(fields[1])
		ns, err2 := strconv.ParseInt(fields[2], 10, 64)
		if err1 != nil || err2 != nil {
			k.t.Errorf("marker of %s: bad line %q", job, sc.Text())
			continue
		}
		out = append(out, run{attempt: n, at: time.Unix(0, ns)})
	}
	if err := sc.Err(); err != nil {
		k.t.Fatal(err)
	}
	return out
}

func (k *campaign) check(balance ledger.Credits, accounts []string) {
	k.t.Helper()
	owed := map[string]ledger.Credits{}
	outcomes := map[ledger.JobState]int{}
	retried, staleRuns := 0, 0
	for _, j := range k.jobs {
		rec, err := k.c.c.Job(k.c.ctx(), j.id)
		if err != nil {
			k.t.Fatalf("job %s: %v", j.id, err)
		}
		outcomes[rec.State]++
		retried += max(len(rec.Attempts())-1, 0)
		if rec.State == ledger.StateSucceeded {
			owed[j.account] += j.cost
		}
		// Every run is of an attempt the job had, once, and began before
		// that attempt ended: a run that began later was started for an
		// attempt that was no longer current.
		seen := map[int]bool{}
		for _, r := range k.runs(j.id) {
			if seen[r.attempt] {
				k.t.Errorf("job %s: attempt %d ran twice", j.id, r.attempt)
			}
			seen[r.attempt] = true
			var att *ledger.Attempt
			for i := range rec.Attempts() {
				if rec.Attempts()[i].N == r.attempt {
					att = &rec.Attempts()[i]
				}
			}
			switch {
			case att == nil:
				k.t.Errorf("job %s: attempt %d ran but the job has no such attempt: %+v", j.id, r.attempt, rec.Attempts())
			case r.at.After(att.EndedAt):
				staleRuns++
				k.t.Errorf("job %s: attempt %d started at %v, after it ended at %v (%s)", j.id, r.attempt,
					r.at.Format(time.StampMicro), att.EndedAt.Format(time.StampMicro), att.Reason)
			}
		}
		if rec.State == ledger.StateSucceeded && !seen[rec.Attempt] {
			k.t.Errorf("job %s succeeded in attempt %d, which never ran", j.id, rec.Attempt)
		}
	}
	for _, a := range accounts {
		acct, err := k.c.c.Account(k.c.ctx(), a)
		if err != nil {
			k.t.Fatal(err)
		}
		if acct.Balance != balance-owed[a] || acct.Reserved != 0 {
			k.t.Errorf("account %s: balance %d reserved %d, want %d and 0 (charged exactly its succeeded jobs)",
				a, acct.Balance, acct.Reserved, balance-owed[a])
		}
	}
	k.c.audit()
	for _, s := range k.scheds {
		s.stillUp(k.t)
	}
	for _, w := range k.workers {
		w.stillUp(k.t)
	}
	var longest, sum time.Duration
	for _, d := range k.takeovers {
		longest, sum = max(longest, d), sum+d
	}
	mean := time.Duration(0)
	if len(k.takeovers) > 0 {
		mean = sum / time.Duration(len(k.takeovers))
	}
	k.t.Logf("fault campaign: %d jobs (%d succeeded, %d failed, %d cancelled), %d retried attempts, %d stale runs; "+
		"faults %v; %d takeovers, mean %v, longest %v", len(k.jobs), outcomes[ledger.StateSucceeded], outcomes[ledger.StateFailed],
		outcomes[ledger.StateCancelled], retried, staleRuns, k.counts, len(k.takeovers), mean.Round(time.Millisecond), longest.Round(time.Millisecond))
}
