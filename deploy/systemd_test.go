package deploy_test

// Tests of deploy/systemd/: each unit passes systemd-analyze verify (with
// its ExecStart pointed at a gpuq binary built from this checkout, since
// verify needs the binary to exist), keeps the hardening its comments
// promise (systemd-analyze security scores it), and its environment file
// sets exactly the variables it uses, naming the NATS nodes of
// nats-cluster.conf and the users of accounts.conf.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// installedBinary is where the units, the Containerfile and the
// Kubernetes manifests all put gpuq.
const installedBinary = "/usr/local/bin/gpuq"

// unit is a parsed systemd unit file: section → key → values, in order (a
// key may repeat).
type unit map[string]map[string][]string

func (u unit) get(section, key string) string {
	v := u[section][key]
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}

func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := unit{}
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			u[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not a key=value line in a section: %q", path, i+1, line)
			}
			u[section][k] = append(u[section][k], v)
		}
	}
	return u
}

// parseEnvFile reads a systemd EnvironmentFile of KEY=VALUE lines.
func parseEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`).MatchString(k) {
			t.Fatalf("%s:%d: not KEY=VALUE: %q", path, i+1, line)
		}
		env[k] = v
	}
	return env
}

// buildGpuq builds cmd/gpuq from this checkout into a temporary directory.
func buildGpuq(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gpuq")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/gpuq/gpuq/cmd/gpuq")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gpuq: %v\n%s", err, out)
	}
	return bin
}

func TestSystemdUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed (%v): install systemd (apt-get install -y systemd) to verify deploy/systemd/*.service", err)
	}
	bin := buildGpuq(t)
	dir := t.TempDir()
	var copies []string
	for _, name := range []string{"gpuq-scheduler.service", "gpuq-worker.service"} {
		b, err := os.ReadFile(filepath.Join("systemd", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte("ExecStart="+installedBinary+" ")) {
			t.Fatalf("systemd/%s: ExecStart does not run %s", name, installedBinary)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, bytes.ReplaceAll(b, []byte("ExecStart="+installedBinary), []byte("ExecStart="+bin)), 0o644); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, p)
	}
	// verify exits 0 on an unknown or misspelt key and only warns: any
	// output at all is a failure.
	out, err := exec.Command(analyze, append([]string{"verify", "--man=no"}, copies...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The exposure systemd-analyze security computes from the hardening
	// options (0 best, 10 worst). The worker keeps what running jobs
	// needs (see the unit's comments); measured with systemd 252: 1.2 to
	// 1.4, and 5.6 (5.4 before ProtectControlGroups=no).
	for name, most := range map[string]float64{"gpuq-scheduler.service": 2.0, "gpuq-worker.service": 6.0} {
		out, err := exec.Command(analyze, "security", "--offline=yes", filepath.Join(dir, name)).CombinedOutput()
		if err != nil {
			t.Errorf("systemd-analyze security %s: %v\n%s", name, err, out)
			continue
		}
		m := regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`).FindSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security %s printed no exposure level:\n%s", name, out)
			continue
		}
		score, err := strconv.ParseFloat(string(m[1]), 64)
		if err != nil || score > most {
			t.Errorf("%s: exposure %s, want at most %.1f", name, m[1], most)
		}
		t.Logf("%s: exposure %.1f", name, score)
	}
}

func TestSystemdUnitsSettings(t *testing.T) {
	accounts := readFile(t, "accounts.conf")
	natsURL := clusterURLs(t)
	for _, tc := range []struct {
		unit, env, sub string
		want           map[string]string // Service keys and their values
		vars           []string          // what the environment file must set
	}{
		{
			unit: "gpuq-scheduler.service", env: "scheduler.env", sub: "scheduler",
			want: map[string]string{
				"Restart": "always", "EnvironmentFile": "/etc/gpuq/scheduler.env", "DynamicUser": "yes",
				"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
				"PrivateDevices": "yes", "CapabilityBoundingSet": "", "LoadCredential": "nkey:/etc/gpuq/scheduler.nk",
				"Environment": "NATS_NKEY=%d/nkey",
			},
			vars: []string{"NATS_URL", "GPUQ_SCHEDULER_FLAGS"},
		},
		{
			unit: "gpuq-worker.service", env: "worker.env", sub: "worker",
			want: map[string]string{
				"Restart": "always", "EnvironmentFile": "/etc/gpuq/worker.env", "NoNewPrivileges": "yes",
				"ProtectSystem": "full", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "no",
				"KillMode": "mixed", "LoadCredential": "nkey:/etc/gpuq/worker.nk", "Environment": "NATS_NKEY=%d/nkey",
				"StateDirectory": "gpuq-worker", "StateDirectoryMode": "0700", "Delegate": "yes", "ProtectControlGroups": "no",
			},
			vars: []string{"NATS_URL", "GPUQ_HOST", "NATS_INBOX_PREFIX", "GPUQ_WORKER_FLAGS"},
		},
	} {
		u := parseUnit(t, filepath.Join("systemd", tc.unit))
		for k, want := range tc.want {
			if got := u.get("Service", k); got != want {
				t.Errorf("%s: %s=%q, want %q", tc.unit, k, got, want)
			}
		}
		argv := strings.Fields(u.get("Service", "ExecStart"))
		if len(argv) < 2 || argv[0] != installedBinary || argv[1] != tc.sub {
			t.Errorf("%s: ExecStart=%v, want %s %s …", tc.unit, argv, installedBinary, tc.sub)
		}
		if v := flagValue(argv, "--metrics-listen"); v != metricsListen {
			t.Errorf("%s: --metrics-listen %q, want %q", tc.unit, v, metricsListen)
		}
		// Every variable ExecStart expands is one the environment file
		// sets, and the file sets nothing else.
		env := parseEnvFile(t, filepath.Join("systemd", tc.env))
		var keys []string
		for k := range env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		wantKeys := slices.Clone(tc.vars)
		slices.Sort(wantKeys)
		if !slices.Equal(keys, wantKeys) {
			t.Errorf("systemd/%s sets %v, want %v", tc.env, keys, wantKeys)
		}
		for _, m := range regexp.MustCompile(`\$\{?([A-Z_][A-Z0-9_]*)\}?`).FindAllStringSubmatch(u.get("Service", "ExecStart"), -1) {
			if _, ok := env[m[1]]; !ok {
				t.Errorf("%s: ExecStart uses $%s, which systemd/%s does not set", tc.unit, m[1], tc.env)
			}
		}
		if env["NATS_URL"] != natsURL {
			t.Errorf("systemd/%s: NATS_URL=%s, want every node of nats-cluster.conf: %s", tc.env, env["NATS_URL"], natsURL)
		}
		if host := env["GPUQ_HOST"]; host != "" {
			if want := "_INBOX_" + host; env["NATS_INBOX_PREFIX"] != want {
				t.Errorf("systemd/%s: NATS_INBOX_PREFIX=%s, want %s", tc.env, env["NATS_INBOX_PREFIX"], want)
			}
			if !strings.Contains(accounts, `subscribe: ["_INBOX_`+host+`.>"]`) {
				t.Errorf("systemd/%s: GPUQ_HOST=%s is no user of accounts.conf", tc.env, host)
			}
		}
	}

	// The scheduler creates R3 streams on the 3-node cluster.
	sched := strings.Fields(parseUnit(t, "systemd/gpuq-scheduler.service").get("Service", "ExecStart"))
	if v := flagValue(sched, "--replicas"); v != "3" {
		t.Errorf("gpuq-scheduler.service: --replicas %q, want 3", v)
	}
	// The worker runs jobs under the pool uids, as root (no User=), with
	// the capabilities that needs and no others, and lets a drain finish.
	w := parseUnit(t, "systemd/gpuq-worker.service")
	if flagValue(strings.Fields(w.get("Service", "ExecStart")), "--job-uids") != "61000-61099" || w.get("Service", "User") != "" {
		t.Errorf("gpuq-worker.service: ExecStart %q, User %q: want --job-uids 61000-61099 as root", w.get("Service", "ExecStart"), w.get("Service", "User"))
	}
	// Each attempt in a cgroup of its own, below the service's delegated one.
	if v := flagValue(strings.Fields(w.get("Service", "ExecStart")), "--cgroup"); v != "auto" {
		t.Errorf("gpuq-worker.service: --cgroup %q, want auto", v)
	}
	caps := strings.Fields(w.get("Service", "CapabilityBoundingSet"))
	slices.Sort(caps)
	if !slices.Equal(caps, workerCaps()) {
		t.Errorf("gpuq-worker.service: CapabilityBoundingSet %v, want %v", caps, workerCaps())
	}
	stop, err := time.ParseDuration(strings.ReplaceAll(w.get("Service", "TimeoutStopSec"), "min", "m"))
	if err != nil || stop <= 5*time.Minute {
		t.Errorf("gpuq-worker.service: TimeoutStopSec=%s (%v), want more than the worker's 5m drain", w.get("Service", "TimeoutStopSec"), err)
	}
}

// workerCaps is the worker's capability set, sorted, as systemd names it.
func workerCaps() []string {
	return []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"}
}

// metricsListen is the address every deployment gives --metrics-listen.
const metricsListen = ":9090"

// flagValue returns the value after flag in args, or "".
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// clusterURLs is the NATS_URL of a client of nats-cluster.conf: each node
// its routes name (in nats.env, which a node run by systemd reads), at the
// client port.
func clusterURLs(t *testing.T) string {
	t.Helper()
	var urls []string
	for _, h := range routeHosts(t, readFile(t, "nats.env")) {
		urls = append(urls, fmt.Sprintf("nats://%s:4222", h))
	}
	if len(urls) != 3 {
		t.Fatalf("nats.env names %d routes, want 3", len(urls))
	}
	return strings.Join(urls, ",")
}

// routeHosts returns the host of each route URL in text, which must all
// log in as gpuq-route with the password PASSWORD stands for.
func routeHosts(t *testing.T, text string) []string {
	t.Helper()
	var hosts []string
	for _, m := range regexp.MustCompile(`"nats://([^"@]*)@([a-z0-9.-]+):6222"`).FindAllStringSubmatch(text, -1) {
		if m[1] != "gpuq-route:PASSWORD" && m[1] != "gpuq-route:$(GPUQ_ROUTE_PASSWORD)" {
			t.Errorf("the route to %s logs in as %q, want gpuq-route with the routes' password", m[2], m[1])
		}
		hosts = append(hosts, m[2])
	}
	return hosts
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
