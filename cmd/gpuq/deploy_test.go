package main

// The commands as each role of deploy/nats-server.conf runs them: a server
// started from the file, the scheduler and a worker connected with
// --nkey (the way gpuq scheduler and gpuq worker connect), and a submitter
// and the admin running commands in process with --nkey and --inbox-prefix.

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/gpuq/gpuq/internal/nvmlgpu"
	"github.com/gpuq/gpuq/subjects"
)

func TestDeployRolesRunCommands(t *testing.T) {
	// Not parallel: the config reads its keys from the environment.
	seeds := map[string]string{}
	dir := t.TempDir()
	for _, role := range []string{"scheduler", "admin", "vision", "nlp", "gpu-host-1", "gpu-host-2"} {
		kp, err := nkeys.CreateUser()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		seed, _ := kp.Seed()
		seeds[role] = filepath.Join(dir, role+".nk")
		if err := os.WriteFile(seeds[role], seed, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("GPUQ_"+strings.ToUpper(strings.ReplaceAll(role, "-", "_"))+"_NKEY", pub)
	}
	opts, err := server.ProcessConfigFile("../../deploy/nats-server.conf")
	if err != nil {
		t.Fatal(err)
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
	url := ns.ClientURL()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	n := subjects.Default

	// The daemons, each connected as gpuq scheduler and gpuq worker do.
	sc := connFlags{url: url, nkey: seeds["scheduler"], inbox: defaultInbox}
	snc, err := sc.dial("scheduler")
	if err != nil {
		t.Fatal(err)
	}
	defer snc.Close()
	svc, err := startScheduler(ctx, snc, n, schedulerOpts{name: "s", replicas: 1, leaseTTL: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopSched := context.WithCancel(ctx)
	schedDone := make(chan error, 1)
	go func() { schedDone <- svc.Run(sctx) }()
	defer func() { stopSched(); <-schedDone }()
	wc := connFlags{url: url, nkey: seeds["gpu-host-1"], inbox: "_INBOX_gpu-host-1"}
	wnc, err := wc.dial("worker")
	if err != nil {
		t.Fatal(err)
	}
	defer wnc.Close()
	gpu, err := nvmlgpu.Simulate("gpu-host-1", "dgxh100", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = gpu.Close() }() // test teardown
	w, err := newWorker(ctx, wnc, n, workerOpts{host: "gpu-host-1", stateDir: t.TempDir(), drain: time.Second}, gpu, log)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()
	defer func() { stopWorker(); <-workerDone }()

	gpuq := func(role string, args ...string) (string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		full := append(args[:1:1], append([]string{"--nats", url, "--nkey", seeds[role], "--inbox-prefix", "_INBOX_" + role, "--timeout", "20s"}, args[1:]...)...)
		if (args[0] == "account" || args[0] == "prices") && len(args) > 1 && !strings.HasPrefix(args[1], "-") {
			full = append(args[:2:2], append([]string{"--nats", url, "--nkey", seeds[role], "--inbox-prefix", "_INBOX_" + role, "--timeout", "20s"}, args[2:]...)...)
		}
		code := run(full, &out, &errb)
		return out.String() + errb.String(), code
	}
	ok := func(role string, args ...string) string {
		t.Helper()
		out, code := gpuq(role, args...)
		if code != exitOK {
			t.Fatalf("gpuq %s as %s: exit %d: %s", strings.Join(args, " "), role, code, out)
		}
		return out
	}

	ok("admin", "account", "create", "vision", "--balance", "100")
	ok("admin", "prices", "set", "--default", "100")
	ok("vision", "submit", "--id", "cli-1", "--account", "vision", "--gpus", "1", "--cost", "10", "--wait", "--", "sh", "-c", "echo from-cli")
	if out := ok("vision", "logs", "cli-1"); !strings.Contains(out, "from-cli") {
		t.Errorf("vision's gpuq logs: %s", out)
	}
	if out := ok("vision", "job", "cli-1"); !strings.Contains(out, "succeeded") {
		t.Errorf("vision's gpuq job: %s", out)
	}
	// The admin runs every command that reads.
	for _, args := range [][]string{{"jobs"}, {"job", "cli-1"}, {"why", "cli-1"}, {"hosts"}, {"logs", "cli-1"}, {"audit"}, {"prices", "show"}, {"usage", "--by", "job"}, {"status"}} {
		out := ok("admin", append(args, "--output", "json")...)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") { // JSON lines
			if !json.Valid([]byte(line)) {
				t.Errorf("gpuq %s as admin printed %q", args[0], out)
			}
		}
	}
	if out := ok("admin", "hosts"); !strings.Contains(out, "gpu-host-1") {
		t.Errorf("admin's gpuq hosts: %s", out)
	}
	if out := ok("admin", "audit"); !strings.Contains(out, "audit ok") || !strings.Contains(out, "from seals:") {
		t.Errorf("admin's gpuq audit: %s", out)
	}
	if out := ok("admin", "audit", "--full"); !strings.Contains(out, "audit ok") || !strings.Contains(out, "in full:") {
		t.Errorf("admin's gpuq audit --full: %s", out)
	}
	// gpuq status as the admin reads every part: the lease, every
	// stream's and bucket's info, the hosts and the whole ledger.
	var st struct {
		Leader   *struct{ Name string } `json:"leader"`
		Streams  []struct{ Name, Error string }
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal([]byte(ok("admin", "status", "--output", "json")), &st); err != nil || st.Leader == nil || st.Leader.Name != "s" ||
		len(st.Streams) != 8 || len(st.Problems) != 0 {
		t.Errorf("admin's gpuq status: %+v, %v", st, err)
	}
	// gpuq why reads the scheduler's facts: a tenant's of its own jobs, the
	// admin's of any; not another tenant's.
	ok("admin", "account", "create", "nlp", "--balance", "100")
	ok("vision", "submit", "--id", "vision-wide", "--account", "vision", "--gpus", "4", "--cost", "1", "--", "true")
	ok("nlp", "submit", "--id", "nlp-wide", "--account", "nlp", "--gpus", "4", "--cost", "1", "--", "true")
	if out := ok("vision", "why", "vision-wide"); !strings.Contains(out, "the largest live host has 2") || !strings.Contains(out, "[too_wide]") {
		t.Errorf("vision's gpuq why of its own job: %s", out)
	}
	if out := ok("admin", "why", "nlp-wide"); !strings.Contains(out, "[too_wide]") {
		t.Errorf("admin's gpuq why of nlp's job: %s", out)
	}
	if out, code := gpuq("vision", "why", "nlp-wide", "--timeout", "2s"); code == exitOK || strings.Contains(out, "too_wide") {
		t.Errorf("vision explained nlp's job: exit %d: %s", code, out)
	}
	// A submitter's account-wide reads are refused, not wrong.
	if out, code := gpuq("vision", "status", "--timeout", "2s"); code == exitOK {
		t.Errorf("vision ran gpuq status: %s", out)
	}
	if out, code := gpuq("vision", "audit", "--timeout", "2s"); code == exitOK {
		t.Errorf("vision ran gpuq audit: %s", out)
	}
	// gpuq usage reads the journal and the whole ledger: the admin's.
	if out, code := gpuq("vision", "usage", "--account", "vision", "--timeout", "2s"); code == exitOK {
		t.Errorf("vision ran gpuq usage: %s", out)
	}
	// gpuq bench creates an account of its own, which takes the admin's
	// rights: a tenant is told so. The admin may not submit a tenant's
	// jobs, nor may anyone but the scheduler make a stream: a tenant
	// benches in its own account, and the JetStream phase is skipped.
	if out, code := gpuq("vision", "bench", "--jobs", "4", "--probes", "1", "--timeout", "2s"); code == exitOK || !strings.Contains(out, "admin's credentials") {
		t.Errorf("vision ran gpuq bench: exit %d: %s", code, out)
	}
	if out, code := gpuq("admin", "bench", "--jobs", "4", "--probes", "1", "--timeout", "2s"); code == exitOK || !strings.Contains(out, "with --account") {
		t.Errorf("admin ran gpuq bench: exit %d: %s", code, out)
	}
	ok("admin", "account", "grant", "vision", "100")
	bout := ok("vision", "bench", "--account", "vision", "--jobs", "6", "--probes", "2", "--warmup", "0", "--js-ops", "100", "--output", "json")
	var bf map[string]any // the JSON line, then the progress lines (ok gives stdout and stderr)
	if err := json.Unmarshal([]byte(strings.SplitN(bout, "\n", 2)[0]), &bf); err != nil ||
		bf["account"] != "vision" || bf["account_created"] != false || bf["invariant_ok"] != true || bf["succeeded"] != float64(2+2*6) || bf["js_skipped"] == nil || bf["drain_jobs_per_s"] == nil {
		t.Errorf("vision's gpuq bench --account vision: %v: %s", err, bout)
	}
	// Without its inbox prefix a role hears no answers.
	var out, errb bytes.Buffer
	if code := run([]string{"job", "cli-1", "--nats", url, "--nkey", seeds["vision"], "--timeout", "2s"}, &out, &errb); code == exitOK {
		t.Errorf("vision without its inbox prefix: %s%s", out.String(), errb.String())
	}
}
