package client

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// AuditOptions say how [Client.Audit] reads.
type AuditOptions struct {
	// Full reads and checks every account's whole journal from the start,
	// not only from its newest seal.
	Full bool
	// SealMargin is how long before each account's newest seal (by its
	// command's time) to start reading its journal: the most the journal
	// stream's server clock may run behind the command stream's. Zero
	// means [SealMargin]; a negative margin means none (the two streams are
	// stamped by one clock).
	SealMargin time.Duration
	// StuckAfter is how long a command may wait unapplied before the audit
	// says the scheduler is stuck; zero means 2 minutes, and a negative one
	// counts any unapplied command as stuck.
	StuckAfter time.Duration
	// Now is the time the wait of the first unapplied command is measured
	// against; zero means the local clock's now.
	Now time.Time
}

// AuditReport is what [Client.Audit] found.
type AuditReport struct {
	Checkpoint  uint64   `json:"checkpoint"`
	Accounts    int      `json:"accounts"`
	Entries     int      `json:"entries"`
	OK          bool     `json:"ok"`
	Differences []string `json:"differences"`
	// From is where each account's journal was read from: "seals" (its
	// newest seal on) or "start" (Full). Read is how many journal messages
	// were read, Stored how many the journal stream holds (from seals
	// only), Whole the accounts read whole after all, and why.
	From   string   `json:"from"`
	Read   uint64   `json:"read"`
	Stored uint64   `json:"stored,omitempty"`
	Whole  []string `json:"whole,omitempty"`
	// LogLast is the command log's last sequence; Stuck is set when the
	// oldest command past the checkpoint has waited longer than
	// StuckAfter.
	LogLast uint64       `json:"log_last"`
	Stuck   *StuckFold   `json:"stuck,omitempty"`
	Refused []RefusedSeq `json:"refused,omitempty"`
}

// StuckFold is a command the scheduler has not applied for too long.
type StuckFold struct {
	Seq     uint64        `json:"seq"`
	Subject string        `json:"subject"`
	Since   time.Time     `json:"since"`
	Waited  time.Duration `json:"waited_ns"`
	Message string        `json:"message"`
}

// RefusedSeq is a command a scheduler found it could not store the outcome
// of, answered with a rejection when it is folded.
type RefusedSeq struct {
	Seq uint64 `json:"seq"`
	Why string `json:"why"`
}

// Audit recomputes every balance from the journal and compares it with the
// ledger, and says whether the scheduler keeps up with the command log.
//
// It reads the ledger as of its checkpoint ([Client.Snapshot]: the journal
// holds every entry of the commands up to the checkpoint, and may hold some
// of a flush in progress past it, which are left out), then the journal
// (and what an older version left of it in the events stream), and checks
// every account's hash chain and the balances recomputed from it
// ([ledger.AuditJournal]) and the ledger's invariants. Unless Full, each
// account's journal is read only from its newest seal on, in time
// proportional to the journal since the seals; an account whose read does
// not verify from its seal ([ledger.CheckFromSeal]) is read whole, and the
// report's Whole says so. It needs an admin's rights.
//
// A disagreement is a difference in the report, not an error; the error is
// for a read that failed.
func (c *Client) Audit(ctx context.Context, o AuditOptions) (AuditReport, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	if o.SealMargin == 0 {
		o.SealMargin = SealMargin
	}
	if o.StuckAfter == 0 {
		o.StuckAfter = 2 * time.Minute
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	snap, err := c.Snapshot(ctx)
	if err != nil {
		return AuditReport{}, err
	}
	rep := AuditReport{Checkpoint: snap.Checkpoint, Accounts: len(snap.State.Accounts), Differences: []string{}, From: "seals"}
	var j Journal
	if o.Full {
		rep.From = "start"
		j, err = c.Journal(ctx, time.Time{})
	} else {
		j, err = c.JournalFromSeals(ctx, snap.State, snap.Checkpoint, o.SealMargin)
	}
	if err != nil {
		return rep, err
	}
	rep.Read, rep.Stored, rep.Whole = j.Read, j.Stored, j.Whole
	rep.Differences = append(rep.Differences, j.Bad...)
	n, errs := ledger.AuditJournal(snap.State, snap.Checkpoint, j.Chained, j.Legacy)
	rep.Entries = n
	for _, err := range errs {
		rep.Differences = append(rep.Differences, strings.Split(err.Error(), "\n")...)
	}
	if err := snap.State.CheckInvariants(); err != nil {
		rep.Differences = append(rep.Differences, strings.Split(err.Error(), "\n")...)
	}
	rep.LogLast, rep.Stuck, err = c.stuck(ctx, snap.Checkpoint, o.StuckAfter, o.Now)
	if err != nil {
		return rep, err
	}
	for _, seq := range slices.Sorted(maps.Keys(snap.Refused)) {
		rep.Refused = append(rep.Refused, RefusedSeq{Seq: seq, Why: snap.Refused[seq]})
	}
	if rep.Stuck != nil {
		rep.Differences = append(rep.Differences, rep.Stuck.Message)
	}
	rep.OK = len(rep.Differences) == 0
	return rep, nil
}

// stuck reports the command log's last sequence, and the oldest command
// past checkpoint if it was stored more than after ago (by the server's
// clock, which stamped it, as against now).
func (c *Client) stuck(ctx context.Context, checkpoint uint64, after time.Duration, now time.Time) (uint64, *StuckFold, error) {
	stream, err := c.js.Stream(ctx, c.n.CmdStream())
	if err != nil {
		return 0, nil, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, nil, err
	}
	last := info.State.LastSeq
	if last <= checkpoint {
		return last, nil, nil
	}
	next := max(checkpoint+1, info.State.FirstSeq)
	m, err := stream.GetMsg(ctx, next)
	if err != nil {
		return last, nil, fmt.Errorf("read command %d, the first past checkpoint %d: %w", next, checkpoint, err)
	}
	waited := now.Sub(m.Time)
	if waited <= after {
		return last, nil, nil
	}
	return last, &StuckFold{Seq: next, Subject: m.Subject, Since: m.Time, Waited: waited,
		Message: fmt.Sprintf("the scheduler is stuck: command %d (%s), stored %s, has waited %v unapplied; the log's last command is %d and the checkpoint %d (is a scheduler running? see its log)",
			next, m.Subject, m.Time.UTC().Format(time.RFC3339), waited.Round(time.Second), last, checkpoint)}, nil
}
