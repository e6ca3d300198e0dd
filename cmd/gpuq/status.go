package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpuq/gpuq/client"
)

func init() {
	register(&command{
		name:    "status",
		summary: "the installation at a glance: leader, standbys, checkpoint and lag, streams, hosts, jobs, accounts near their caps",
		usage:   "status",
		example: `  gpuq status
  gpuq status --output json | jq .checkpoint.lag
  # run it as the admin (deploy/): it reads the lease, the whole ledger view, the hosts bucket and every stream's info`,
		run: runStatus,
	})
}

func runStatus(ctx context.Context, e *env, args []string) error {
	c := find("status")
	fs := e.flags(c)
	s, err := e.noArgs(c, fs, args)
	if err != nil {
		return err
	}
	defer s.close()
	st, err := s.c.Status(ctx)
	if err != nil {
		return bucketHint(err)
	}
	if e.output == "json" {
		return printJSON(e.stdout, st)
	}
	return printStatus(e, st)
}

func printStatus(e *env, st client.Status) error {
	w := e.stdout
	if l := st.Leader; l != nil {
		since := "since unknown (a scheduler older than the lease's since field)"
		if !l.Since.IsZero() {
			since = fmt.Sprintf("since %s (%s)", when(l.Since), ago(l.For))
		}
		fmt.Fprintf(w, "leader      %s, %s; renewed %s, ttl %s\n", l.Name, since, ago(client.Duration(st.Read.Sub(l.Renewed))), l.TTL)
	} else {
		fmt.Fprintln(w, "leader      none: no scheduler holds the lease (start one with gpuq scheduler, or gpuq dev)")
	}
	switch sb := st.Standbys; {
	case !sb.Known:
		fmt.Fprintln(w, "standbys    unknown (see problems)")
	case len(sb.List) == 0:
		fmt.Fprintln(w, "standbys    none announced")
	default:
		var names []string
		for _, s := range sb.List {
			names = append(names, fmt.Sprintf("%s (%s)", s.Name, ago(client.Duration(st.Read.Sub(s.Announced)))))
		}
		fmt.Fprintf(w, "standbys    %s\n", strings.Join(names, ", "))
	}
	cp := st.Checkpoint
	moved := "never written"
	if !cp.Written.IsZero() {
		moved = "moved " + ago(cp.Age)
	}
	fmt.Fprintf(w, "checkpoint  %d (%s); log %d..%d; lag %d command(s)", cp.Seq, moved, cp.LogFirst, cp.LogLast, cp.Lag)
	if cp.Refused > 0 {
		fmt.Fprintf(w, "; %d refused", cp.Refused)
	}
	fmt.Fprintln(w)
	h := st.Hosts
	fmt.Fprintf(w, "hosts       %d live (%d simulated, %d draining); GPUs %d: %d free, %d claimed, %d busy, %d unhealthy\n",
		h.Live, h.Simulated, h.Draining, h.GPUs, h.Free, h.Claimed, h.Busy, h.Unhealthy)
	var jobs []string
	for _, s := range st.JobStates() {
		jobs = append(jobs, fmt.Sprintf("%d %s", st.Jobs[s], s))
	}
	if len(jobs) == 0 {
		jobs = []string{"none"}
	}
	fmt.Fprintf(w, "jobs        %s\n", strings.Join(jobs, ", "))
	fmt.Fprintf(w, "accounts    %d, %d near a cap (%d%%)\n", st.Accounts.Total, len(st.Accounts.Near), client.NearCapPercent)

	fmt.Fprintln(w)
	t := newTable(w, "STREAM", "KIND", "REPLICAS", "MESSAGES", "BYTES", "FIRST", "LAST", "CONSUMERS", "LEADER")
	for _, s := range st.Streams {
		if s.Error != "" {
			t.row(s.Name, s.Kind, "-", "-", "-", "-", "-", "-", "unreadable")
			continue
		}
		leader := "-"
		if s.Leader != "" {
			leader = fmt.Sprintf("%s (%d/%d current)", s.Leader, s.Current, s.Replicas)
		}
		t.row(s.Name, s.Kind, s.Replicas, s.Messages, bytesText(s.Bytes), s.FirstSeq, s.LastSeq, s.Consumers, leader)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if len(h.List) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "HOST", "KIND", "GPUS", "FREE", "CLAIMED", "BUSY", "UNHEALTHY", "RUNNING", "SEEN")
		for _, v := range h.List {
			t.row(v.Host, v.Kind(), v.GPUs, v.Free, v.Claimed, v.Busy, v.Unhealthy, len(v.Running), when(v.Seen))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(st.Accounts.Near) > 0 {
		fmt.Fprintln(w)
		t := newTable(w, "ACCOUNT", "JOBS", "GPUS", "BALANCE", "RESERVED", "AVAILABLE", "HELD", "NEAR")
		for _, a := range st.Accounts.Near {
			t.row(a.Account, usedOf(a.RunningJobs, a.MaxRunningJobs), usedOf(a.RunningGPUs, a.MaxRunningGPUs),
				a.Balance, a.Reserved, a.Available, a.Held, strings.Join(a.Why, "; "))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if len(st.Problems) > 0 {
		fmt.Fprintln(w, "\nproblems:")
		for _, p := range st.Problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	return nil
}

// ago says how long ago d was, rounded for people.
func ago(d client.Duration) string {
	v := time.Duration(d)
	switch {
	case v < 0:
		return "just now"
	case v < time.Minute:
		return v.Round(100*time.Millisecond).String() + " ago"
	default:
		return v.Round(time.Second).String() + " ago"
	}
}

// usedOf is used/limit, or used alone when there is no limit.
func usedOf(used, limit int) string {
	if limit == 0 {
		return fmt.Sprint(used)
	}
	return fmt.Sprintf("%d/%d", used, limit)
}

// bytesText is n bytes in binary units.
func bytesText(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
