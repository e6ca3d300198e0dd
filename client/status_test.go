package client_test

// Client.Status against a whole installation (startGpuq: a real server, the
// scheduler and a simulated worker): the lease's holder and since when,
// standbys announced by real natsstore leases that found the lease taken,
// the checkpoint moving as commands are folded, every stream and bucket,
// a running job counted and its GPU claimed, an account at its cap
// listed, and JSON with durations as strings.

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

func TestStatus(t *testing.T) {
	f := newFixture(t)
	ctx := f.ctx
	f.run(t, "vision", "s-done", 10, "true")

	first, err := f.c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Problems) != 0 {
		t.Errorf("problems on a healthy installation: %q", first.Problems)
	}
	// The leader is the lease's holder, with since when; renewals move
	// the lease's revision, not its since.
	if l := first.Leader; l == nil || l.Name != "sched" || l.Since.IsZero() || l.TTL != client.Duration(time.Second) || l.For <= 0 {
		t.Fatalf("leader: %+v", first.Leader)
	}
	// The checkpoint is past the commands folded so far, and the log ends
	// at or after it.
	cp := first.Checkpoint
	if cp.Seq == 0 || cp.LogLast < cp.Seq || cp.Written.IsZero() || cp.Lag != cp.LogLast-cp.Seq {
		t.Errorf("checkpoint: %+v", cp)
	}
	// Every stream of the contract and both buckets, read.
	var names []string
	for _, s := range first.Streams {
		names = append(names, s.Name)
		if s.Error != "" || s.Replicas != 1 {
			t.Errorf("stream %s: %+v", s.Name, s)
		}
	}
	n := subjects.Default
	for _, want := range []string{n.CmdStream(), n.DispatchStream(), n.EventsStream(), n.JournalStream(), n.LogsStream(), n.HistoryStream(),
		"KV_" + n.LedgerBucket(), "KV_" + n.HostsBucket()} {
		if !slices.Contains(names, want) {
			t.Errorf("streams %v lack %s", names, want)
		}
	}
	if s := first.Streams[0]; s.Name != n.CmdStream() || s.LastSeq != cp.LogLast || s.Messages == 0 || s.Bytes == 0 {
		t.Errorf("command stream: %+v, checkpoint %+v", s, cp)
	}
	if first.Hosts.Live != 1 || first.Hosts.GPUs != 8 || first.Hosts.Free != 8 || first.Hosts.Simulated != 1 {
		t.Errorf("hosts: %+v", first.Hosts)
	}
	if first.Jobs[ledger.StateSucceeded] != 1 || first.Accounts.Total != 2 || len(first.Accounts.Near) != 0 {
		t.Errorf("jobs %v, accounts %+v", first.Jobs, first.Accounts)
	}
	if !first.Standbys.Known || len(first.Standbys.List) != 0 {
		t.Errorf("standbys with none running: %+v", first.Standbys)
	}

	// A running job, at vision's cap of one; two standbys contend.
	if _, err := f.c.Admin(ctx, ledger.Admin{Account: "vision", ID: "cap-1", Op: ledger.OpLimits, Limits: ledger.Limits{MaxRunningJobs: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Submit(ctx, ledger.Submit{Account: "vision", ID: "s-run", GPUs: 2, Cost: 10, Walltime: time.Minute, Command: []string{"sleep", "30"}}); err != nil {
		t.Fatal(err)
	}
	lkv, err := f.in.js.KeyValue(ctx, n.LedgerBucket())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"standby-1", "sched-2.example.com"} {
		l, err := natsstore.NewLease(f.in.js, lkv, name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if held, err := l.TryAcquire(ctx); err != nil || held {
			t.Fatalf("standby %s took the lease: %v, %v", name, held, err)
		}
	}
	var st client.Status
	for deadline := time.Now().Add(30 * time.Second); ; {
		if st, err = f.c.Status(ctx); err != nil {
			t.Fatal(err)
		}
		// Until the job runs and the leader has renewed its lease.
		if st.Jobs[ledger.StateRunning] == 1 && st.Hosts.Claimed == 2 && st.Leader != nil && st.Leader.Revision > first.Leader.Revision {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running job or a renewal never showed: jobs %v, hosts %+v, leader %+v", st.Jobs, st.Hosts, st.Leader)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !st.Leader.Since.Equal(first.Leader.Since) || !st.Leader.Renewed.After(first.Leader.Renewed) {
		t.Errorf("the same term's lease: %+v, then %+v", first.Leader, st.Leader)
	}
	if st.Checkpoint.Seq <= cp.Seq {
		t.Errorf("checkpoint did not move: %d, then %d", cp.Seq, st.Checkpoint.Seq)
	}
	var standbys []string
	for _, s := range st.Standbys.List {
		standbys = append(standbys, s.Name)
	}
	if want := []string{"sched-2.example.com", "standby-1"}; !slices.Equal(slices.Sorted(slices.Values(standbys)), want) {
		t.Errorf("standbys %v, want %v", standbys, want)
	}
	if len(st.Accounts.Near) != 1 || st.Accounts.Near[0].Account != "vision" || !slices.Contains(st.Accounts.Near[0].Why, "running_jobs 1/1") {
		t.Errorf("accounts near a cap: %+v", st.Accounts.Near)
	}

	// JSON: snake_case keys, durations as strings.
	data, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		Leader struct {
			Name string `json:"name"`
			TTL  any    `json:"ttl"`
			For  any    `json:"for"`
		} `json:"leader"`
		Checkpoint struct {
			Age any    `json:"age"`
			Lag uint64 `json:"lag"`
		} `json:"checkpoint"`
		Jobs map[string]int `json:"jobs"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	if raw.Leader.TTL != "1s" || !isDuration(raw.Leader.For) || !isDuration(raw.Checkpoint.Age) || raw.Jobs["running"] != 1 {
		t.Errorf("JSON: %s", data)
	}
	var back client.Status
	if err := json.Unmarshal(data, &back); err != nil || back.Leader.TTL != st.Leader.TTL {
		t.Errorf("JSON does not read back: %v, %+v", err, back.Leader)
	}
}

func isDuration(v any) bool {
	s, ok := v.(string)
	if !ok {
		return false
	}
	_, err := time.ParseDuration(s)
	return err == nil && strings.TrimSpace(s) != ""
}
