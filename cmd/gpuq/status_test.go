package main

// gpuq status and the daemons' logs, against a real gpuq dev (a child
// process): the table and the JSON show the leader, a standby scheduler
// (another child process), a running job and its claimed GPUs, and a
// checkpoint that moves as jobs run; dev with
// --log-format json prints only JSON log lines, and logs a rejected
// submission and a lost host at info.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestStatusShowsTheInstallation(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--gpus", "4")
	type status struct {
		Leader *struct {
			Name  string `json:"name"`
			Since string `json:"since"`
			For   string `json:"for"`
			TTL   string `json:"ttl"`
		} `json:"leader"`
		Checkpoint struct {
			Seq     uint64 `json:"seq"`
			LogLast uint64 `json:"log_last"`
			Lag     uint64 `json:"lag"`
			Age     string `json:"age"`
		} `json:"checkpoint"`
		Streams []struct {
			Name     string `json:"name"`
			Replicas int    `json:"replicas"`
			Error    string `json:"error"`
		} `json:"streams"`
		Hosts struct {
			Live    int `json:"live"`
			GPUs    int `json:"gpus"`
			Claimed int `json:"claimed"`
		} `json:"hosts"`
		Jobs     map[string]int `json:"jobs"`
		Problems []string       `json:"problems"`
	}
	var before status
	d.json(&before, "status")
	if before.Leader == nil || before.Leader.Name != "dev" || before.Leader.Since == "" || before.Leader.TTL != "2s" {
		t.Errorf("leader before any job: %+v", before.Leader)
	}
	if _, err := time.ParseDuration(before.Leader.For); err != nil {
		t.Errorf("leader.for %q is not a duration: %v", before.Leader.For, err)
	}
	if len(before.Streams) != 8 || len(before.Problems) != 0 || before.Hosts.Live != 1 || before.Hosts.GPUs != 4 {
		t.Errorf("status of a fresh dev: %+v", before)
	}

	// A second scheduler stands by, and says so.
	standby := d.daemon("gpuq scheduler --name sched-2 --log-level warn")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var sb struct {
			Standbys struct {
				Known bool `json:"known"`
				List  []struct {
					Name string `json:"name"`
				} `json:"list"`
			} `json:"standbys"`
		}
		d.json(&sb, "status")
		if sb.Standbys.Known && len(sb.Standbys.List) == 1 && sb.Standbys.List[0].Name == "sched-2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("standby sched-2 never listed: %+v\n%s", sb, standby.out.String())
		}
	}
	d.ok("submit", "--id", "st-run", "--account", "demo", "--gpus", "2", "--cost", "10", "--", "sleep", "60")
	waitState(t, d, "st-run", "running")
	var during status
	// The host's next heartbeat shows the claimed GPUs.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		d.json(&during, "status")
		if during.Jobs["running"] == 1 && during.Hosts.Claimed == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status with st-run running: jobs %v, hosts %+v", during.Jobs, during.Hosts)
		}
	}
	if during.Checkpoint.Seq <= before.Checkpoint.Seq || during.Checkpoint.LogLast < during.Checkpoint.Seq {
		t.Errorf("checkpoint did not move as st-run started: %+v, then %+v", before.Checkpoint, during.Checkpoint)
	}
	out := d.ok("status")
	for _, want := range []string{"leader      dev, since ", "standbys    sched-2 (", "1 running", "GPUs 4: 2 free, 2 claimed", "GPUQ_CMD", "KV_gpuq_ledger", "sim-1", "lag "} {
		if !strings.Contains(out, want) {
			t.Errorf("gpuq status lacks %q:\n%s", want, out)
		}
	}
	d.ok("cancel", "st-run")
	if code := standby.term(t); code != 0 {
		t.Errorf("standby exited %d on SIGTERM:\n%s", code, standby.out.String())
	}
}

// logLine is one line of a JSON log.
type logLine map[string]any

// devLogs returns the JSON log lines dev printed so far, failing t for a
// line that looks like a log line but is not JSON.
func devLogs(t *testing.T, d *devServer) []logLine {
	t.Helper()
	var lines []logLine
	for _, l := range strings.Split(d.out.String(), "\n") {
		if strings.HasPrefix(l, "time=") {
			t.Errorf("a text log line from dev --log-format json: %q", l)
		}
		if !strings.HasPrefix(l, "{") {
			continue // the banner, on stdout
		}
		var v logLine
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Errorf("a log line that is not JSON: %q: %v", l, err)
			continue
		}
		lines = append(lines, v)
	}
	return lines
}

// waitJSONLog waits until dev has logged a JSON line at level with every field
// of want.
func waitJSONLog(t *testing.T, d *devServer, level string, want logLine) logLine {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, l := range devLogs(t, d) {
			ok := l["level"] == level
			for k, v := range want {
				ok = ok && l[k] == v
			}
			if ok {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s log line with %v in 30s:\n%s", level, want, d.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDevLogsJSON(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--log-format", "json")
	// Leading is a leader change, at info.
	waitJSONLog(t, d, "INFO", logLine{"msg": "leading"})

	// A rejected submission, with its reason.
	if r := d.gpuq("submit", "--id", "too-dear", "--account", "demo", "--cost", "5000", "--", "true"); r.code != exitRejected {
		t.Fatalf("submit over the balance: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	waitJSONLog(t, d, "INFO", logLine{"msg": "command rejected", "kind": "submit", "account": "demo", "job_id": "too-dear", "reason": "insufficient_credits"})

	// A host that goes away: a second worker joins, then stops.
	w := d.daemon("gpuq worker --host sim-2 --simulate dgxh100 --gpus 1 --job-uids none --log-level warn")
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(d.ok("hosts"), "sim-2"); {
		if time.Now().After(deadline) {
			t.Fatalf("worker sim-2 never showed in gpuq hosts:\n%s", w.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code := w.term(t); code != 0 {
		t.Errorf("worker sim-2 exited %d on SIGTERM:\n%s", code, w.out.String())
	}
	waitJSONLog(t, d, "INFO", logLine{"msg": "host gone", "worker": "sim-2"})

	// Nothing dev logged was other than JSON.
	if len(devLogs(t, d)) == 0 {
		t.Error("dev --log-format json logged nothing")
	}
}

func TestLogFormatFlag(t *testing.T) {
	t.Parallel()
	// Every daemon takes --log-format, and refuses a format it does not know.
	for _, c := range commands {
		r := runHelp(t, c.name)
		if strings.Contains(r, "-log-level") != strings.Contains(r, "-log-format") {
			t.Errorf("gpuq %s: --log-level and --log-format are not both there:\n%s", c.name, r)
		}
		if daemons[c.name] != strings.Contains(r, "-log-format") {
			t.Errorf("gpuq %s: --log-format is there: %v, want %v", c.name, !daemons[c.name], daemons[c.name])
		}
	}
	for _, args := range [][]string{{"scheduler", "--name", "s"}, {"worker", "--host", "h", "--simulate", "dgxh100", "--job-uids", "none"}, {"dev"}} {
		name := args[0]
		var out, errb strings.Builder
		code := run(append(args, "--log-format", "yaml"), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), `--log-format "yaml": want text or json`) {
			t.Errorf("gpuq %s --log-format yaml: exit %d: %s%s", name, code, out.String(), errb.String())
		}
	}
}

// runHelp returns what gpuq name --help prints.
func runHelp(t *testing.T, name string) string {
	t.Helper()
	var out, errb strings.Builder
	if code := run([]string{name, "--help"}, &out, &errb); code != exitOK {
		t.Fatalf("gpuq %s --help: exit %d: %s", name, code, errb.String())
	}
	return out.String()
}
