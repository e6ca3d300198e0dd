package gpuq_test

// The security suite: a real server started from deploy/nats-server.conf,
// the scheduler, a real worker on simulated GPUs, and a connection per role
// (the admin, tenants vision and nlp, the workers of gpu-host-1 and
// gpu-host-2), each an nkey user in its own NATS account. Each probe replays
// an attack of issue 10 with nats.go directly and checks that it is refused
// or harmless: the victim's ledger unchanged, the scheduler still folding (a
// fresh job runs to success) and the audit clean.
//
// newDeployment is the harness; further probes are further subtests of
// TestSecurity (or tests of their own) that call d.connect, d.client,
// d.submit and d.healthy.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// The users of deploy/nats-server.conf, each in its own account.
const (
	roleScheduler = "scheduler"
	roleAdmin     = "admin"
	roleVision    = "vision"
	roleNLP       = "nlp"
	roleHost1     = "gpu-host-1"
	roleHost2     = "gpu-host-2"
)

var deployRoles = []string{roleScheduler, roleAdmin, roleVision, roleNLP, roleHost1, roleHost2}

// deployment is a server started from deploy/ with gpuq running on it.
type deployment struct {
	t     *testing.T
	ns    *server.Server
	n     subjects.Names
	seeds map[string]string // role → nkey seed file
	log   *slog.Logger
	ctx   context.Context

	sjs    jetstream.JetStream // the scheduler's
	ledger jetstream.KeyValue  // bound by the scheduler
	hosts  jetstream.KeyValue  // bound by the scheduler
	admin  *client.Client
	jobs   int               // fresh job ids handed out by submit
	state  map[string]string // host → its worker's state directory
	pooled bool              // the workers run each attempt under a uid of its own (as root)
}

// deployEnv names the environment variable that carries role's public key.
func deployEnv(role string) string {
	return "GPUQ_" + strings.ToUpper(strings.ReplaceAll(role, "-", "_")) + "_NKEY"
}

// startDeployServer makes an nkey per role, puts the public keys in the
// environment, and starts a server from deploy/nats-server.conf on a
// random port with its store in a temporary directory. Not parallel: the
// config reads its keys from the environment.
func startDeployServer(t *testing.T) (*server.Server, map[string]string) {
	t.Helper()
	seeds := map[string]string{}
	dir := t.TempDir()
	for _, role := range deployRoles {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, err := kp.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		seed, err := kp.Seed()
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(dir, role+".nk")
		if err := os.WriteFile(file, seed, 0o600); err != nil {
			t.Fatal(err)
		}
		seeds[role] = file
		t.Setenv(deployEnv(role), pub)
	}
	opts, err := server.ProcessConfigFile("deploy/nats-server.conf")
	if err != nil {
		t.Fatalf("parse deploy/nats-server.conf: %v", err)
	}
	opts.Host, opts.Port, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, t.TempDir(), true, true
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	return ns, seeds
}

// newDeployment starts the server, the scheduler and the worker of
// gpu-host-1 (two simulated H100s), and creates accounts vision and nlp
// with 1000 credits each. Options adjust the scheduler's configuration.
func newDeployment(t *testing.T, opts ...func(*scheduler.Config)) *deployment {
	t.Helper()
	ns, seeds := startDeployServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	d := &deployment{t: t, ns: ns, n: subjects.Default, seeds: seeds, ctx: ctx, state: map[string]string{},
		log: slog.New(slog.NewTextHandler(tOutput{t, "deploy"}, &slog.HandlerOptions{Level: slog.LevelWarn}))}

	// The scheduler, as user scheduler of account GPUQ.
	d.sjs = d.js(roleScheduler)
	if err := natsbus.Setup(ctx, d.sjs, d.n, natsbus.SetupConfig{}); err != nil {
		t.Fatalf("setup as scheduler: %v", err)
	}
	var err error
	if d.ledger, err = d.sjs.KeyValue(ctx, d.n.LedgerBucket()); err != nil {
		t.Fatalf("scheduler binds the ledger bucket: %v", err)
	}
	if d.hosts, err = d.sjs.KeyValue(ctx, d.n.HostsBucket()); err != nil {
		t.Fatalf("scheduler binds the hosts bucket: %v", err)
	}
	lease, err := natsstore.NewLease(d.sjs, d.ledger, "s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	facts, err := d.sjs.KeyValue(ctx, d.n.FactsBucket())
	if err != nil {
		t.Fatalf("scheduler binds the facts bucket: %v", err)
	}
	cfg := scheduler.Config{Store: natsstore.New(d.sjs, d.ledger), Lease: lease, CommandLog: natsbus.NewCommandLog(d.sjs, d.n),
		Publisher: natsbus.NewPublisher(d.sjs), Hosts: natsbus.NewHosts(d.hosts, d.log), Logger: d.log, DecideInterval: 20 * time.Millisecond,
		Facts: natsbus.NewFacts(facts), FactInterval: 20 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	svc, err := scheduler.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(sctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("scheduler: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the scheduler did not stop within 10s")
		}
	})

	d.startWorker(roleHost1)
	d.admin = d.client(roleAdmin)
	for _, acct := range []string{roleVision, roleNLP} {
		if _, err := d.admin.Admin(ctx, ledger.Admin{Account: acct, ID: "create-" + acct, Op: ledger.OpCreate, Balance: 1000}); err != nil {
			t.Fatalf("admin creates account %s: %v", acct, err)
		}
	}
	return d
}

// connect opens a connection as role, the way gpuq --nkey FILE
// --inbox-prefix _INBOX_<user> does. errs receives its asynchronous errors
// (permission violations).
func (d *deployment) connect(role string) (*nats.Conn, <-chan error) {
	d.t.Helper()
	errs := make(chan error, 64)
	nkey, err := nats.NkeyOptionFromSeed(d.seeds[role])
	if err != nil {
		d.t.Fatal(err)
	}
	opts := []nats.Option{nkey, nats.Name(role), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})}
	if role != roleScheduler {
		opts = append(opts, nats.CustomInboxPrefix("_INBOX_"+role))
	}
	nc, err := nats.Connect(d.ns.ClientURL(), opts...)
	if err != nil {
		d.t.Fatalf("connect as %s: %v", role, err)
	}
	d.t.Cleanup(nc.Close)
	return nc, errs
}

func (d *deployment) js(role string) jetstream.JetStream {
	d.t.Helper()
	nc, _ := d.connect(role)
	js, err := jetstream.New(nc)
	if err != nil {
		d.t.Fatal(err)
	}
	return js
}

func (d *deployment) client(role string) *client.Client {
	d.t.Helper()
	nc, _ := d.connect(role)
	c, err := client.New(nc, client.WithTimeout(20*time.Second))
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

// deployPools spreads apart the job uid pools of concurrent test
// processes: a worker kills every process of its pool's uids at start.
var deployPools = uint32(400000 + rand.IntN(100000)*16)

// startWorker runs the worker of host, as its own user, on two simulated
// H100s, until the test ends. Where the test runs as root, the worker runs
// each attempt under a uid of its own, as gpuq worker does as root.
func (d *deployment) startWorker(host string) {
	d.t.Helper()
	var pool worker.IDRange
	if os.Geteuid() == 0 {
		deployPools += 16
		pool, d.pooled = worker.IDRange{First: deployPools, Last: deployPools + 15}, true
	}
	d.state[host] = d.t.TempDir()
	wjs := d.js(host)
	wb, err := natsbus.NewWorkerBus(wjs, d.n, host, nil)
	if err != nil {
		d.t.Fatalf("worker bus: %v", err)
	}
	gpu, err := nvmlgpu.Simulate(host, "dgxh100", 2)
	if err != nil {
		d.t.Fatal(err)
	}
	w, err := worker.New(worker.Config{Host: host, GPU: gpu, Bus: wb, Logger: d.log, StateDir: d.state[host], JobUIDs: pool,
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: time.Second})
	if err != nil {
		d.t.Fatal(err)
	}
	wctx, stop := context.WithCancel(d.ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	d.t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			d.t.Errorf("worker %s: %v", host, err)
		}
		_ = gpu.Close() // test teardown
	})
}

// short is a context for a call that must be refused: it ends soon.
func (d *deployment) short() context.Context {
	c, cancel := context.WithTimeout(d.ctx, 500*time.Millisecond)
	d.t.Cleanup(cancel)
	return c
}

// submit submits a fresh one-GPU job of account through c, running
// command, and returns its id once it has succeeded.
func (d *deployment) submit(c *client.Client, account string, command ...string) string {
	d.t.Helper()
	d.jobs++
	id := fmt.Sprintf("%s-job-%d", account, d.jobs)
	ev, err := c.Submit(d.ctx, ledger.Submit{Account: account, ID: id, GPUs: 1, Cost: 10, Command: command})
	if err != nil {
		d.t.Fatalf("submit %s: %+v, %v", id, ev, err)
	}
	final, err := c.Wait(d.ctx, account, id, ev.Seq)
	if err != nil || final.Type != ledger.EventSucceeded {
		d.t.Fatalf("job %s: %+v, %v", id, final, err)
	}
	return id
}

// account reads account id's record, as the admin.
func (d *deployment) account(id string) ledger.Account {
	d.t.Helper()
	a, err := d.admin.Account(d.ctx, id)
	if err != nil {
		d.t.Fatalf("admin reads account %s: %v", id, err)
	}
	return *a
}

// healthy checks what every probe must leave behind: victim's balance and
// reservations as they were, a scheduler that still folds (a fresh job of
// vision runs to success on gpu-host-1) and an audit without differences.
func (d *deployment) healthy(victim string, before ledger.Account) {
	d.t.Helper()
	if after := d.account(victim); after.Balance != before.Balance || after.Reserved != before.Reserved {
		d.t.Errorf("account %s moved: balance %d → %d, reserved %d → %d", victim, before.Balance, after.Balance, before.Reserved, after.Reserved)
	}
	vision := d.client(roleVision)
	d.submit(vision, roleVision, "true")
	if diffs := d.audit(); len(diffs) > 0 {
		d.t.Errorf("audit after the probe: %v", diffs)
	}
}

// audit does what gpuq audit and gpuq audit --full do, as the admin: it
// loads the ledger view, reads the journal (whole, and from each account's
// newest seal) and checks every account's chain and balances against it as
// of its checkpoint. It returns the differences.
func (d *deployment) audit() []string {
	d.t.Helper()
	ajs := d.js(roleAdmin)
	kv, err := ajs.KeyValue(d.ctx, d.n.LedgerBucket())
	if err != nil {
		d.t.Fatalf("admin binds the ledger: %v", err)
	}
	view, err := natsstore.New(ajs, kv).Load(d.ctx)
	if err != nil {
		d.t.Fatalf("admin loads the ledger view: %v", err)
	}
	admin := d.client(roleAdmin)
	j, err := admin.Journal(d.ctx, time.Time{})
	if err != nil {
		d.t.Fatalf("admin reads the journal: %v", err)
	}
	diffs := append([]string{}, j.Bad...)
	_, errs := ledger.AuditJournal(view.State, view.Checkpoint, j.Chained, j.Legacy)
	for _, err := range errs {
		diffs = append(diffs, err.Error())
	}
	// And as gpuq audit does by default: from each account's newest seal.
	j, err = admin.JournalFromSeals(d.ctx, view.State, view.Checkpoint, client.SealMargin)
	if err != nil {
		d.t.Fatalf("admin reads the journal from the seals: %v", err)
	}
	for _, b := range j.Bad {
		diffs = append(diffs, "from seals: "+b)
	}
	_, errs = ledger.AuditJournal(view.State, view.Checkpoint, j.Chained, j.Legacy)
	for _, err := range errs {
		diffs = append(diffs, "from seals: "+err.Error())
	}
	if err := view.State.CheckInvariants(); err != nil {
		diffs = append(diffs, err.Error())
	}
	return diffs
}

// refusedErr waits for a permission violation on errs.
func refusedErr(t *testing.T, errs <-chan error, what string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) {
			t.Errorf("%s: %v, want a permissions violation", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s: no permissions violation within 5s", what)
	}
}

// streamInfoMark is in the body of every stream info answer: a value that
// holds it is a server answer that landed where it was aimed.
const streamInfoMark = "io.nats.jetstream.api.v1.stream_info_response"

func TestSecurity(t *testing.T) {
	d := newDeployment(t)
	vision, nlp := d.client(roleVision), d.client(roleNLP)
	nlpJob := d.submit(nlp, roleNLP, "sh", "-c", "echo nlp-secret")
	visionJob := d.submit(vision, roleVision, "sh", "-c", "echo vision-output")

	t.Run("ReplySubjectInjection", func(t *testing.T) {
		before := d.account(roleNLP)
		vnc, _ := d.connect(roleVision)
		targets := []string{
			subjects.KVSubject(d.n.LedgerBucket(), subjects.LeaderKey),
			subjects.KVSubject(d.n.LedgerBucket(), subjects.AccountKey(roleNLP)),
			subjects.KVSubject(d.n.LedgerBucket(), subjects.JobKey(nlpJob)),
			subjects.KVSubject(d.n.LedgerBucket(), subjects.CheckpointKey),
			d.n.Submit(roleNLP),
		}
		for _, reply := range targets {
			if err := vnc.PublishRequest("$JS.API.STREAM.INFO."+"KV_"+d.n.LedgerBucket(), reply, nil); err != nil {
				t.Fatal(err)
			}
		}
		// The same request with a reply the tenant reads: answers flow, and
		// the ones above were handled before this one was.
		if m, err := vnc.Request("$JS.API.STREAM.INFO.KV_"+d.n.LedgerBucket(), nil, 5*time.Second); err != nil || !strings.Contains(string(m.Data), streamInfoMark) {
			t.Fatalf("the control request: %v", err)
		}
		for _, key := range []string{subjects.LeaderKey, subjects.AccountKey(roleNLP), subjects.JobKey(nlpJob), subjects.CheckpointKey} {
			e, err := d.ledger.Get(d.ctx, key)
			if err != nil {
				t.Errorf("ledger key %s: %v", key, err)
			} else if strings.Contains(string(e.Value()), streamInfoMark) {
				t.Errorf("ledger key %s now holds a stream info answer", key)
			}
		}
		cmd, err := d.sjs.Stream(d.ctx, d.n.CmdStream())
		if err != nil {
			t.Fatal(err)
		}
		if m, err := cmd.GetLastMsgForSubject(d.ctx, d.n.Submit(roleNLP)); err == nil && strings.Contains(string(m.Data), streamInfoMark) {
			t.Error("a stream info answer landed on nlp's submit subject")
		}
		d.healthy(roleNLP, before)
	})

	t.Run("ReadOtherInboxes", func(t *testing.T) {
		before := d.account(roleNLP)
		for _, inbox := range []string{"_INBOX.>", "_INBOX_nlp.>", ">"} {
			vnc, errs := d.connect(roleVision)
			if _, err := vnc.SubscribeSync(inbox); err != nil {
				t.Fatal(err)
			}
			if err := vnc.Flush(); err != nil {
				t.Fatal(err)
			}
			refusedErr(t, errs, "vision subscribes to "+inbox)
		}
		d.healthy(roleNLP, before)
	})

	t.Run("ReadOtherAccountsLogs", func(t *testing.T) {
		before := d.account(roleNLP)
		vjs := d.js(roleVision)
		if _, err := vjs.OrderedConsumer(d.short(), d.n.LogsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{d.n.JobLogs(roleNLP, nlpJob)}}); err == nil {
			t.Error("vision opened a reader of nlp's job output")
		}
		for _, filter := range []string{d.n.LogFilter(), d.n.Prefix() + ".log.>"} {
			if _, err := vjs.OrderedConsumer(d.short(), d.n.LogsStream(), jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{filter}}); err == nil {
				t.Errorf("vision opened a reader of %s", filter)
			}
		}
		// Its own job's output it reads.
		if out := readLogs(t, vjs, d.n, roleVision, visionJob, roleHost1); out != "vision-output\n" {
			t.Errorf("vision reads its own job's output: %q", out)
		}
		d.healthy(roleNLP, before)
	})

	t.Run("WorkerWritesAnotherHostsLog", func(t *testing.T) {
		before := d.account(roleVision)
		h2 := d.js(roleHost2)
		forged := nats.NewMsg(d.n.Log(roleVision, visionJob, roleHost1))
		forged.Header.Set(subjects.LogAttemptHeader, "1")
		forged.Header.Set(subjects.LogSeqHeader, "1")
		forged.Data = []byte("forged by gpu-host-2\n")
		if _, err := h2.PublishMsg(d.short(), forged); err == nil {
			t.Error("gpu-host-2 stored a chunk tagged gpu-host-1")
		}
		// Under its own host it may write, and a reader of the attempt,
		// which ran on gpu-host-1, never sees it.
		forged.Subject = d.n.Log(roleVision, visionJob, roleHost2)
		if _, err := h2.PublishMsg(d.ctx, forged); err != nil {
			t.Fatalf("gpu-host-2 writes a chunk under its own host: %v", err)
		}
		if out := readLogs(t, d.js(roleVision), d.n, roleVision, visionJob, roleHost1); out != "vision-output\n" {
			t.Errorf("the attempt's output as its reader sees it: %q", out)
		}
		d.healthy(roleVision, before)
	})

	t.Run("OtherAccountsEventConsumer", func(t *testing.T) {
		before := d.account(roleNLP)
		njs := d.js(roleNLP)
		cons, err := njs.OrderedConsumer(d.ctx, d.n.EventsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{d.n.AccountEvents(roleNLP)}, NamePrefix: client.ConsumerName()})
		if err != nil {
			t.Fatalf("nlp reads its events: %v", err)
		}
		name := cons.CachedInfo().Name
		vjs := d.js(roleVision)
		if err := vjs.DeleteConsumer(d.short(), d.n.EventsStream(), name); err == nil {
			t.Error("vision deleted nlp's event consumer")
		}
		if _, err := vjs.Consumer(d.short(), d.n.EventsStream(), name); err == nil {
			t.Error("vision bound nlp's event consumer")
		}
		s, err := vjs.Stream(d.short(), d.n.EventsStream())
		if err == nil {
			names := s.ConsumerNames(d.short())
			for n := range names.Name() {
				t.Errorf("vision listed consumer %s", n)
			}
		}
		// vision cannot make its own reader of nlp's events either.
		if _, err := vision.Watch(d.short(), roleNLP, nlpJob, 0, nil); err == nil {
			t.Error("vision watched nlp's job")
		}
		// nlp's consumer still works.
		it, err := cons.Messages()
		if err != nil {
			t.Fatal(err)
		}
		defer it.Stop()
		if m, err := it.Next(); err != nil || !strings.HasPrefix(m.Subject(), d.n.Prefix()+".event."+roleNLP+".") {
			t.Errorf("nlp's consumer after the probe: %v", err)
		}
		d.healthy(roleNLP, before)
	})

	t.Run("AdminAndWorkersDispatchConsumer", func(t *testing.T) {
		before := d.account(roleVision)
		anc, _ := d.connect(roleAdmin)
		ajs, err := jetstream.New(anc)
		if err != nil {
			t.Fatal(err)
		}
		consumer := natsbus.ConsumerName(roleHost1)
		if err := ajs.DeleteConsumer(d.short(), d.n.DispatchStream(), consumer); err == nil {
			t.Error("the admin deleted the worker's dispatch consumer")
		}
		if _, err := ajs.Consumer(d.short(), d.n.DispatchStream(), consumer); err == nil {
			t.Error("the admin bound the worker's dispatch consumer")
		}
		if _, err := anc.Request("$JS.API.CONSUMER.MSG.NEXT."+d.n.DispatchStream()+"."+consumer, []byte(`{"batch":1,"expires":100000000}`), 500*time.Millisecond); err == nil {
			t.Error("the admin pulled the worker's orders")
		}
		// Another host's worker cannot either.
		h2 := d.js(roleHost2)
		if err := h2.DeleteConsumer(d.short(), d.n.DispatchStream(), consumer); err == nil {
			t.Error("gpu-host-2 deleted gpu-host-1's dispatch consumer")
		}
		if _, err := h2.CreateOrUpdateConsumer(d.short(), d.n.DispatchStream(), jetstream.ConsumerConfig{
			Durable: consumer, FilterSubject: d.n.Dispatch(roleHost1), AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
			t.Error("gpu-host-2 took over gpu-host-1's dispatch consumer")
		}
		// The worker still runs jobs: healthy runs one on gpu-host-1.
		d.healthy(roleVision, before)
	})

	t.Run("PushConsumerIntoGPUQ", func(t *testing.T) {
		// A tenant may create consumers of its own events, with a body it
		// chooses: here push consumers that would deliver its events onto
		// the lease key and a host's report subject in GPUQ.
		before := d.account(roleNLP)
		vjs := d.js(roleVision)
		targets := map[string]string{"evil-lease": subjects.KVSubject(d.n.LedgerBucket(), subjects.LeaderKey), "evil-report": d.n.Report(roleHost1)}
		for name, deliver := range targets {
			_, err := vjs.CreateOrUpdateConsumer(d.ctx, d.n.EventsStream(), jetstream.ConsumerConfig{Name: name, DeliverSubject: deliver,
				FilterSubject: d.n.AccountEvents(roleVision), AckPolicy: jetstream.AckNonePolicy})
			t.Logf("vision creates push consumer %s onto %s: %v", name, deliver, err)
		}
		d.healthy(roleNLP, before) // runs a job of vision: events to deliver
		s, err := d.sjs.Stream(d.ctx, d.n.EventsStream())
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for ci := range s.ListConsumers(d.ctx).Info() {
			if targets[ci.Name] != "" {
				found++
			}
			if targets[ci.Name] != "" && (ci.PushBound || ci.Delivered.Consumer > 0) {
				t.Errorf("push consumer %s onto %s delivered %d messages", ci.Name, ci.Config.DeliverSubject, ci.Delivered.Consumer)
			}
		}
		if found != len(targets) {
			t.Errorf("found %d of the %d push consumers", found, len(targets))
		}
		if e, err := d.ledger.Get(d.ctx, subjects.LeaderKey); err == nil && strings.Contains(string(e.Value()), `"job"`) {
			t.Errorf("the lease key holds an event: %s", e.Value())
		}
	})

	t.Run("HeartbeatRollup", func(t *testing.T) {
		before := d.account(roleVision)
		// gpu-host-2 has a heartbeat: draining, no GPUs, so nothing is
		// placed on it.
		hb, err := wire.EncodeHeartbeat(wire.Heartbeat{V: 1, Host: roleHost2, Draining: true, Devices: []wire.Device{}, Running: []wire.Running{}, Time: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		h2 := d.js(roleHost2)
		beat := nats.NewMsg(subjects.KVSubject(d.n.HostsBucket(), roleHost2))
		beat.Data = hb
		if _, err := h2.PublishMsg(d.ctx, beat, jetstream.WithMsgTTL(time.Minute)); err != nil {
			t.Fatalf("gpu-host-2 beats: %v", err)
		}
		h1 := d.js(roleHost1)
		rollup := nats.NewMsg(subjects.KVSubject(d.n.HostsBucket(), roleHost1))
		rollup.Header.Set("Nats-Rollup", "all")
		rollup.Data = []byte(`{}`)
		_, err = h1.PublishMsg(d.ctx, rollup)
		t.Logf("gpu-host-1 publishes with Nats-Rollup: all: %v", err)
		if err == nil {
			t.Error("the hosts bucket stored a rollup")
		}
		if _, err := d.hosts.Get(d.ctx, roleHost2); err != nil {
			t.Errorf("gpu-host-2's heartbeat after gpu-host-1's rollup: %v (the hosts bucket must refuse rollups)", err)
		}
		// gpu-host-2 leaves, as its worker does (the scheduler may not
		// write heartbeats).
		kv2, err := h2.KeyValue(d.ctx, d.n.HostsBucket())
		if err != nil {
			t.Fatal(err)
		}
		if err := kv2.Delete(d.short(), roleHost2); err != nil {
			t.Fatalf("gpu-host-2 deletes its heartbeat: %v", err)
		}
		d.healthy(roleVision, before)
	})
}

// readLogs reads the output of job of account from host through js, the
// way gpuq logs does: only chunks of the attempt's host. It fails the test
// at the end of the stream without an end marker, which a worker stores
// only for an attempt that wrote something or was stopped (client.Logs
// makes one from the job's record for the others).
func readLogs(t *testing.T, js jetstream.JetStream, n subjects.Names, account, job, host string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, n.LogsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{n.Log(account, job, host)}, NamePrefix: client.ConsumerName()})
	if err != nil {
		t.Fatalf("read the output of %s: %v", job, err)
	}
	var out strings.Builder
	for {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			c, err := wire.DecodeLogChunk(n, m.Subject(), m.Headers().Get, m.Data())
			if err != nil {
				t.Fatal(err)
			}
			if c.End != "" {
				return out.String()
			}
			out.Write(c.Data)
		}
		if got == 0 {
			t.Fatalf("the output of %s has no end marker (none is stored for an attempt that wrote nothing and exited on its own); so far %q", job, out.String())
		}
	}
}
