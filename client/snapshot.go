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

// Snapshot is the ledger as of the scheduler's checkpoint: every account,
// job and the price table as the fold had them after command Checkpoint,
// consistent with each other and with the journal up to that command.
// Readers that compare records with each other or with the journal (an
// audit, a usage report) need it; listing and inspecting do not
// ([Client.Jobs], [Client.Accounts]).
type Snapshot struct {
	State      *ledger.State
	Checkpoint uint64
	// Refused are commands past the checkpoint that the fold will answer
	// with a rejection instead of applying, with why.
	Refused map[uint64]string
}

// snapshotAttempts bounds [Client.Snapshot]'s tries while the scheduler
// writes.
const snapshotAttempts = 5

// Snapshot reads the ledger as of its checkpoint. It reads every current
// value of the bucket; a record the scheduler stored past the checkpoint (a
// flush in progress, or one a crash cut short) is replaced by its newest
// version at or before the checkpoint, read from the key's history, and a
// job archived past the checkpoint is read back from its archive marker.
// Newer versions may push the one it needs out of a key's history while it
// reads; it then reads again, a few times. It returns an error wrapping
// [ErrForeignValue] for a value gpuq did not write, and an error if a key's
// history no longer reaches back to the checkpoint or the records break the
// ledger's invariants.
//
// This is a read of its own, not the scheduler's recovery: it changes
// nothing and remembers nothing.
func (c *Client) Snapshot(ctx context.Context) (*Snapshot, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	kv, err := c.ledgerKV(ctx)
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		snap, retry, err := c.snapshot(ctx, kv)
		if err == nil || !retry || try == snapshotAttempts || ctx.Err() != nil {
			return snap, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// checkpointRecord is the value of sched.checkpoint.
type checkpointRecord struct {
	V       int    `json:"v"`
	Seq     uint64 `json:"seq"`
	Refused []struct {
		Seq uint64 `json:"seq"`
		Why string `json:"why"`
	} `json:"refused,omitempty"`
}

// archiveMarker is the body of the removal an archive leaves at a job's
// key: the archive command's sequence and either the job's final record
// (version 1) or its account, whose history stream holds the record
// (version 2).
type archiveMarker struct {
	V        int             `json:"v"`
	Archived uint64          `json:"archived"`
	Account  string          `json:"account,omitempty"`
	Record   json.RawMessage `json:"record,omitempty"`
}

// markerRecord returns the final record of job id that archive marker m
// names: its own (version 1), or the one the archive wrote to the history
// stream (version 2).
func (c *Client) markerRecord(ctx context.Context, m archiveMarker, id string) ([]byte, error) {
	if len(m.Record) > 0 {
		return m.Record, nil
	}
	if err := subjects.CheckToken("account", m.Account); err != nil {
		return nil, fmt.Errorf("its archive marker names no account: %w", err)
	}
	h, err := c.History(ctx, m.Account, id)
	if err != nil {
		return nil, fmt.Errorf("its final record, from the history: %w", err)
	}
	if h.Seq != m.Archived {
		return nil, fmt.Errorf("the last history record of job %s is of the archive at %d, not %d", id, h.Seq, m.Archived)
	}
	return ledger.MarshalJob(h.Job)
}

func decodeMarker(data []byte) (archiveMarker, bool) {
	var m archiveMarker
	if json.Unmarshal(data, &m) != nil || m.V < 1 || m.Archived == 0 {
		return m, false
	}
	return m, true
}

// snapshot is one try of Snapshot. retry says a concurrent writer may
// explain err.
func (c *Client) snapshot(ctx context.Context, kv jetstream.KeyValue) (_ *Snapshot, retry bool, _ error) {
	latest, removed, err := c.scan(ctx, kv, ">")
	if err != nil {
		return nil, false, err
	}
	snap := &Snapshot{State: ledger.New()}
	if e, ok := latest[subjects.CheckpointKey]; ok {
		var cp checkpointRecord
		if err := json.Unmarshal(e.Value(), &cp); err != nil || cp.V < 1 {
			if err == nil {
				err = errors.New(`no version (want "v":1)`)
			}
			return nil, false, &ForeignValueError{Key: e.Key(), Revision: e.Revision(), Err: fmt.Errorf("decode the checkpoint: %w", err)}
		}
		snap.Checkpoint = cp.Seq
		for _, r := range cp.Refused {
			if r.Seq > cp.Seq {
				if snap.Refused == nil {
					snap.Refused = map[uint64]string{}
				}
				snap.Refused[r.Seq] = r.Why
			}
		}
	}
	st, cp := snap.State, snap.Checkpoint
	st.Seq = cp
	ahead := false
	for _, key := range slices.Sorted(maps.Keys(latest)) {
		e := latest[key]
		kind, id, err := recordKind(key)
		if err != nil {
			continue // sched.checkpoint, sched.leader, or a key gpuq does not read
		}
		seq, err := addRecord(st, kind, id, e.Value())
		if err != nil {
			return nil, false, &ForeignValueError{Key: key, Revision: e.Revision(), Err: err}
		}
		if seq > cp {
			ahead = true
			if err := c.rewind(ctx, kv, st, kind, id, key, cp); err != nil {
				return nil, true, err
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(removed)) {
		kind, id, err := recordKind(key)
		if err != nil || kind != "job" {
			continue
		}
		m, ok := decodeMarker(removed[key].Value())
		if !ok || m.Archived <= cp {
			continue // archived by the checkpoint, or removed by someone else
		}
		ahead = true
		record, err := c.markerRecord(ctx, m, id)
		if err != nil {
			return nil, false, fmt.Errorf("%s: archived at %d, past checkpoint %d: %w", key, m.Archived, cp, err)
		}
		seq, err := addRecord(st, kind, id, record)
		if err != nil {
			return nil, false, &ForeignValueError{Key: key, Revision: removed[key].Revision(), Err: fmt.Errorf("the record its archive marker names: %w", err)}
		}
		if seq > cp {
			return nil, true, fmt.Errorf("%s: archived at %d, past checkpoint %d, from a record at %d, also past it", key, m.Archived, cp, seq)
		}
	}
	if err := st.CheckInvariants(); err != nil {
		return nil, ahead, fmt.Errorf("the stored ledger breaks its invariants: %w", err)
	}
	return snap, false, nil
}

// recordKind returns the kind of record a ledger key holds: "account",
// "job" or "pricing"; an error for any other key.
func recordKind(key string) (kind, id string, err error) {
	if key == subjects.PricingKey {
		return "pricing", "", nil
	}
	kind, id, err = subjects.ParseKey(key)
	if err == nil && kind != "account" && kind != "job" {
		err = fmt.Errorf("%s is not a record", key)
	}
	return kind, id, err
}

// addRecord decodes a record of kind (with id) into st and returns the
// sequence of the command that last wrote it.
func addRecord(st *ledger.State, kind, id string, data []byte) (uint64, error) {
	switch kind {
	case "account":
		a, got, err := decodeAccount(data)
		if err == nil && got != id {
			err = fmt.Errorf("the record is of account %q", got)
		}
		if err != nil {
			return 0, err
		}
		st.Accounts[id] = a
		return a.Seq, nil
	case "job":
		j, got, err := decodeJob(data)
		if err == nil && got != id {
			err = fmt.Errorf("the record is of job %q", got)
		}
		if err != nil {
			return 0, err
		}
		st.Jobs[id] = j
		return j.Seq, nil
	default:
		p, err := ledger.UnmarshalPricing(data)
		if err != nil {
			return 0, err
		}
		st.Pricing = p
		return p.Seq, nil
	}
}

// rewind replaces the record at key in st by its newest version at or
// before checkpoint cp, from the key's history; a key with no version at or
// before cp did not exist then, unless its history was cut short.
func (c *Client) rewind(ctx context.Context, kv jetstream.KeyValue, st *ledger.State, kind, id, key string, cp uint64) error {
	switch kind {
	case "account":
		delete(st.Accounts, id)
	case "job":
		delete(st.Jobs, id)
	default:
		st.Pricing = nil
	}
	hctx, cancel := context.WithTimeout(ctx, scanIdle)
	defer cancel()
	hist, err := kv.History(hctx, key)
	if err != nil {
		return fmt.Errorf("history of %s: %w", key, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Operation() != jetstream.KeyValuePut {
			// Removed before the versions past the checkpoint: by an
			// archive past it too, the record it removed is the one.
			if m, ok := decodeMarker(e.Value()); ok && kind == "job" && m.Archived > cp {
				record, err := c.markerRecord(ctx, m, id)
				if err != nil {
					return fmt.Errorf("history of %s revision %d: %w", key, e.Revision(), err)
				}
				seq, err := addRecord(st, kind, id, record)
				if err == nil && seq > cp {
					err = fmt.Errorf("its archive marker's record is at %d, past checkpoint %d", seq, cp)
				}
				if err != nil {
					return fmt.Errorf("history of %s revision %d: %w", key, e.Revision(), err)
				}
			}
			return nil
		}
		seq, err := addRecord(ledger.New(), kind, id, e.Value())
		if err != nil {
			return fmt.Errorf("history of %s revision %d: %w", key, e.Revision(), err)
		}
		if seq <= cp {
			_, err := addRecord(st, kind, id, e.Value())
			return err
		}
	}
	status, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("status of %s: %w", kv.Bucket(), err)
	}
	if len(hist) >= int(status.History()) {
		return fmt.Errorf("%s: every one of its %d stored versions is newer than checkpoint %d, so its state at the checkpoint is lost; raise the bucket's history", key, len(hist), cp)
	}
	return nil // created after the checkpoint
}
