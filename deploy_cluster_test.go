package gpuq_test

// Tests of deploy/nats-cluster.conf: three real servers started from the
// file (each named by $GPUQ_NATS_NAME as the StatefulSet names its pods,
// on loopback ports and temporary stores instead of the file's) form a
// JetStream cluster with the accounts of deploy/accounts.conf. The
// scheduler sets gpuq up on it with 3 replicas as user scheduler, a worker
// runs as user gpu-host-1, and tenant vision's job runs end to end; then
// the node leading the ledger bucket is killed and another job still runs.
// The routes log in with the password of deploy/nats.env's variables, and
// a route that does not know it is refused.

import (
	"bufio"
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
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
	"github.com/gpuq/gpuq/worker"
)

// deployCluster is three servers started from deploy/nats-cluster.conf.
type deployCluster struct {
	nodes  []*server.Server
	urls   []string // client URLs of every node
	routes []string // route addresses of every node
	seeds  map[string]string
}

func TestDeployClusterConfig(t *testing.T) {
	// Not parallel: the config reads its keys and node names from the
	// environment.
	c := startDeployCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(tOutput{t, "cluster"}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n := subjects.Default

	// The monitoring port answers the probe the StatefulSet uses.
	for _, ns := range c.nodes {
		resp, err := http.Get(fmt.Sprintf("http://%s/healthz?js-enabled-only=true", ns.MonitorAddr()))
		if err != nil {
			t.Fatalf("%s /healthz: %v", ns.Name(), err)
		}
		_ = resp.Body.Close() // the status is all we read
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s /healthz: %s", ns.Name(), resp.Status)
		}
	}

	// A server that reaches a node's route port but does not know the
	// routes' password may not join: its CONNECT is refused, though it
	// names the cluster (which is no secret).
	for _, creds := range []string{`{"cluster":"gpuq","name":"rogue"}`, `{"cluster":"gpuq","name":"rogue","user":"gpuq-route"}`,
		`{"cluster":"gpuq","name":"rogue","user":"gpuq-route","pass":"gpuq-guess"}`} {
		if line := routeConnect(t, c.routes[0], creds); line != "-ERR 'Authorization Violation'" {
			t.Errorf("a route connecting with %s was answered %q, want an authorization violation", creds, line)
		}
	}

	// gpuq scheduler --replicas 3, as user scheduler of account GPUQ.
	sjs := c.js(t, roleScheduler)
	if err := natsbus.Setup(ctx, sjs, n, natsbus.SetupConfig{Replicas: 3}); err != nil {
		t.Fatalf("setup with 3 replicas as scheduler: %v", err)
	}
	streams := []string{"KV_" + n.LedgerBucket(), "KV_" + n.HostsBucket()}
	for _, s := range n.Streams() {
		streams = append(streams, s.Name)
	}
	for _, name := range streams {
		s, err := sjs.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s info: %v", name, err)
		}
		if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("stream %s: %d replicas, cluster %+v; want 3, a leader and 2 followers", name, info.Config.Replicas, info.Cluster)
		}
	}
	lkv, err := sjs.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	hkv, err := sjs.KeyValue(ctx, n.HostsBucket())
	if err != nil {
		t.Fatal(err)
	}
	lease, err := natsstore.NewLease(sjs, lkv, "s", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := scheduler.New(scheduler.Config{Store: natsstore.New(sjs, lkv), Lease: lease, CommandLog: natsbus.NewCommandLog(sjs, n),
		Publisher: natsbus.NewPublisher(sjs), Hosts: natsbus.NewHosts(hkv, log), Logger: log, DecideInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, ctx, "scheduler", svc.Run)

	// The worker of gpu-host-1, as its own user.
	wb, err := natsbus.NewWorkerBus(c.js(t, roleHost1), n, roleHost1, nil)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := nvmlgpu.Simulate(roleHost1, "dgxh100", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = gpu.Close() }) // test teardown
	var pool worker.IDRange
	if os.Geteuid() == 0 {
		deployPools += 16
		pool = worker.IDRange{First: deployPools, Last: deployPools + 15}
	}
	w, err := worker.New(worker.Config{Host: roleHost1, GPU: gpu, Bus: wb, Logger: log, StateDir: t.TempDir(), JobUIDs: pool,
		HeartbeatInterval: 200 * time.Millisecond, HeartbeatTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, ctx, "worker", w.Run)

	// The admin makes the account; the tenant runs a job and reads it.
	admin := c.client(t, roleAdmin)
	if _, err := admin.Admin(ctx, ledger.Admin{Account: roleVision, ID: "create-vision", Op: ledger.OpCreate, Balance: 1000}); err != nil {
		t.Fatalf("admin creates account vision: %v", err)
	}
	vision := c.client(t, roleVision)
	// A submit tries again while the servers fail over (a lost publish, an
	// answer that did not come), as cluster_harness_test.go's submitThrough
	// does: the same id with the same terms is the same job. Then the job's
	// record is read until it has ended.
	runJob := func(id string) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ev, err := vision.Submit(sctx, ledger.Submit{Account: roleVision, ID: id, GPUs: 1, Cost: 10, Command: []string{"sh", "-c", "echo " + id}})
			cancel()
			var rej *client.RejectedError
			switch {
			case err == nil && (ev.Type == ledger.EventAccepted || ev.Type == ledger.EventIgnored && ev.Reason == ledger.ReasonDuplicate):
			case errors.As(err, &rej), err == nil:
				t.Fatalf("vision submits %s: %+v, %v", id, ev, err)
			case time.Now().After(deadline):
				t.Fatalf("vision submits %s: still failing after 60s: %v", id, err)
			default:
				t.Logf("vision submits %s: %v; trying again", id, err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			break
		}
		for {
			jctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			j, err := vision.Job(jctx, id)
			cancel()
			if err == nil && j.State.Terminal() {
				if j.State != ledger.StateSucceeded || j.Host() != roleHost1 {
					t.Fatalf("job %s ended %s on %q, want succeeded on %s", id, j.State, j.Host(), roleHost1)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("job %s has not ended after 60s: %+v, %v", id, j, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	runJob("before-kill")

	// Kill the node that leads the ledger bucket: the other two elect a
	// new leader for it, and every connection moves to them.
	var victim *server.Server
	for _, ns := range c.nodes {
		if ns.JetStreamIsStreamLeader("GPUQ", "KV_"+n.LedgerBucket()) {
			victim = ns
		}
	}
	if victim == nil {
		t.Fatal("no node leads the ledger bucket")
	}
	victim.Shutdown()
	victim.WaitForShutdown()
	t.Logf("killed %s, the ledger bucket's leader", victim.Name())
	runJob("after-kill")
	if a, err := vision.Account(ctx, roleVision); err != nil || a.Balance != 980 {
		t.Errorf("vision's account after two jobs: %+v, %v; want balance 980", a, err)
	}
}

// startDeployCluster makes an nkey per role, puts the public keys in the
// environment, and starts three servers from deploy/nats-cluster.conf,
// each with $GPUQ_NATS_NAME set to its name. What the file says for a real
// host (the ports, the store, the routes' host names) is replaced by free
// loopback ports and temporary directories; the rest (JetStream, the
// cluster's name, the accounts) is the file's. It returns once the cluster
// has a JetStream meta leader that counts all three nodes and the routes
// have settled.
func startDeployCluster(t *testing.T) *deployCluster {
	t.Helper()
	c := &deployCluster{seeds: map[string]string{}}
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
		c.seeds[role] = filepath.Join(dir, role+".nk")
		if err := os.WriteFile(c.seeds[role], seed, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv(deployEnv(role), pub)
	}
	const size = 3
	// The environment of deploy/nats.env, with a password of its own in
	// it. As the file ships, the password is unset: no node starts.
	env, templates := readEnvFile(t, "deploy/nats.env")
	for _, name := range []string{"GPUQ_ROUTE_PASSWORD", "GPUQ_NATS_ROUTES"} {
		if _, ok := env[name]; ok {
			t.Errorf("deploy/nats.env sets %s: as shipped it must leave it unset (a commented template), so that a node started from it as it is does not start", name)
		}
		if templates[name] == "" {
			t.Fatalf("deploy/nats.env has no commented template #%s=...", name)
		}
	}
	routesTemplate := templates["GPUQ_NATS_ROUTES"]
	t.Setenv("GPUQ_NATS_NAME", env["GPUQ_NATS_NAME"])
	t.Setenv("GPUQ_NATS_ROUTES", routesTemplate)
	if _, err := server.ProcessConfigFile("deploy/nats-cluster.conf"); err == nil || !strings.Contains(err.Error(), "GPUQ_ROUTE_PASSWORD") {
		t.Errorf("deploy/nats-cluster.conf without $GPUQ_ROUTE_PASSWORD: %v, want it refused", err)
	}
	password := "gpuq-" + hex.EncodeToString(randomBytes(t, 32))
	t.Setenv("GPUQ_ROUTE_PASSWORD", password)
	// The password set, the routes left as shipped (unset): refused too,
	// naming the routes, rather than dialling the peers with "PASSWORD".
	os.Unsetenv("GPUQ_NATS_ROUTES")
	if _, err := server.ProcessConfigFile("deploy/nats-cluster.conf"); err == nil || !strings.Contains(err.Error(), "GPUQ_NATS_ROUTES") {
		t.Errorf("deploy/nats-cluster.conf without $GPUQ_NATS_ROUTES: %v, want it refused", err)
	}
	t.Setenv("GPUQ_NATS_ROUTES", strings.ReplaceAll(routesTemplate, "PASSWORD", password))
	clientPorts, routePorts := make([]int, size), make([]int, size)
	var routes []*url.URL
	for i := range size {
		clientPorts[i], routePorts[i] = loopbackPort(t), loopbackPort(t)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]))
		c.routes = append(c.routes, net.JoinHostPort("127.0.0.1", strconv.Itoa(routePorts[i])))
		routes = append(routes, &url.URL{Scheme: "nats-route", User: url.UserPassword("gpuq-route", password), Host: c.routes[i]})
	}
	for i := range size {
		name := fmt.Sprintf("nats-%d", i)
		t.Setenv("GPUQ_NATS_NAME", name)
		opts, err := server.ProcessConfigFile("deploy/nats-cluster.conf")
		if err != nil {
			t.Fatalf("parse deploy/nats-cluster.conf: %v", err)
		}
		// What the file must say, before the test replaces it.
		if opts.ServerName != name || !opts.JetStream || opts.Cluster.Name != "gpuq" || opts.Cluster.Port != 6222 || len(opts.Routes) != size ||
			opts.Port != 4222 || opts.HTTPPort != 8222 || opts.StoreDir != "/data/jetstream" {
			t.Fatalf("deploy/nats-cluster.conf as node %s: name %q, jetstream %v, cluster %q port %d, %d routes, ports %d/%d, store %q",
				name, opts.ServerName, opts.JetStream, opts.Cluster.Name, opts.Cluster.Port, len(opts.Routes), opts.Port, opts.HTTPPort, opts.StoreDir)
		}
		if opts.Cluster.Username != "gpuq-route" || opts.Cluster.Password != password {
			t.Fatalf("deploy/nats-cluster.conf as node %s: routes log in as %q with password %q, want gpuq-route with $GPUQ_ROUTE_PASSWORD", name, opts.Cluster.Username, opts.Cluster.Password)
		}
		for j, r := range opts.Routes {
			if want := fmt.Sprintf("nats-%d.nats:6222", j); r.Host != want {
				t.Errorf("route %d of deploy/nats-cluster.conf: %s, want %s (the StatefulSet's pod)", j, r.Host, want)
			}
			if pass, _ := r.User.Password(); r.User.Username() != "gpuq-route" || pass != password {
				t.Errorf("route %d of deploy/nats-cluster.conf dials as %v, want gpuq-route with the routes' password", j, r.User)
			}
		}
		opts.Host, opts.Port, opts.HTTPHost, opts.HTTPPort = "127.0.0.1", clientPorts[i], "127.0.0.1", loopbackPort(t)
		opts.Cluster.Host, opts.Cluster.Port, opts.Routes = "127.0.0.1", routePorts[i], routes
		opts.StoreDir, opts.PidFile, opts.NoLog, opts.NoSigs, opts.LameDuckDuration = t.TempDir(), filepath.Join(t.TempDir(), "nats.pid"), true, true, 0
		ns, err := server.NewServer(opts)
		if err != nil {
			t.Fatalf("server %s: %v", name, err)
		}
		c.nodes = append(c.nodes, ns)
		go ns.Start()
		t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	}
	for _, ns := range c.nodes {
		if !ns.ReadyForConnections(20 * time.Second) {
			t.Fatalf("server %s not ready", ns.Name())
		}
	}
	waitUntil(t, "a JetStream meta leader that counts all three nodes", func() bool {
		for _, ns := range c.nodes {
			if !ns.JetStreamIsCurrent() {
				return false
			}
			if ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) != size {
				return false
			}
		}
		for _, ns := range c.nodes {
			if ns.JetStreamIsLeader() {
				return true
			}
		}
		return false
	})
	// Two nodes that dial one another make duplicate routes, one of which
	// is then dropped, with any message on it: wait until every node has
	// a route to each other node and the routes stay the same for longer
	// than a route's retry.
	var last string
	var since time.Time
	waitUntil(t, "the routes between the nodes to settle", func() bool {
		var sig []string
		for _, ns := range c.nodes {
			rz, err := ns.Routez(nil)
			if err != nil {
				return false
			}
			peers := map[string]bool{}
			for _, r := range rz.Routes {
				peers[r.RemoteName] = true
				sig = append(sig, fmt.Sprintf("%s:%d", ns.Name(), r.Rid))
			}
			if len(peers) != size-1 {
				last = ""
				return false
			}
		}
		slices.Sort(sig)
		now := strings.Join(sig, ",")
		if now != last {
			last, since = now, time.Now()
			return false
		}
		return time.Since(since) >= 1500*time.Millisecond
	})
	return c
}

// routeConnect dials a node's route port as a server would and sends
// CONNECT with creds; it returns the first line the node answers after
// its INFO (a PONG to the PING that follows, or an error).
func routeConnect(t *testing.T, addr, creds string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		t.Fatalf("route port %s: %q, %v; want its INFO", addr, info, err)
	}
	if _, err := fmt.Fprintf(conn, "CONNECT %s\r\nPING\r\n", creds); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("route port %s after CONNECT %s: %v", addr, creds, err)
	}
	return strings.TrimSpace(line)
}

// readEnvFile reads an environment file of deploy/ (KEY=VALUE lines,
// comments and blank lines as systemd's EnvironmentFile= reads them). It
// returns the variables set and, apart, the commented templates: lines
// "#KEY=VALUE" whose KEY is a variable's name, which a user uncomments and
// fills in.
func readEnvFile(t *testing.T, path string) (env, templates map[string]string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env, templates = map[string]string{}, map[string]string{}
	name := regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "#"); ok {
			if k, v, ok := strings.Cut(c, "="); ok && name.MatchString(k) {
				templates[k] = v
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !name.MatchString(k) {
			t.Fatalf("%s: %q is not KEY=VALUE", path, line)
		}
		env[k] = v
	}
	return env, templates
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := cryptorand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// connect opens a connection to every node as role, the way gpuq --nats
// URL1,URL2,URL3 --nkey FILE --inbox-prefix _INBOX_<user> does, reconnecting
// to the others when its node goes.
func (c *deployCluster) connect(t *testing.T, role string) *nats.Conn {
	t.Helper()
	nkey, err := nats.NkeyOptionFromSeed(c.seeds[role])
	if err != nil {
		t.Fatal(err)
	}
	opts := []nats.Option{nkey, nats.Name(role), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}
	if role != roleScheduler {
		opts = append(opts, nats.CustomInboxPrefix("_INBOX_"+role))
	}
	nc, err := nats.Connect(strings.Join(c.urls, ","), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func (c *deployCluster) js(t *testing.T, role string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(c.connect(t, role))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func (c *deployCluster) client(t *testing.T, role string) *client.Client {
	t.Helper()
	cl, err := client.New(c.connect(t, role), client.WithTimeout(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// runUntilEnd runs run until the test ends, and fails the test if it
// returns an error other than the cancellation.
func runUntilEnd(t *testing.T, ctx context.Context, what string, run func(context.Context) error) {
	t.Helper()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("%s: %v", what, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("the %s did not stop within 15s", what)
		}
	})
}

// loopbackPort returns a loopback port nothing listens on now.
func loopbackPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// waitUntil polls cond until it holds, failing the test after 30s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
