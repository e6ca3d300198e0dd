package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/bench"
)

// benchKeys are the keys gpuq bench --output json must print, each a
// positive number: the flat keys and the peers' flattened ones.
var benchKeys = []string{
	"idle.start_ms_p50", "idle.start_ms_p99", "idle.settle_ms_p50", "idle.settle_ms_p99",
	"e2e_jobs_per_s", "drain_jobs_per_s", "submit_jobs_per_s",
	"e2e.e2e_jobs_per_s", "e2e.submit_jobs_per_s", "e2e.settle_ms_p50", "e2e.settle_ms_p99",
	"backlog.drain_jobs_per_s", "js.publish_per_s", "js.kv_cas_per_s",
}

// checkBenchJSON decodes gpuq bench's one JSON line and checks its keys.
func checkBenchJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("gpuq bench --output json printed %d lines, want 1:\n%s", strings.Count(out, "\n"), out)
	}
	var f map[string]any
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("gpuq bench --output json: %v\n%s", err, out)
	}
	for _, k := range benchKeys {
		if v, ok := f[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, f[k])
		}
	}
	if f["e2e_jobs_per_s"] != f["e2e.e2e_jobs_per_s"] || f["drain_jobs_per_s"] != f["backlog.drain_jobs_per_s"] {
		t.Errorf("flat and peer keys differ: %v / %v, %v / %v", f["e2e_jobs_per_s"], f["e2e.e2e_jobs_per_s"], f["drain_jobs_per_s"], f["backlog.drain_jobs_per_s"])
	}
	if f["idle.start_ms_p50"].(float64) > f["idle.settle_ms_p50"].(float64) {
		t.Errorf("idle: started p50 %v after settled p50 %v", f["idle.start_ms_p50"], f["idle.settle_ms_p50"])
	}
	if f["invariant_ok"] != true || f["cleaned_up"] != true {
		t.Errorf("invariant_ok %v, cleaned_up %v (%v)", f["invariant_ok"], f["cleaned_up"], f["cleanup_left"])
	}
	acct, _ := f["account"].(string)
	if !strings.HasPrefix(acct, bench.AccountPrefix) {
		t.Errorf("account %q, want %s<random>", acct, bench.AccountPrefix)
	}
	return f
}

// TestBenchEmbedded runs gpuq bench on its default, an installation of its
// own, with few jobs: one JSON line with every key, a progress line on
// stderr, and nothing left in its temporary directory.
func TestBenchEmbedded(t *testing.T) {
	t.Parallel()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gpuqBin, "bench", "--jobs", "50", "--probes", "5", "--js-ops", "2000", "--output", "json")
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "NATS_URL=nats://127.0.0.1:1") // $NATS_URL names no installation for bench
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuq bench: %v\n%s%s", err, out.String(), errb.String())
	}
	f := checkBenchJSON(t, out.String())
	if f["installation"] != "embedded" || f["simulated_gpus"] != float64(8) || f["succeeded"] != float64(8+5+2*50) {
		t.Errorf("installation %v, simulated_gpus %v, succeeded %v", f["installation"], f["simulated_gpus"], f["succeeded"])
	}
	if !strings.Contains(errb.String(), "gpuq bench: backlog:") {
		t.Errorf("no progress line on stderr:\n%s", errb.String())
	}
	if left, err := os.ReadDir(tmp); err != nil || len(left) != 0 {
		t.Errorf("left in $TMPDIR: %v %v", left, err)
	}
}

// TestBenchInstallation runs gpuq bench against a running installation
// (gpuq dev): afterwards its account holds nothing, every job of it has
// ended, and its scratch stream and bucket are gone.
func TestBenchInstallation(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	r := d.gpuq("bench", "--nats", d.url, "--jobs", "30", "--probes", "3", "--warmup", "0", "--js-ops", "1000", "--output", "json")
	if r.code != 0 {
		t.Fatalf("gpuq bench: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	f := checkBenchJSON(t, r.stdout)
	acct := f["account"].(string)
	if f["installation"] != d.url || f["succeeded"] != float64(3+2*30) || f["charged"] != float64(3+2*30) {
		t.Errorf("installation %v, succeeded %v, charged %v", f["installation"], f["succeeded"], f["charged"])
	}
	var a struct{ Balance, Reserved int }
	d.json(&a, "account", "show", acct)
	if a.Balance != 0 || a.Reserved != 0 {
		t.Errorf("account %s after the bench: %+v, want nothing left", acct, a)
	}
	var jobs []struct{ ID, State string }
	d.json(&jobs, "jobs", "--account", acct, "--limit", "0")
	for _, j := range jobs {
		if j.State != "succeeded" && !(strings.HasSuffix(j.ID, "-gate") && j.State == "cancelled") {
			t.Errorf("job %s is %s after the bench", j.ID, j.State)
		}
	}
	n := len(jobs)
	if n != 3+2*30+1 {
		t.Errorf("the bench's account has %d jobs, want %d", n, 3+2*30+1)
	}
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := js.StreamNames(context.Background())
	for name := range names.Name() {
		if strings.Contains(strings.ToLower(name), "bench") {
			t.Errorf("stream %s left after the bench", name)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	// One consumer follows the bench's jobs, not one per command: a
	// consumer outlives its reader by minutes, and the server allows a
	// stream 1,000 by default.
	info, err := js.Stream(context.Background(), "GPUQ_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	st, err := info.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.State.Consumers > 10 {
		t.Errorf("the events stream has %d consumers after a bench of %d jobs", st.State.Consumers, 3+2*30)
	}
}

// TestBenchFlags: a connection flag without --nats or --context, and
// --gpus with one, are usage errors, not silently ignored.
func TestBenchFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "--creds", "x.creds"},
		{"bench", "--nats", "nats://127.0.0.1:1", "--gpus", "4"},
		{"bench", "--jobs", "0"},
		{"bench", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitUsage {
			t.Errorf("gpuq %s: exit %d, want %d: %s%s", strings.Join(args, " "), code, exitUsage, out.String(), errb.String())
		}
	}
}

// TestPeerScript runs bench/peers/gpuq/bench.sh, the peer script, with few
// jobs: it builds gpuq, and its last line is the bench's JSON.
func TestPeerScript(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	root := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../../bench/peers/gpuq/bench.sh", "--warmup", "0")
	cmd.Env = append(os.Environ(), "GPUQ_ROOT="+root, "N=20", "PROBES=2", "JS_OPS=100", "TMPDIR="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("bench.sh: %v\n%s%s", err, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	f := checkBenchJSON(t, lines[len(lines)-1]+"\n")
	if f["peer"] != "gpuq" || f["jobs"] != float64(20) || f["succeeded"] != float64(2+2*20) {
		t.Errorf("peer %v, jobs %v, succeeded %v", f["peer"], f["jobs"], f["succeeded"])
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":             "nats://127.0.0.1:4222",
		"nats://alice:secret@h:4222":        "nats://alice:xxxxx@h:4222",
		"nats://a:s@h1:4222,nats://h2:4222": "nats://a:xxxxx@h1:4222,nats://h2:4222",
		"tls://token@nats.example.com:4222": "tls://xxxxx@nats.example.com:4222",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
