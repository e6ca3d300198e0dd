package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// Status is the installation at a glance, as [Client.Status] read it: who
// leads, how far the ledger trails the command log, what each stream and
// bucket holds, the hosts and their GPUs, the jobs by state and the
// accounts near their caps. Each part is read on its own, one after
// another, so parts may disagree by what happened between the reads.
type Status struct {
	// Read is when the status was read, on this host's clock.
	Read time.Time `json:"read"`
	// Leader is the scheduler that holds the leader lease; nil when none
	// does (no scheduler runs, or the lease lapsed a moment ago).
	Leader *LeaderStatus `json:"leader"`
	// Standbys are what is known of the schedulers that do not lead.
	Standbys StandbyStatus `json:"standbys"`
	// Checkpoint is where the ledger stands against the command log.
	Checkpoint CheckpointStatus `json:"checkpoint"`
	// Streams are gpuq's streams, then its two buckets (KV_…), as their
	// servers report them.
	Streams []StreamStatus `json:"streams"`
	Hosts   HostsSummary   `json:"hosts"`
	// Jobs counts the jobs in the ledger view by state; archived jobs are
	// in the history stream, not here.
	Jobs     map[ledger.JobState]int `json:"jobs"`
	Accounts AccountsSummary         `json:"accounts"`
	// Problems are the parts that could not be read, each with why; the
	// rest of the status still holds.
	Problems []string `json:"problems"`
}

// Duration is a [time.Duration] that encodes in JSON as a string, "1m30s".
type Duration time.Duration

// MarshalText writes d as [time.Duration.String] does.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads what MarshalText writes.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = Duration(v)
	return err
}

// String is [time.Duration.String].
func (d Duration) String() string { return time.Duration(d).String() }

// LeaderStatus is the leader lease: key sched.leader of the ledger bucket.
type LeaderStatus struct {
	Name string `json:"name"`
	// Since is when it took the lease (zero if its gpuq is older than the
	// field), and For how long ago that was.
	Since time.Time `json:"since,omitzero"`
	For   Duration  `json:"for"`
	// Renewed is when the lease was last renewed, by the server's clock;
	// TTL is how long a renewal lasts. A lease not renewed within its TTL
	// is removed by the server, and a standby takes over.
	Renewed  time.Time `json:"renewed"`
	TTL      Duration  `json:"ttl"`
	Revision uint64    `json:"revision"`
}

// StandbyStatus lists the standby schedulers: each one that finds another
// holding the lease announces itself once per lease TTL under key
// sched.standby.<name> of the ledger bucket, with a TTL of three lease
// TTLs, so one that stopped waiting drops out of the list within that
// long. A scheduler of a gpuq older than the announcements stands by
// unlisted. Known is false when the announcements could not be read.
type StandbyStatus struct {
	Known bool          `json:"known"`
	List  []StandbyInfo `json:"list"`
	Note  string        `json:"note"`
}

// StandbyInfo is one standby's announcement.
type StandbyInfo struct {
	Name string `json:"name"`
	// Announced is when it last announced itself, by the server's clock.
	Announced time.Time `json:"announced"`
}

// CheckpointStatus is the ledger's checkpoint (key sched.checkpoint: the
// last command folded and stored) against the command log.
type CheckpointStatus struct {
	Seq uint64 `json:"seq"`
	// Written is when the checkpoint last moved, by the server's clock,
	// and Age how long ago that was: a checkpoint that does not move while
	// Lag is above zero is a scheduler that does not keep up (or none).
	Written time.Time `json:"written,omitzero"`
	Age     Duration  `json:"age"`
	// LogFirst and LogLast are the command stream's first and last
	// sequences, LogLastAt when its last command was stored.
	LogFirst  uint64    `json:"log_first"`
	LogLast   uint64    `json:"log_last"`
	LogLastAt time.Time `json:"log_last_at,omitzero"`
	// Lag is how many commands the log holds past the checkpoint.
	Lag uint64 `json:"lag"`
	// Refused are commands past the checkpoint that the fold will answer
	// with a rejection instead of applying.
	Refused int `json:"refused"`
}

// StreamStatus is one stream or bucket as its server reports it.
type StreamStatus struct {
	Name string `json:"name"`
	// Kind is "stream" or "bucket" (Name is then the bucket's KV_ stream).
	Kind      string `json:"kind"`
	Replicas  int    `json:"replicas"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	FirstSeq  uint64 `json:"first_seq"`
	LastSeq   uint64 `json:"last_seq"`
	Consumers int    `json:"consumers"`
	// Leader is the server that leads the stream in a cluster, and
	// Current how many of its replicas (the leader included) are current;
	// both empty on a server that is not in a cluster.
	Leader  string `json:"leader,omitempty"`
	Current int    `json:"current,omitempty"`
	// Error says why the stream could not be read; the other fields are
	// then zero.
	Error string `json:"error,omitempty"`
}

// HostsSummary counts the live hosts and their GPUs, and lists them.
type HostsSummary struct {
	Live      int          `json:"live"`
	Simulated int          `json:"simulated"`
	Draining  int          `json:"draining"`
	GPUs      int          `json:"gpus"`
	Free      int          `json:"free"`
	Claimed   int          `json:"claimed"`
	Busy      int          `json:"busy"`
	Unhealthy int          `json:"unhealthy"`
	List      []HostStatus `json:"list"`
}

// AccountsSummary counts the accounts and lists those near a cap.
type AccountsSummary struct {
	Total int           `json:"total"`
	Near  []NearCapInfo `json:"near"`
}

// NearCapInfo is an account at or past [NearCapPercent] of one of its caps:
// its running jobs or GPUs against its limits, or its reserved credits
// against its balance; or with jobs held until it can pay.
type NearCapInfo struct {
	Account        string         `json:"account"`
	RunningJobs    int            `json:"running_jobs"`
	MaxRunningJobs int            `json:"max_running_jobs"`
	RunningGPUs    int            `json:"running_gpus"`
	MaxRunningGPUs int            `json:"max_running_gpus"`
	Balance        ledger.Credits `json:"balance"`
	Reserved       ledger.Credits `json:"reserved"`
	Available      ledger.Credits `json:"available"`
	Held           int            `json:"held"`
	// Why lists each cap it is near, as "running_jobs 4/5".
	Why []string `json:"why"`
}

// NearCapPercent is how full a cap must be, in percent, for
// [Client.Status] to list its account as near it.
const NearCapPercent = 80

// standbyNote is what [StandbyStatus.Note] says.
const standbyNote = "each standby announces itself every lease TTL and drops out within three lease TTLs of stopping; " +
	"a standby of a gpuq older than the announcements is not listed (its log says \"another scheduler leads; standing by\")"

// standbyRecord is a standby's announcement, as natsstore.Lease writes it.
type standbyRecord struct {
	V    int    `json:"v"`
	Name string `json:"name"`
}

// leaseRecord is the value of sched.leader, as natsstore.Lease writes it.
type leaseRecord struct {
	V      int       `json:"v"`
	Holder string    `json:"holder"`
	At     time.Time `json:"at"`
	TTL    string    `json:"ttl"`
	Since  time.Time `json:"since"`
}

// Status reads the installation at a glance: the leader lease, the
// checkpoint, every stream's and bucket's server info, the hosts bucket,
// and every job and account record of the ledger view. A part that cannot
// be read (a stream the caller may not inspect, a missing bucket) is a
// line of [Status.Problems], not an error; the error is for a read of the
// ledger bucket that failed, without which there is no status. It needs an
// admin's rights (deploy/nats-server.conf).
func (c *Client) Status(ctx context.Context) (Status, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	st := Status{Read: time.Now(), Jobs: map[ledger.JobState]int{}, Streams: []StreamStatus{}, Problems: []string{},
		Standbys: StandbyStatus{List: []StandbyInfo{}, Note: standbyNote}}
	kv, err := c.ledgerKV(ctx)
	if err != nil {
		return st, err
	}
	if err := c.statusLeader(ctx, kv, &st); err != nil {
		return st, err
	}
	c.statusStandbys(ctx, kv, &st)
	cmdInfo := c.statusStreams(ctx, &st)
	if err := c.statusCheckpoint(ctx, kv, cmdInfo, &st); err != nil {
		return st, err
	}
	if err := c.statusLedger(ctx, &st); err != nil {
		return st, err
	}
	hosts, err := c.Hosts(ctx)
	if err != nil {
		st.Problems = append(st.Problems, fmt.Sprintf("hosts: %v", err))
	}
	st.Hosts = summarizeHosts(hosts.Hosts)
	for _, f := range hosts.Foreign {
		st.Problems = append(st.Problems, fmt.Sprintf("hosts: left out %v", f))
	}
	return st, nil
}

func (c *Client) statusLeader(ctx context.Context, kv jetstream.KeyValue, st *Status) error {
	e, err := kv.Get(ctx, subjects.LeaderKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", subjects.LeaderKey, err)
	}
	var v leaseRecord
	if err := json.Unmarshal(e.Value(), &v); err != nil || v.V < 1 || v.Holder == "" {
		st.Problems = append(st.Problems, fmt.Sprintf("%s holds a value no scheduler wrote (revision %d); a contending scheduler removes it", subjects.LeaderKey, e.Revision()))
		return nil
	}
	ttl, _ := time.ParseDuration(v.TTL) // 0 for a lease that names none
	l := &LeaderStatus{Name: v.Holder, Since: v.Since, Renewed: e.Created(), TTL: Duration(ttl), Revision: e.Revision()}
	if !v.Since.IsZero() {
		l.For = Duration(st.Read.Sub(v.Since).Round(time.Millisecond))
	}
	st.Leader = l
	return nil
}

// statusStandbys lists the standbys' announcements, leaving out the
// leader's own (written before it led, until it lapses).
func (c *Client) statusStandbys(ctx context.Context, kv jetstream.KeyValue, st *Status) {
	latest, _, err := c.scan(ctx, kv, subjects.StandbyKeys)
	if err != nil {
		st.Problems = append(st.Problems, fmt.Sprintf("standbys: %v", err))
		return
	}
	st.Standbys.Known = true
	for _, key := range slices.Sorted(maps.Keys(latest)) {
		e := latest[key]
		var v standbyRecord
		if err := json.Unmarshal(e.Value(), &v); err != nil || v.V < 1 || v.Name == "" || subjects.StandbyKey(v.Name) != key {
			st.Problems = append(st.Problems, fmt.Sprintf("standbys: %s holds a value no scheduler wrote (revision %d)", key, e.Revision()))
			continue
		}
		if st.Leader != nil && v.Name == st.Leader.Name {
			continue
		}
		st.Standbys.List = append(st.Standbys.List, StandbyInfo{Name: v.Name, Announced: e.Created()})
	}
}

// statusStreams reads the info of every stream and bucket, and returns the
// command stream's (nil if it could not be read).
func (c *Client) statusStreams(ctx context.Context, st *Status) *jetstream.StreamInfo {
	type named struct{ name, kind string }
	var all []named
	for _, s := range c.n.Streams() {
		all = append(all, named{s.Name, "stream"})
	}
	all = append(all, named{"KV_" + c.n.LedgerBucket(), "bucket"}, named{"KV_" + c.n.HostsBucket(), "bucket"})
	var cmd *jetstream.StreamInfo
	for _, s := range all {
		v := StreamStatus{Name: s.name, Kind: s.kind}
		info, err := c.streamInfo(ctx, s.name)
		if err != nil {
			v.Error = err.Error()
			st.Problems = append(st.Problems, fmt.Sprintf("%s %s: %v", s.kind, s.name, err))
			st.Streams = append(st.Streams, v)
			continue
		}
		if s.name == c.n.CmdStream() {
			cmd = info
		}
		v.Replicas, v.Consumers = info.Config.Replicas, info.State.Consumers
		v.Messages, v.Bytes, v.FirstSeq, v.LastSeq = info.State.Msgs, info.State.Bytes, info.State.FirstSeq, info.State.LastSeq
		if cl := info.Cluster; cl != nil && cl.Name != "" && cl.Leader != "" {
			v.Leader, v.Current = cl.Leader, 1
			for _, p := range cl.Replicas {
				if p.Current {
					v.Current++
				}
			}
		}
		st.Streams = append(st.Streams, v)
	}
	return cmd
}

func (c *Client) streamInfo(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

func (c *Client) statusCheckpoint(ctx context.Context, kv jetstream.KeyValue, cmd *jetstream.StreamInfo, st *Status) error {
	cp := &st.Checkpoint
	e, err := kv.Get(ctx, subjects.CheckpointKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// No flush yet: nothing folded.
	case err != nil:
		return fmt.Errorf("read %s: %w", subjects.CheckpointKey, err)
	default:
		var rec checkpointRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.V < 1 {
			st.Problems = append(st.Problems, fmt.Sprintf("%s holds a value gpuq did not write (revision %d)", subjects.CheckpointKey, e.Revision()))
			break
		}
		cp.Seq, cp.Written = rec.Seq, e.Created()
		cp.Age = Duration(st.Read.Sub(e.Created()).Round(time.Millisecond))
		for _, r := range rec.Refused {
			if r.Seq > rec.Seq {
				cp.Refused++
			}
		}
	}
	if cmd != nil {
		cp.LogFirst, cp.LogLast, cp.LogLastAt = cmd.State.FirstSeq, cmd.State.LastSeq, cmd.State.LastTime
		if cp.LogLast > cp.Seq {
			cp.Lag = cp.LogLast - cp.Seq
		}
	}
	return nil
}

// statusLedger counts the jobs by state and finds the accounts near a cap.
func (c *Client) statusLedger(ctx context.Context, st *Status) error {
	accts, err := c.Accounts(ctx)
	if err != nil {
		return err
	}
	jobs, err := c.Jobs(ctx, JobFilter{})
	if err != nil {
		return err
	}
	for _, f := range append(accts.Foreign, jobs.Foreign...) {
		st.Problems = append(st.Problems, fmt.Sprintf("ledger: left out %v", f))
	}
	for _, j := range jobs.Jobs {
		st.Jobs[j.State]++
	}
	st.Accounts = AccountsSummary{Total: len(accts.Accounts), Near: []NearCapInfo{}}
	for _, a := range accts.Accounts {
		if n, ok := nearCap(a); ok {
			st.Accounts.Near = append(st.Accounts.Near, n)
		}
	}
	return nil
}

// nearCap says whether a is at or past NearCapPercent of a cap, or has
// jobs held until it can pay, and which.
func nearCap(a *ledger.Account) (NearCapInfo, bool) {
	n := NearCapInfo{Account: a.ID, RunningJobs: a.RunningJobs, MaxRunningJobs: a.Limits.MaxRunningJobs,
		RunningGPUs: a.RunningGPUs, MaxRunningGPUs: a.Limits.MaxRunningGPUs, Balance: a.Balance, Reserved: a.Reserved,
		Available: a.Available(), Held: len(a.HeldJobs), Why: []string{}}
	near := func(used, limit int64) bool { return limit > 0 && used*100 >= limit*NearCapPercent }
	if near(int64(a.RunningJobs), int64(a.Limits.MaxRunningJobs)) {
		n.Why = append(n.Why, fmt.Sprintf("running_jobs %d/%d", a.RunningJobs, a.Limits.MaxRunningJobs))
	}
	if near(int64(a.RunningGPUs), int64(a.Limits.MaxRunningGPUs)) {
		n.Why = append(n.Why, fmt.Sprintf("running_gpus %d/%d", a.RunningGPUs, a.Limits.MaxRunningGPUs))
	}
	// No overflow: credits are at most ledger.MaxCredits, below 2^53.
	if a.Balance <= 0 || near(int64(a.Reserved), int64(a.Balance)) {
		n.Why = append(n.Why, fmt.Sprintf("reserved %d of balance %d", a.Reserved, a.Balance))
	}
	if len(a.HeldJobs) > 0 {
		n.Why = append(n.Why, fmt.Sprintf("held %d until it can pay", len(a.HeldJobs)))
	}
	return n, len(n.Why) > 0
}

func summarizeHosts(hosts []HostStatus) HostsSummary {
	s := HostsSummary{Live: len(hosts), List: []HostStatus{}}
	for _, h := range hosts {
		if h.Simulated {
			s.Simulated++
		}
		if h.Draining {
			s.Draining++
		}
		s.GPUs += h.GPUs
		s.Free += h.Free
		s.Claimed += h.Claimed
		s.Busy += h.Busy
		s.Unhealthy += h.Unhealthy
		s.List = append(s.List, h)
	}
	return s
}

// JobStates returns the states st.Jobs counts, in lifecycle order, then
// any others by name.
func (st Status) JobStates() []ledger.JobState {
	order := []ledger.JobState{ledger.StateHeld, ledger.StatePending, ledger.StateDispatched, ledger.StateRunning,
		ledger.StateSucceeded, ledger.StateFailed, ledger.StateCancelled, ledger.StateRejected}
	var out []ledger.JobState
	for _, s := range order {
		if st.Jobs[s] > 0 {
			out = append(out, s)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(st.Jobs)) {
		if !slices.Contains(order, s) && st.Jobs[s] > 0 {
			out = append(out, s)
		}
	}
	return out
}
