// Tests of the gpuq command as a user runs it: the binary is built once,
// `gpuq dev` runs as a child process on a free port with its data in a
// temporary directory, and every other command runs as a separate process
// against it, with NATS_URL set the way the README says. The tests read
// what the commands print, parse their JSON, and check their exit codes.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

var gpuqBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpuq-cli-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	gpuqBin = filepath.Join(dir, "gpuq")
	build := exec.Command("go", "build", "-o", gpuqBin, ".")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build gpuq:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// devServer is a running `gpuq dev`.
type devServer struct {
	t    *testing.T
	url  string
	data string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startDev runs gpuq dev on data (a new directory when empty) and waits
// until it says it is running.
func startDev(t *testing.T, data string, extra ...string) *devServer {
	t.Helper()
	if data == "" {
		data = t.TempDir()
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{"dev", "--listen", addr, "--data", data}, extra...)
	d := &devServer{t: t, url: "nats://" + addr, data: data, out: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(gpuqBin, args...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait() // the exit status is read from ProcessState by stop
		close(d.done)
	}()
	t.Cleanup(func() { d.stop() })
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(d.out.String(), "gpuq dev is running") {
		select {
		case <-d.done:
			t.Fatalf("gpuq dev exited early:\n%s", d.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("gpuq dev did not start in 60s:\n%s", d.out.String())
		}
	}
	return d
}

// stop sends Ctrl-C and waits for dev to exit.
func (d *devServer) stop() {
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(os.Interrupt) // it may have exited meanwhile
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill() // a hung dev must not hang the test run
		d.t.Errorf("gpuq dev did not stop in 30s:\n%s", d.out.String())
	}
}

// result is one command's run.
type result struct {
	stdout, stderr string
	code           int
}

// gpuq runs the binary with args against d, as a user with NATS_URL set.
func (d *devServer) gpuq(args ...string) result {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, gpuqBin, args...)
	cmd.Env = append(os.Environ(), "NATS_URL="+d.url)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		d.t.Fatalf("run gpuq %v: %v", args, err)
	}
	return r
}

// ok runs a command that must succeed.
func (d *devServer) ok(args ...string) string {
	d.t.Helper()
	r := d.gpuq(args...)
	if r.code != 0 {
		d.t.Fatalf("gpuq %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// json runs a command with --output json and decodes its output into v.
func (d *devServer) json(v any, args ...string) {
	d.t.Helper()
	out := d.ok(append([]string{args[0], "--output", "json"}, args[1:]...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		d.t.Fatalf("gpuq %s --output json printed %q: %v", strings.Join(args, " "), out, err)
	}
}

// splitShell splits a command line the way sh would for the simple lines
// of the README tour: words, and single-quoted strings.
func splitShell(line string) []string {
	var out []string
	var cur strings.Builder
	inQuote, inWord := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			inQuote, inWord = !inQuote, true
		case r == ' ' && !inQuote:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}

// tour is the README's tour, command for command. TestReadmeTour fails if
// the README stops showing any of them.
var tour = []string{
	"gpuq account create vision --balance 1000",
	"gpuq submit --id train-1 --account vision --gpus 2 --cost 120 --wait -- sh -c 'echo training on $CUDA_VISIBLE_DEVICES'",
	"gpuq jobs --account vision",
	"gpuq job train-1",
	"gpuq logs train-1",
	"gpuq account limits vision --max-jobs 1",
	"gpuq submit --id long --account vision --gpus 4 --cost 50 -- sleep 60",
	"gpuq submit --id next --account vision --gpus 4 --cost 50 -- sh -c 'echo next'",
	"gpuq why next",
	"gpuq cancel long",
	"gpuq hosts",
	"gpuq account show vision",
	"gpuq audit",
}

// readmeShows fails t for each of lines that README.md no longer shows
// verbatim.
func readmeShows(t *testing.T, lines ...string) {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range lines {
		if !strings.Contains(string(readme), line) {
			t.Errorf("README.md no longer shows %q", line)
		}
	}
}

func TestReadmeTour(t *testing.T) {
	t.Parallel()
	readmeShows(t, tour...)
	d := startDev(t, "")
	outs := map[string]string{}
	for _, line := range tour {
		args := splitShell(line)[1:]
		outs[line] = d.ok(args...)
		if args[0] == "submit" && args[2] == "long" {
			waitState(t, d, "long", "running")
		}
	}
	if out := outs[tour[1]]; !strings.Contains(out, "job train-1 succeeded: charged 120, balance 880") ||
		!regexp.MustCompile(`started .* on GPU-[0-9a-f-]+,GPU-[0-9a-f-]+`).MatchString(out) {
		t.Errorf("submit --wait printed:\n%s", out)
	}
	if out := outs["gpuq logs train-1"]; !regexp.MustCompile(`^training on GPU-[0-9a-f-]+,GPU-[0-9a-f-]+\n$`).MatchString(out) {
		t.Errorf("logs printed %q", out)
	}
	if out := outs["gpuq why next"]; !strings.Contains(out, "already runs 1 jobs, its cap [max_running_jobs]") {
		t.Errorf("why printed:\n%s", out)
	}
	if out := outs["gpuq cancel long"]; !strings.Contains(out, "cancel_requested long") {
		t.Errorf("cancel printed %q", out)
	}
	if out := outs["gpuq hosts"]; !strings.Contains(out, "sim-1") || !strings.Contains(out, "simulated") {
		t.Errorf("hosts printed:\n%s", out)
	}
	if out := outs["gpuq audit"]; !strings.HasPrefix(out, "audit ok") {
		t.Errorf("audit printed %q", out)
	}
	// After the cancel, the next job runs and the account settles.
	waitState(t, d, "next", "succeeded")
	var acct struct {
		Balance, Reserved int64
	}
	d.json(&acct, "account", "show", "vision")
	if acct.Balance != 1000-120-50 || acct.Reserved != 0 {
		t.Errorf("vision after the tour: %+v, want balance 830 (train-1 and next charged, long cancelled free)", acct)
	}
}

// waitState waits until job's state is want.
func waitState(t *testing.T, d *devServer, job, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var j struct{ State string }
		d.json(&j, "job", job)
		if j.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s is %s after 30s, want %s", job, j.State, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestJSONOutputs(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("submit", "--id", "j1", "--account", "demo", "--gpus", "1", "--cost", "10", "--wait", "--", "true")
	var jobs []struct {
		ID, Account, State string
		Charged            int64
	}
	d.json(&jobs, "jobs")
	if len(jobs) != 1 || jobs[0].ID != "j1" || jobs[0].State != "succeeded" || jobs[0].Charged != 10 {
		t.Errorf("jobs = %+v", jobs)
	}
	var job struct {
		ID       string
		State    string
		Devices  []string
		Attempts []struct{ Outcome string }
	}
	d.json(&job, "job", "j1")
	if job.State != "succeeded" || len(job.Devices) != 1 || len(job.Attempts) != 1 {
		t.Errorf("job = %+v", job)
	}
	var hosts []struct {
		Host      string
		Simulated bool
		GPUs      int
		Free      int
	}
	d.json(&hosts, "hosts")
	if len(hosts) != 1 || !hosts[0].Simulated || hosts[0].GPUs != 8 || hosts[0].Free != 8 {
		t.Errorf("hosts = %+v", hosts)
	}
	var accounts []struct {
		ID        string
		Available int64
	}
	d.json(&accounts, "account", "list")
	if len(accounts) != 1 || accounts[0].ID != "demo" || accounts[0].Available != 990 {
		t.Errorf("accounts = %+v", accounts)
	}
	var rep struct {
		OK      bool
		Entries int
	}
	d.json(&rep, "audit")
	if !rep.OK || rep.Entries != 3 {
		t.Errorf("audit = %+v", rep)
	}
	var ev struct{ Type, Job string }
	d.json(&ev, "submit", "--id", "j2", "--account", "demo", "--cost", "1", "--", "true")
	if ev.Type != "accepted" || ev.Job != "j2" {
		t.Errorf("submit = %+v", ev)
	}
}

func TestExitCodes(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	cases := []struct {
		name string
		args []string
		code int
		says string
	}{
		{"unknown command", []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"metered without prices", []string{"submit", "--account", "demo", "--", "true"}, exitRejected, "no_price"},
		{"negative cost", []string{"submit", "--account", "demo", "--cost", "-1", "--", "true"}, exitUsage, "--cost"},
		{"no command", []string{"submit", "--account", "demo", "--cost", "1"}, exitUsage, "give the command after --"},
		{"bad output", []string{"jobs", "--output", "yaml"}, exitUsage, "want table or json"},
		{"rejected", []string{"submit", "--account", "demo", "--cost", "5000", "--", "true"}, exitRejected, "insufficient_credits"},
		{"unknown account", []string{"submit", "--account", "nobody", "--cost", "1", "--", "true"}, exitRejected, "unknown_account"},
		{"job failed", []string{"submit", "--account", "demo", "--cost", "1", "--wait", "--", "sh", "-c", "exit 7"}, exitJobFailed, "failed"},
		{"no such job", []string{"job", "ghost"}, exitFailure, "no job ghost"},
		{"no server", []string{"jobs", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t))}, exitFailure, "cannot reach NATS"},
		{"help", []string{"submit", "--help"}, exitOK, "examples:"},
		{"journal age under 3 days", []string{"scheduler", "--journal-max-age", "24h"}, exitUsage, "--journal-max-age 24h0m0s is too short"},
	}
	for _, c := range cases {
		r := d.gpuq(c.args...)
		if r.code != c.code || !strings.Contains(r.stdout+r.stderr, c.says) {
			t.Errorf("%s: gpuq %s exited %d (want %d), printed:\n%s%s", c.name, strings.Join(c.args, " "), r.code, c.code, r.stdout, r.stderr)
		}
	}
	// Every command has help with examples.
	for _, c := range commands {
		if r := d.gpuq(c.name, "--help"); r.code != 0 || !strings.Contains(r.stdout, "usage: gpuq "+c.name) || !strings.Contains(r.stdout, "examples:") {
			t.Errorf("gpuq %s --help: exit %d\n%s", c.name, r.code, r.stdout)
		}
	}
}

func TestWhyListsEveryBlocker(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--gpus", "4")
	d.ok("account", "create", "capped", "--balance", "1000")
	d.ok("account", "limits", "capped", "--max-jobs", "1", "--max-gpus", "3")
	d.ok("submit", "--id", "hog", "--account", "capped", "--gpus", "3", "--cost", "1", "--", "sleep", "60")
	waitState(t, d, "hog", "running")
	d.ok("submit", "--id", "vip", "--account", "demo", "--gpus", "2", "--priority", "9", "--cost", "1", "--", "sleep", "60")
	d.ok("submit", "--id", "stuck", "--account", "capped", "--gpus", "2", "--priority", "1", "--cost", "1", "--", "true")
	var ans struct {
		State    string
		Blockers []struct{ Kind, Message string }
	}
	d.json(&ans, "why", "stuck")
	kinds := map[string]string{}
	for _, b := range ans.Blockers {
		kinds[b.Kind] = b.Message
	}
	for kind, says := range map[string]string{
		"max_running_jobs": "already runs 1 jobs",
		"max_running_gpus": "3 GPUs; 2 more would pass its cap of 3",
		"no_free_gpus":     "needs 2 GPUs; the most free on any host is 1",
		"queue":            "1 jobs are ahead of it in the queue: 1 of higher priority",
	} {
		if !strings.Contains(kinds[kind], says) {
			t.Errorf("why stuck: %s = %q, want it to say %q (all: %+v)", kind, kinds[kind], says, ans.Blockers)
		}
	}
	d.ok("submit", "--id", "wide", "--account", "demo", "--gpus", "8", "--cost", "1", "--", "true")
	d.json(&ans, "why", "wide")
	if len(ans.Blockers) == 0 || ans.Blockers[0].Kind != "too_wide" {
		t.Errorf("why wide = %+v", ans.Blockers)
	}
	if out := d.ok("why", "hog"); !strings.Contains(out, "job hog is running") {
		t.Errorf("why of a running job: %q", out)
	}
}

func TestAuditFindsDisagreement(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("submit", "--id", "j", "--account", "demo", "--cost", "10", "--wait", "--", "true")
	if out := d.ok("audit"); !strings.HasPrefix(out, "audit ok") {
		t.Fatalf("audit before tampering: %q", out)
	}
	// The test-only route: forge a journal entry that no command made, as
	// a bug publishing a wrong entry would.
	nc, err := nats.Connect(d.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	forged, err := wire.EncodeEffect(subjects.Default, 1, time.Now(), 99,
		ledger.Entry{Kind: ledger.EntryGrant, Account: "demo", OpID: "forged", Amount: 500, Balance: 1500})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(forged.Subject)
	m.Data = forged.Data
	m.Header.Set(subjects.MsgIDHeader, "forged")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	r := d.gpuq("audit")
	if r.code != exitAudit || !strings.Contains(r.stdout, "audit FAILED") || !strings.Contains(r.stdout, "account demo") {
		t.Errorf("audit after tampering: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestDevGoesOnWhereItStopped(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	d := startDev(t, data)
	d.ok("account", "create", "keep", "--balance", "300")
	d.ok("submit", "--id", "before", "--account", "keep", "--cost", "100", "--wait", "--", "true")
	d.stop()
	if !strings.Contains(d.out.String(), "stopped; data kept in "+data) {
		t.Errorf("dev output at stop:\n%s", d.out.String())
	}
	d2 := startDev(t, data)
	if !strings.Contains(d2.out.String(), "demo with 1000 credits (1000 available)") {
		t.Errorf("second dev did not find the demo account:\n%s", d2.out.String())
	}
	var j struct{ State string }
	d2.json(&j, "job", "before")
	if j.State != "succeeded" {
		t.Errorf("job before the restart is %q", j.State)
	}
	d2.ok("submit", "--id", "after", "--account", "keep", "--cost", "100", "--wait", "--", "true")
	var acct struct{ Balance int64 }
	d2.json(&acct, "account", "show", "keep")
	if acct.Balance != 100 {
		t.Errorf("balance after both jobs = %d, want 100", acct.Balance)
	}
	if out := d2.ok("audit"); !strings.HasPrefix(out, "audit ok") {
		t.Errorf("audit after the restart: %q", out)
	}
}

func TestWorkerRefusesWithoutNVML(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	cmd := exec.Command(gpuqBin, "worker", "--nats", fmt.Sprintf("nats://127.0.0.1:%d", freePort(t)))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitFailure ||
		!strings.Contains(string(out), "NVML is unavailable") || !strings.Contains(string(out), "--simulate") {
		t.Errorf("worker without NVML: %v\n%s", err, out)
	}
}

func TestLogsFollow(t *testing.T) {
	t.Parallel()
	d := startDev(t, "")
	d.ok("submit", "--id", "talker", "--account", "demo", "--cost", "1", "--", "sh", "-c", "echo one; sleep 1; echo two >&2; sleep 1; echo three")
	waitState(t, d, "talker", "running")
	r := d.gpuq("logs", "-f", "talker")
	if r.code != 0 || r.stdout != "one\nthree\n" || !strings.Contains(r.stderr, "two\n") || !strings.Contains(r.stderr, "attempt 1 ended: exit 0") {
		t.Errorf("logs -f: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// daemon is a gpuq scheduler or worker running in the background.
type daemon struct {
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
}

func (d *devServer) daemon(line string) *daemon {
	d.t.Helper()
	dm := &daemon{out: &syncBuffer{}, done: make(chan struct{})}
	dm.cmd = exec.Command(gpuqBin, splitShell(line)[1:]...)
	// TMPDIR keeps a worker's default state directory inside the test.
	dm.cmd.Env = append(os.Environ(), "NATS_URL="+d.url, "TMPDIR="+d.t.TempDir())
	dm.cmd.Stdout, dm.cmd.Stderr = dm.out, dm.out
	if err := dm.cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	go func() {
		_ = dm.cmd.Wait() // read through ProcessState below
		close(dm.done)
	}()
	d.t.Cleanup(func() {
		_ = dm.cmd.Process.Kill() // if the test did not stop it
		<-dm.done
	})
	return dm
}

// term sends SIGTERM and returns the exit code.
func (dm *daemon) term(t *testing.T) int {
	t.Helper()
	if err := dm.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dm.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("daemon did not stop:\n%s", dm.out.String())
	}
	return dm.cmd.ProcessState.ExitCode()
}

func TestReadmeDaemons(t *testing.T) {
	t.Parallel()
	sched, work := "gpuq scheduler --name sched-2", "gpuq worker --host sim-2 --simulate dgxh100 --gpus 4"
	readmeShows(t, sched, work)
	d := startDev(t, "")
	s := d.daemon(sched)
	w := d.daemon(work)
	deadline := time.Now().Add(30 * time.Second)
	for {
		var hosts []struct{ Host string }
		d.json(&hosts, "hosts")
		if len(hosts) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sim-2 never joined:\n%s", w.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A 4-GPU job fits sim-2 most tightly.
	d.ok("submit", "--id", "fits", "--account", "demo", "--gpus", "4", "--cost", "1", "--wait", "--", "true")
	var j struct{ Host string }
	d.json(&j, "job", "fits")
	if j.Host != "sim-2" {
		t.Errorf("the 4-GPU job ran on %s, want sim-2", j.Host)
	}
	if !strings.Contains(s.out.String(), "scheduler running") {
		t.Errorf("the standby scheduler says:\n%s", s.out.String())
	}
	if code := w.term(t); code != 0 {
		t.Errorf("worker exited %d on SIGTERM:\n%s", code, w.out.String())
	}
	if code := s.term(t); code != 0 {
		t.Errorf("scheduler exited %d on SIGTERM:\n%s", code, s.out.String())
	}
}
