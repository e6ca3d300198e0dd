package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// accountRecord is the part of gpuq account show --output json these
// tests read.
type accountRecord struct {
	Balance   int64 `json:"balance"`
	Available int64 `json:"available"`
	Accrued   int64 `json:"refill_accrued"`
	Limits    struct {
		MaxRunningJobs int `json:"max_running_jobs"`
		MaxRunningGPUs int `json:"max_running_gpus"`
	} `json:"limits"`
	RefillRate int64 `json:"refill_rate_per_hour"`
	RefillCap  int64 `json:"refill_cap"`
}

// TestUpdatesChangeOnlyWhatTheyName: limits, refill and prices set keep the
// values their flags do not mention.
func TestUpdatesChangeOnlyWhatTheyName(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("account", "limits", "demo", "--max-jobs", "2")
	d.ok("account", "limits", "demo", "--max-gpus", "16")
	d.ok("account", "refill", "demo", "--rate", "100", "--cap", "2000")
	d.ok("account", "refill", "demo", "--cap", "3000")
	var a accountRecord
	d.json(&a, "account", "show", "demo")
	if a.Limits.MaxRunningJobs != 2 || a.Limits.MaxRunningGPUs != 16 || a.RefillRate != 100 || a.RefillCap != 3000 {
		t.Errorf("after limits --max-jobs 2, --max-gpus 16, refill --rate 100 --cap 2000, --cap 3000: %+v", a)
	}
	d.ok("account", "limits", "demo", "--max-jobs", "0")
	d.json(&a, "account", "show", "demo")
	if a.Limits.MaxRunningJobs != 0 || a.Limits.MaxRunningGPUs != 16 {
		t.Errorf("--max-jobs 0 removes only the job cap: %+v", a.Limits)
	}

	d.ok("prices", "set", "--model", "NVIDIA H100 80GB HBM3=360", "--default", "300", "--failure-percent", "50", "--fixed-cost", "floor")
	d.ok("prices", "set", "--failure-percent", "40")
	d.ok("prices", "set", "--model", "NVIDIA H200 141GB HBM3e=720")
	var p struct {
		PerGPUHour     map[string]int64 `json:"per_gpu_hour"`
		Default        int64            `json:"default"`
		FailurePercent int              `json:"failure_percent"`
		FixedCost      string           `json:"fixed_cost"`
	}
	d.json(&p, "prices", "show")
	if p.Default != 300 || p.FailurePercent != 40 || p.FixedCost != "floor" || len(p.PerGPUHour) != 2 ||
		p.PerGPUHour["NVIDIA H100 80GB HBM3"] != 360 || p.PerGPUHour["NVIDIA H200 141GB HBM3e"] != 720 {
		t.Errorf("prices after three partial sets: %+v", p)
	}
	d.ok("prices", "set", "--replace", "--default", "10")
	p.PerGPUHour, p.FixedCost = nil, "" // fixed_cost is left out when it is any
	d.json(&p, "prices", "show")
	if p.Default != 10 || p.FailurePercent != 100 || p.FixedCost != "" || len(p.PerGPUHour) != 0 {
		t.Errorf("prices after --replace --default 10: %+v", p)
	}
}

// TestFlagsThatDoNotApplyAreRefused: a flag the subcommand does not take
// exits 2 naming it, and changes nothing.
func TestFlagsThatDoNotApplyAreRefused(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	cases := []struct {
		args []string
		says []string
	}{
		{[]string{"account", "create", "x", "--balance", "5", "--max-jobs", "2", "--rate", "5", "--cap", "50"}, []string{"--max-jobs", "--rate", "--cap"}},
		{[]string{"account", "grant", "demo", "5", "--balance", "3"}, []string{"--balance"}},
		{[]string{"account", "limits", "demo", "--max-jobs", "1", "--rate", "5"}, []string{"--rate"}},
		{[]string{"account", "refill", "demo", "--rate", "5", "--cap", "9", "--max-gpus", "1"}, []string{"--max-gpus"}},
		{[]string{"account", "weight", "demo", "2", "--cap", "1"}, []string{"--cap"}},
		{[]string{"account", "show", "demo", "--id", "x"}, []string{"--id"}},
		{[]string{"account", "list", "--balance", "1"}, []string{"--balance"}},
		{[]string{"account", "limits", "demo"}, []string{"--max-jobs", "--max-gpus"}},
		{[]string{"account", "show", "demo", "extra"}, []string{"want NAME"}},
		{[]string{"prices", "show", "--default", "3"}, []string{"--default"}},
		{[]string{"prices", "set"}, []string{"give what to change"}},
		{[]string{"audit", "--full", "--seal-margin", "1m"}, []string{"--seal-margin"}},
		{[]string{"jobs", "--limit", "-1"}, []string{"--limit -1"}},
		{[]string{"logs", "--attempt", "-2", "ghost"}, []string{"--attempt -2"}},
		{[]string{"scheduler", "--output", "json"}, []string{"--output"}},
		{[]string{"worker", "--timeout", "5s"}, []string{"--timeout"}},
		{[]string{"version", "--nats", "nats://x:1"}, []string{"--nats"}},
		{[]string{"completion", "bash", "--context", "x"}, []string{"--context"}},
	}
	for _, c := range cases {
		r := d.gpuq(c.args...)
		if r.code != exitUsage {
			t.Errorf("gpuq %s: exit %d, want %d\n%s%s", strings.Join(c.args, " "), r.code, exitUsage, r.stdout, r.stderr)
		}
		for _, s := range c.says {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("gpuq %s: stderr does not name %s:\n%s", strings.Join(c.args, " "), s, r.stderr)
			}
		}
	}
	if r := d.gpuq("account", "show", "x"); r.code == 0 {
		t.Errorf("account x was created by a refused command:\n%s", r.stdout)
	}
}

// TestNegativeGrant: a negative amount is an argument, not a flag, and a
// negative flag value still is the flag's.
func TestNegativeGrant(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("account", "grant", "demo", "-100")
	d.ok("account", "grant", "--id", "g2", "demo", "-50")
	var a accountRecord
	d.json(&a, "account", "show", "demo")
	if a.Balance != 850 {
		t.Errorf("balance after granting -100 and -50 to 1000: %d", a.Balance)
	}
	out := d.ok("submit", "--account", "demo", "--priority", "-5", "--cost", "1", "--", "echo", "-7")
	if !strings.Contains(out, "accepted") {
		t.Errorf("submit --priority -5: %s", out)
	}
}

// TestAccountShowCountsRefill: the refill earned since the account's last
// command is in available, and said to be not yet recorded.
func TestAccountShowCountsRefill(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("account", "create", "r", "--balance", "0")
	d.ok("account", "refill", "r", "--rate", "360000", "--cap", "100") // 100 credits a second, up to 100
	time.Sleep(1500 * time.Millisecond)                                // at least 100 credits accrue: the cap
	var a accountRecord
	d.json(&a, "account", "show", "r")
	if a.Balance != 0 || a.Accrued != 100 || a.Available != 100 {
		t.Errorf("show after refill to the cap: %+v", a)
	}
	out := d.ok("account", "show", "r")
	if !strings.Contains(out, "100 credits of refill accrued") || !strings.Contains(out, "not yet recorded") {
		t.Errorf("account show does not say what has accrued:\n%s", out)
	}
	var list []accountRecord
	d.json(&list, "account", "list")
	found := false
	for _, v := range list {
		found = found || v.Accrued == 100 && v.Available == 100
	}
	if !found {
		t.Errorf("account list leaves out the accrued refill: %+v", list)
	}
}

// TestExitCodesOfRangeAndWrongAccount: an out-of-range value is a usage
// error, and a cancel that names no job of the account is rejected.
func TestExitCodesOfRangeAndWrongAccount(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	for _, args := range [][]string{
		{"account", "limits", "demo", "--max-jobs", "-1"},
		{"account", "weight", "demo", "0"},
		{"account", "refill", "demo", "--rate", "5"}, // no cap
		{"submit", "--account", "demo", "--priority", "5000", "--cost", "1", "--", "true"},
		{"prices", "set", "--failure-percent", "140"},
	} {
		if r := d.gpuq(args...); r.code != exitUsage || !strings.Contains(r.stderr, "range") && !strings.Contains(r.stderr, "cap is 0") {
			t.Errorf("gpuq %s: exit %d, want %d\n%s", strings.Join(args, " "), r.code, exitUsage, r.stderr)
		}
	}
	d.ok("account", "create", "other", "--balance", "10")
	d.ok("submit", "--id", "mine", "--account", "demo", "--cost", "1", "--hold", "--", "true")
	for _, args := range [][]string{{"cancel", "mine", "--account", "other"}, {"cancel", "ghost", "--account", "demo"},
		{"account", "limits", "nobody", "--max-jobs", "1"}, {"account", "refill", "nobody", "--rate", "1", "--cap", "5"}} {
		r := d.gpuq(args...)
		if r.code != exitRejected {
			t.Errorf("gpuq %s: exit %d, want %d\n%s%s", strings.Join(args, " "), r.code, exitRejected, r.stdout, r.stderr)
		}
	}
}

// TestLogsSaysWhereOutputWasCut: output past the worker's cap is dropped,
// and gpuq logs says where it was cut and how much was dropped.
func TestLogsSaysWhereOutputWasCut(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--max-log-bytes", "1000")
	d.ok("submit", "--id", "big", "--account", "demo", "--cost", "1", "--wait", "--", "sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x")
	r := d.gpuq("logs", "big")
	if r.code != 0 || r.stdout != strings.Repeat("x", 1000) {
		t.Errorf("logs big: exit %d, %d bytes on stdout, want the first 1000", r.code, len(r.stdout))
	}
	if !strings.Contains(r.stderr, "output cut here, after 1000 bytes: the worker dropped the 4000 bytes") {
		t.Errorf("logs big does not say where the output was cut:\n%s", r.stderr)
	}
}

// TestReadmeSaysWhatANewUserHitsFirst: the README warns of the silent first
// build and says where go install puts gpuq.
func TestReadmeSaysWhatANewUserHitsFirst(t *testing.T) {
	t.Parallel()
	readmeShows(t, "about\n40 seconds with nothing printed", `export PATH="$PATH:$(go env GOPATH)/bin"`)
}

// TestVersion: gpuq version names the module, the Go release and, when the
// build recorded it (not under GOFLAGS=-buildvcs=false), the commit.
func TestVersion(t *testing.T) {
	t.Parallel()
	var buf, errb strings.Builder
	if code := run([]string{"version", "--output", "json"}, &buf, &errb); code != 0 {
		t.Fatalf("version: exit %d: %s", code, errb.String())
	}
	cmd := exec.Command(gpuqBin, "version", "--output", "json")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(out, &v); err != nil || v.Module != "github.com/gpuq/gpuq" || !strings.HasPrefix(v.Go, "go1.") || v.Version == "" {
		t.Errorf("gpuq version --output json = %s (%+v, %v)", out, v, err)
	}
	text, err := exec.Command(gpuqBin, "--version").Output()
	if err != nil || !strings.HasPrefix(string(text), "gpuq "+v.Version+" (github.com/gpuq/gpuq, "+v.Go+")") || !strings.Contains(string(text), v.Revision) {
		t.Errorf("gpuq --version = %q, %v", text, err)
	}
}

// TestDidYouMean: a mistyped command or account subcommand names the one
// meant; one far from every name names none.
func TestDidYouMean(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"sumbit"}, "did you mean submit?"},
		{[]string{"acount", "list"}, "did you mean account?"},
		{[]string{"stat"}, "did you mean status?"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"; run gpuq help`},
		{[]string{"account", "lsit"}, "did you mean list?"},
	} {
		var out, errb strings.Builder
		code := run(c.args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), c.says) {
			t.Errorf("gpuq %s: exit %d, stderr %q, want %q", strings.Join(c.args, " "), code, errb.String(), c.says)
		}
	}
	if s := didYouMean("frobnicate", []string{"submit", "status"}); s != "" {
		t.Errorf("didYouMean(frobnicate) = %q", s)
	}
}

// TestCompletion: the bash script completes commands, subcommands and each
// command's flags, in a real bash; zsh's and fish's name every command, and
// parse where those shells are installed.
func TestCompletion(t *testing.T) {
	t.Parallel()
	script, err := exec.Command(gpuqBin, "completion", "bash").Output()
	if err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		line := fmt.Sprintf(`source /dev/stdin; COMP_WORDS=(%s); COMP_CWORD=%d; _gpuq; echo "${COMPREPLY[*]}"`, strings.Join(words, " "), len(words)-1)
		cmd := exec.Command("bash", "-c", line)
		cmd.Stdin = bytes.NewReader(script)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash completion of %q: %v", words, err)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"gpuq", "su"}, "submit"},
		{[]string{"gpuq", "account", "li"}, "limits list"},
		{[]string{"gpuq", "submit", "--wa"}, "--wait --walltime"},
		{[]string{"gpuq", "logs", "-"}, "--attempt --context --creds -f"},
		{[]string{"gpuq", "prices", "--rep"}, "--replace"},
		{[]string{"gpuq", "help", "acc"}, "account"},
	} {
		if got := complete(c.words...); !strings.HasPrefix(got, c.want) {
			t.Errorf("completing %q: %q, want it to start %q", c.words, got, c.want)
		}
	}
	if got := complete("gpuq", "scheduler", "--out"); got != "" {
		t.Errorf("completing scheduler --out: %q; the daemons take no --output", got)
	}
	for _, sh := range []string{"zsh", "fish"} {
		out, err := exec.Command(gpuqBin, "completion", sh).Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range commands {
			if !regexp.MustCompile(`(^|[\s"'])` + c.name + `([\s"']|$)`).Match(out) {
				t.Errorf("gpuq completion %s leaves out %s", sh, c.name)
			}
		}
		if path, err := exec.LookPath(sh); err == nil {
			cmd := exec.Command(path, "-n")
			cmd.Stdin = bytes.NewReader(out)
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s -n: %v\n%s", sh, err, msg)
			}
		}
	}
	for _, args := range [][]string{{"completion", "tcsh"}, {"completion", "bash", "--output", "json"}} {
		if r := run(args, io.Discard, io.Discard); r != exitUsage {
			t.Errorf("gpuq %s: exit %d, want %d", strings.Join(args, " "), r, exitUsage)
		}
	}
}

// TestJobsWatch: jobs --watch prints the list again each time it changes,
// a JSON line each, and Ctrl-C ends it with exit 0.
func TestJobsWatch(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gpuqBin, "jobs", "--watch", "--interval", "100ms", "--output", "json")
	cmd.Env = append(os.Environ(), "NATS_URL="+d.url)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.ok("submit", "--id", "watched", "--account", "demo", "--cost", "1", "--wait", "--", "true")
	for !strings.Contains(out.String(), `"state":"succeeded"`) {
		if ctx.Err() != nil {
			t.Fatalf("jobs --watch never showed watched succeeded:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // three more reads: nothing changed, nothing printed
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("jobs --watch after Ctrl-C: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	seen := map[string]bool{}
	for i, line := range lines {
		var rows []struct{ ID, State string }
		if err := json.Unmarshal([]byte(line), &rows); err != nil {
			t.Fatalf("line %d of jobs --watch is not a JSON list: %q", i+1, line)
		}
		if i > 0 && line == lines[i-1] {
			t.Errorf("line %d repeats the one before: printed though nothing changed", i+1)
		}
		for _, r := range rows {
			seen[r.State] = true
		}
	}
	if len(lines) < 2 || !seen["succeeded"] {
		t.Errorf("jobs --watch printed:\n%s", out.String())
	}
	if r := d.gpuq("jobs", "--interval", "1s"); r.code != exitUsage {
		t.Errorf("jobs --interval without --watch: exit %d", r.code)
	}
}

// TestConfigContexts: a config file's contexts supply the connection
// settings, in the documented order: flag, named context, environment,
// default context.
func TestConfigContexts(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	dead := fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gpuq := func(env []string, args ...string) result {
		t.Helper()
		cmd := exec.Command(gpuqBin, args...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "NATS_") && !strings.HasPrefix(kv, "GPUQ_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		cmd.Env = append(cmd.Env, append([]string{"GPUQ_CONFIG=" + path}, env...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		r := result{stdout: out.String(), stderr: errb.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return r
	}
	write("# contexts\ncontext = live\n\n[live]\nnats = " + d.url + "\ntimeout = 10s\n\n[gone]\nnats = " + dead + "\n")
	for _, c := range []struct {
		name string
		env  []string
		args []string
		ok   bool
	}{
		{"the default context", nil, nil, true},
		{"$NATS_URL over the default context", []string{"NATS_URL=" + dead}, nil, false},
		{"--context over $NATS_URL", []string{"NATS_URL=" + dead}, []string{"--context", "live"}, true},
		{"$GPUQ_CONTEXT over $NATS_URL", []string{"NATS_URL=" + dead, "GPUQ_CONTEXT=live"}, nil, true},
		{"$GPUQ_CONTEXT over the default context", []string{"GPUQ_CONTEXT=gone"}, nil, false},
		{"--nats over --context", nil, []string{"--context", "live", "--nats", dead}, false},
		{"--context over $GPUQ_CONTEXT", []string{"GPUQ_CONTEXT=gone"}, []string{"--context", "live"}, true},
	} {
		r := gpuq(c.env, append([]string{"account", "show", "demo", "--timeout", "3s"}, c.args...)...)
		if (r.code == 0) != c.ok || !c.ok && !strings.Contains(r.stderr, "cannot reach NATS") {
			t.Errorf("%s: exit %d, want success %v\n%s%s", c.name, r.code, c.ok, r.stdout, r.stderr)
		}
	}
	if r := gpuq(nil, "jobs", "--context", "lvie"); r.code != exitUsage || !strings.Contains(r.stderr, "did you mean live?") {
		t.Errorf("an unknown context: exit %d\n%s", r.code, r.stderr)
	}
	// A context's timeout is not a --timeout the scheduler refuses.
	if r := gpuq(nil, "scheduler", "--help"); r.code != 0 {
		t.Errorf("scheduler --help with a context: exit %d\n%s", r.code, r.stderr)
	}
	for _, bad := range []struct{ text, says string }{
		{"[live]\nnats = x\nserver = y\n", `line 3: unknown key "server"`},
		{"nats = x\n", `line 1: "nats" before the first [context]`},
		{"context = nowhere\n[live]\n", `default context "nowhere" is not defined`},
		{"[live]\nnats\n", "line 2: want KEY = VALUE"},
		{"[a b]\n", "line 1: want [NAME]"},
	} {
		write(bad.text)
		if r := gpuq(nil, "jobs"); r.code != exitUsage || !strings.Contains(r.stderr, bad.says) {
			t.Errorf("config %q: exit %d, want %d saying %q\n%s", bad.text, r.code, exitUsage, bad.says, r.stderr)
		}
	}
}
