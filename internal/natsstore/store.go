// Package natsstore keeps the scheduler's ledger view in a JetStream KV
// bucket with compare-and-swap writes, and holds the leader lease in the same
// bucket. It implements scheduler.Store and scheduler.Lease.
//
// Every call is bounded in time, so a server that goes away makes calls fail
// rather than hang: a lease try lasts at most the lease's TTL (and 5s), a
// load gives up after 10s without a value, a flush after 10s without its
// acknowledgements. Failures no retry can mend (a bucket without per-key
// TTLs, a closed connection) wrap scheduler.ErrMisconfigured; the scheduler
// retries the rest.
package natsstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// Store is the ledger view in bucket gpuq_ledger. It remembers the revision
// and sequence of every key it loaded or wrote; every write is conditioned on
// the remembered revision. A Store serves one leadership term: Load again
// after a new lease. Within a term, Write may run while another Write or a
// Checkpoint does (the scheduler's flush stages overlap), on other keys;
// Load and Repair run alone.
type Store struct {
	js jetstream.JetStream
	kv jetstream.KeyValue
	// Names names the history stream an archived job's final record is
	// read back from when a load finds its archive past the checkpoint.
	// New sets it to subjects.Default; set it before Load for another
	// prefix.
	Names subjects.Names
	// mu guards keys, cp and refused while writes overlap; it is never
	// held across a round trip.
	mu sync.Mutex
	// keys holds, by ledger key, the revision this store last read or
	// wrote and the log sequence its value carries (0 where none is known).
	keys map[string]stored
	// cp is the checkpoint as last loaded or written, and refused the
	// refusals above it.
	cp      uint64
	refused map[uint64]string
}

// New returns a store over kv, the ledger bucket, published to through js.
func New(js jetstream.JetStream, kv jetstream.KeyValue) *Store {
	return &Store{js: js, kv: kv, Names: subjects.Default, keys: map[string]stored{}}
}

// stored is what a Store knows of a key's stored value: its revision and the
// log sequence it carries. One map of both, not a map of each: a takeover
// holds one entry per job.
type stored struct {
	rev, seq uint64
}

type checkpoint struct {
	V   int    `json:"v"`
	Seq uint64 `json:"seq"`
	// Refused are commands above Seq the fold answers with a rejection
	// instead of applying (scheduler.Store.Refuse).
	Refused []refusal `json:"refused,omitempty"`
}

type refusal struct {
	Seq uint64 `json:"seq"`
	Why string `json:"why"`
}

// Load reads every record and returns the view as of the checkpoint. A
// record stored after the checkpoint (a flush cut short by a crash, or in
// progress) is replaced by its last version at or before the checkpoint,
// read from the key's history; a record created after the checkpoint is
// left out.
//
// A reader that is not the scheduler (gpuq jobs, gpuq audit) may load while
// the scheduler writes, and newer versions may push the one it needs out of
// a key's history; Load then tries again, up to loadAttempts times. It fails
// if a key's history still does not reach back to the checkpoint, or the
// view breaks the ledger's invariants.
func (s *Store) Load(ctx context.Context) (*scheduler.View, error) {
	var err error
	for range loadAttempts {
		var view *scheduler.View
		var retry bool
		view, retry, err = s.load(ctx)
		if err == nil || !retry || ctx.Err() != nil {
			return view, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil, err
}

// loadAttempts bounds Load's tries while the scheduler writes.
const loadAttempts = 5

// loadIdleTimeout bounds how long Load waits for the next value of the
// bucket, or for a key's history.
const loadIdleTimeout = 10 * time.Second

// load is one try of Load. retry says a concurrent writer may explain err.
func (s *Store) load(ctx context.Context) (_ *scheduler.View, retry bool, _ error) {
	s.keys = map[string]stored{}
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("watch %s: %w", s.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }() // the watch only served the initial values
	latest := map[string]*loaded{}
	removed := map[string]jetstream.KeyValueEntry{} // keys whose last operation removed them
	// Job records, nearly all of a large ledger, are decoded as they come,
	// by decoders of their own, while the watch delivers the rest; a key
	// whose value a newer one replaces meanwhile is decoded again.
	dec := startDecoders()
	defer dec.wait() // ends them when the load fails too
	sized := false
	// The watch delivers every current value and then a nil marker. If the
	// server goes away meanwhile nothing more comes, so a pause longer than
	// loadIdleTimeout ends the load rather than hang it.
	idle := time.NewTimer(loadIdleTimeout)
	defer idle.Stop()
	// The nil marker can come before the values of keys written while the
	// watch starts: the server skips a key's value that a newer one
	// replaced, and may count the newer one as not pending yet. So once it
	// has come, the load reads on until it has seen the bucket's last
	// message as of then; it then holds every key's last value up to that
	// message, missing none. (The lease's delete marker is removed a
	// second after it is written, so "last" is the last message that
	// still exists, not the stream's last sequence.)
	var last, seen uint64
	marked := false
	for !marked || seen < last {
		select {
		case e, ok := <-w.Updates():
			switch {
			case !ok:
				if err := ctx.Err(); err != nil {
					return nil, false, err
				}
				return nil, false, fmt.Errorf("watch %s: ended before its initial values", s.kv.Bucket())
			case e == nil:
				marked = true
				if last, err = s.lastSeq(ctx); err != nil {
					return nil, false, err
				}
				continue
			}
			if !sized {
				// The first value says how many follow: size the maps
				// once rather than grow them a million times.
				sized = true
				n := int(min(e.Delta(), maxPresize)) + 1
				latest = make(map[string]*loaded, n)
			}
			seen = max(seen, e.Revision())
			// The key is a part of the message's subject: a copy of its
			// own, kept by the store's maps for the term, lets the
			// subject go.
			key := strings.Clone(e.Key())
			if e.Operation() == jetstream.KeyValuePut {
				l := &loaded{e: e}
				latest[key] = l
				if kind, id, err := subjects.ParseKey(key); err == nil && kind == "job" {
					l.id = id
					dec.decode(l)
				}
				delete(removed, key)
			} else {
				delete(latest, key)
				removed[key] = e
			}
			idle.Reset(loadIdleTimeout)
		case <-idle.C:
			return nil, false, fmt.Errorf("watch %s: no value for %v after %d (last seen %d of %d)", s.kv.Bucket(), loadIdleTimeout, len(latest)+len(removed), seen, last)
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	dec.wait()
	view := &scheduler.View{State: ledger.New()}
	view.State.Jobs = make(map[string]*ledger.Job, len(latest))
	if l, ok := latest[subjects.CheckpointKey]; ok {
		e := l.e
		cp, err := decodeCheckpoint(e.Value())
		if err != nil {
			return nil, false, foreign(e, err)
		}
		view.Checkpoint = cp.Seq
		for _, r := range cp.Refused {
			if r.Seq > cp.Seq {
				if view.Refused == nil {
					view.Refused = map[uint64]string{}
				}
				view.Refused[r.Seq] = r.Why
			}
		}
	}
	s.cp, s.refused = view.Checkpoint, maps.Clone(view.Refused)
	view.State.Seq = view.Checkpoint
	limit := 0 // the bucket's history setting, read when a rewind first needs it
	history := func() (int, error) {
		if limit == 0 {
			status, err := s.kv.Status(ctx)
			if err != nil {
				return 0, fmt.Errorf("status of %s: %w", s.kv.Bucket(), err)
			}
			limit = int(status.History())
		}
		return limit, nil
	}
	// The revisions are recorded once the watch is done, with the
	// sequences: one map write per key.
	s.keys = make(map[string]stored, len(latest)+len(removed))
	accounts := map[string]string{}
	for key, l := range latest {
		e := l.e
		var kind, id string
		var seq uint64
		if l.decoded {
			if l.err != nil {
				return nil, false, foreign(e, l.err)
			}
			kind, id, seq = "job", l.id, l.job.Seq
			// The job's id and account are the key's (a part of it, as
			// the decoder left it) and one string per account (each
			// decoder has its own), not copies of their own: what a
			// pending job costs is most of what a takeover holds.
			if a, ok := accounts[l.job.Account]; ok {
				l.job.Account = a
			} else {
				accounts[l.job.Account] = l.job.Account
			}
			view.State.Jobs[id] = l.job
		} else {
			kind, id, err = subjects.ParseKey(key)
			if key == subjects.PricingKey {
				kind = "pricing"
			} else if err != nil || kind == "sched" {
				s.keys[key] = stored{rev: e.Revision()}
				continue
			}
			if seq, err = s.add(view.State, kind, id, e.Value()); err != nil {
				return nil, false, foreign(e, err)
			}
		}
		s.keys[key] = stored{rev: e.Revision(), seq: seq}
		view.Ahead = max(view.Ahead, seq)
		if seq > view.Checkpoint {
			if err := s.rewind(ctx, view.State, kind, id, key, view.Checkpoint, history); err != nil {
				return nil, true, err
			}
		}
	}
	for key, e := range removed {
		s.keys[key] = stored{rev: e.Revision()}
		if err := s.unarchive(ctx, view, key, e); err != nil {
			return nil, false, err
		}
	}
	if err := view.State.CheckInvariants(); err != nil {
		return nil, view.Ahead > view.Checkpoint, fmt.Errorf("the stored ledger breaks its invariants: %w", err)
	}
	return view, false, nil
}

// setSeq records the log sequence key's stored value carries.
func (s *Store) setSeq(key string, seq uint64) {
	k := s.keys[key]
	k.seq = seq
	s.keys[key] = k
}

// maxPresize bounds the capacity a load gives its maps from the count the
// watch announces.
const maxPresize = 1 << 24

// loaded is a key's value as a load read it, with, for a job record, the
// job it decodes to (set by a decoder, read once the decoders are done).
type loaded struct {
	e       jetstream.KeyValueEntry
	id      string // of the job, for a job record
	decoded bool
	job     *ledger.Job
	err     error
}

// decoders decode job records for a load, on as many goroutines as there
// are processors.
type decoders struct {
	work chan *loaded
	wg   sync.WaitGroup
	once sync.Once
}

func startDecoders() *decoders {
	d := &decoders{work: make(chan *loaded, 4096)}
	for range max(runtime.GOMAXPROCS(0), 1) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			var jd ledger.JobDecoder // each decoder its own: not safe for concurrent use
			for l := range d.work {
				l.decodeJob(&jd)
			}
		}()
	}
	return d
}

// decode queues l, a job record, to be decoded.
func (d *decoders) decode(l *loaded) { d.work <- l }

// wait returns once every queued record is decoded; no more may be queued.
func (d *decoders) wait() {
	d.once.Do(func() { close(d.work) })
	d.wg.Wait()
}

// decodeJob decodes l's value, the record at a job key, refusing one that
// names another job. The job's id is the key's, its account jd's string.
func (l *loaded) decodeJob(jd *ledger.JobDecoder) {
	l.decoded = true
	j, err := jd.Unmarshal(l.e.Value(), l.id)
	switch {
	case err != nil:
		l.err = err
	case j.ID != l.id:
		l.err = fmt.Errorf("the record is of job %q", j.ID)
	default:
		l.job = j
	}
}

// ArchiveMarkerTTL is how long the marker an archive leaves at a job's
// key lives. The marker names the archive's sequence and the job's account,
// not its record: the record is in the history stream, written before the
// delete. A load whose checkpoint is below the archive (a flush cut short
// after the delete) reads the record back from the history for the archive
// to be applied again; once the checkpoint is past it, which takes a flush,
// nothing needs it. A load after the marker expired, with the checkpoint
// still below the archive (no scheduler led for an hour after a crash in
// the middle of a flush), finds the job gone: the archive applied again is
// answered that the ledger no longer holds the job, which moves no credit,
// and the history already holds the record.
//
// Every load reads the markers still alive, so their life bounds what a
// takeover pays for recent archives: at a million archives a day, about
// 40,000 markers of about 100 bytes.
const ArchiveMarkerTTL = time.Hour

// archiveMarker is the body of the marker an archive leaves at a job's
// key. Version 1 markers (written by earlier versions) held the record itself;
// version 2 ones name the account whose history holds it.
type archiveMarker struct {
	V        int             `json:"v"`
	Archived uint64          `json:"archived"`          // the archive command's sequence
	Account  string          `json:"account,omitempty"` // v2: the job's account, naming its history subject
	Record   json.RawMessage `json:"record,omitempty"`  // v1: the job's final record
}

// unarchive handles a job key whose last operation removed it. A delete
// gpuq made (an archive) records its sequence; one past the checkpoint is
// undone in the view: the record it removed is put back, as of the
// checkpoint, and the next flush must reach the archive again. Any other
// removal leaves the key absent.
func (s *Store) unarchive(ctx context.Context, view *scheduler.View, key string, e jetstream.KeyValueEntry) error {
	kind, id, err := subjects.ParseKey(key)
	if err != nil || kind != "job" {
		return nil
	}
	var m archiveMarker
	if json.Unmarshal(e.Value(), &m) != nil || m.V < 1 || m.Archived == 0 {
		return nil // removed by someone else: absent, as before archives
	}
	s.setSeq(key, m.Archived)
	view.Ahead = max(view.Ahead, m.Archived)
	if m.Archived <= view.Checkpoint {
		return nil
	}
	record := []byte(m.Record)
	if len(record) == 0 {
		if record, err = s.archivedRecord(ctx, m.Account, id, m.Archived); err != nil {
			return fmt.Errorf("%s: archived at %d, past checkpoint %d: %w", key, m.Archived, view.Checkpoint, err)
		}
	}
	seq, err := s.add(view.State, kind, id, record)
	if err != nil {
		return foreign(e, fmt.Errorf("the record its archive marker names: %w", err))
	}
	if seq > view.Checkpoint {
		return fmt.Errorf("%s: archived at %d, past checkpoint %d, from a record at %d, also past it: its state at the checkpoint is lost", key, m.Archived, view.Checkpoint, seq)
	}
	return nil
}

// archivedRecord reads the final record of job of account from the history
// stream, as the archive at seq wrote it there.
func (s *Store) archivedRecord(ctx context.Context, account, job string, seq uint64) ([]byte, error) {
	if subjects.CheckToken("account", account) != nil {
		return nil, fmt.Errorf("its archive marker names account %q", account)
	}
	subject := s.Names.History(account, job)
	str, err := s.js.Stream(ctx, s.Names.HistoryStream())
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", s.Names.HistoryStream(), err)
	}
	msg, err := str.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("its final record is not in %s at %s (removed by the history's limits?): its state at the checkpoint is lost", s.Names.HistoryStream(), subject)
	}
	if err != nil {
		return nil, fmt.Errorf("read its final record from %s: %w", subject, err)
	}
	h, err := wire.DecodeHistory(s.Names, msg.Subject, msg.Data)
	if err != nil {
		return nil, fmt.Errorf("its final record at %s: %w", subject, err)
	}
	if h.Seq != seq {
		return nil, fmt.Errorf("the last record at %s is of the archive at %d, not %d", subject, h.Seq, seq)
	}
	return ledger.MarshalJob(h.Job)
}

// lastSeq returns the sequence of the last message of the bucket's stream.
// It asks for the last message that still exists: the stream's LastSeq
// may name one already removed (a lease's delete marker ages out a second
// after it is written), which the watch would never deliver.
func (s *Store) lastSeq(ctx context.Context) (uint64, error) {
	stream := "KV_" + s.kv.Bucket()
	str, err := s.js.Stream(ctx, stream)
	if err != nil {
		return 0, fmt.Errorf("look up %s: %w", stream, err)
	}
	m, err := str.GetLastMsgForSubject(ctx, subjects.KVSubject(s.kv.Bucket(), ">"))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("the last message of %s: %w", stream, err)
	}
	return m.Sequence, nil
}

// decodeCheckpoint decodes the checkpoint record, refusing a value that is
// not one (a JSON object without "v" decodes to the zero checkpoint, which
// would replay the whole log).
func decodeCheckpoint(data []byte) (checkpoint, error) {
	var cp checkpoint
	if err := json.Unmarshal(data, &cp); err != nil {
		return cp, fmt.Errorf("decode the checkpoint: %w", err)
	}
	if cp.V < 1 {
		return cp, fmt.Errorf("decode the checkpoint: no version (want \"v\":1)")
	}
	return cp, nil
}

// ForeignValueError is a ledger key whose value gpuq did not write.
type ForeignValueError struct {
	Key      string
	Revision uint64
	Err      error
	Value    []byte // its first bytes, for the report
}

func (e *ForeignValueError) Error() string {
	return fmt.Sprintf("%s revision %d holds a value gpuq did not write (%v), starting %q", e.Key, e.Revision, e.Err, e.Value)
}

func (e *ForeignValueError) Unwrap() []error { return []error{scheduler.ErrForeignValue, e.Err} }

func foreign(e jetstream.KeyValueEntry, err error) *ForeignValueError {
	v := e.Value()
	if len(v) > 80 {
		v = v[:80]
	}
	return &ForeignValueError{Key: e.Key(), Revision: e.Revision(), Err: err, Value: bytes.Clone(v)}
}

// valid reports whether data, stored at key, is a value gpuq writes there.
func (s *Store) valid(key string, data []byte) error {
	if key == subjects.CheckpointKey {
		_, err := decodeCheckpoint(data)
		return err
	}
	kind, id, err := subjects.ParseKey(key)
	if key == subjects.PricingKey {
		kind = "pricing"
	} else if err != nil {
		return err
	}
	_, err = s.add(ledger.New(), kind, id, data)
	return err
}

// Repair puts back, at the key a *ForeignValueError names, the newest
// revision of its history that gpuq wrote, with a compare-and-swap on the
// foreign revision, so that a value another client put at a ledger key
// does not keep every scheduler from loading the ledger. It fails, saying
// what is wrong, when the history holds no such revision (the bucket keeps
// too little history, or the key never held a gpuq value).
func (s *Store) Repair(ctx context.Context, err error) (string, error) {
	var fe *ForeignValueError
	if !errors.As(err, &fe) {
		return "", fmt.Errorf("repair: %w is not a foreign value", err)
	}
	hctx, cancel := context.WithTimeout(ctx, loadIdleTimeout)
	defer cancel()
	hist, herr := s.kv.History(hctx, fe.Key)
	if herr != nil {
		return "", fmt.Errorf("repair %s: history: %w", fe.Key, herr)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Revision() >= fe.Revision || e.Operation() != jetstream.KeyValuePut {
			continue
		}
		if s.valid(fe.Key, e.Value()) != nil {
			continue
		}
		rev, uerr := s.kv.Update(ctx, fe.Key, e.Value(), fe.Revision)
		if uerr != nil {
			return "", fmt.Errorf("repair %s: restore revision %d over foreign revision %d: %w", fe.Key, e.Revision(), fe.Revision, mapConflict(uerr))
		}
		return fmt.Sprintf("%s: restored the value of revision %d (as revision %d) over foreign revision %d", fe.Key, e.Revision(), rev, fe.Revision), nil
	}
	return "", fmt.Errorf("%w; its history (%d versions) holds no value gpuq wrote before it, so it cannot be restored: put the record back from a backup, or delete the key if the record never existed", fe, len(hist))
}

// add decodes a stored record of key kind.id into st and returns its
// sequence. A record that names another id than its key's is refused.
func (s *Store) add(st *ledger.State, kind, id string, data []byte) (uint64, error) {
	switch kind {
	case "account":
		a, err := ledger.UnmarshalAccount(data)
		if err != nil {
			return 0, err
		}
		if a.ID != id {
			return 0, fmt.Errorf("the record is of account %q", a.ID)
		}
		st.Accounts[a.ID] = a
		return a.Seq, nil
	case "job":
		j, err := ledger.UnmarshalJob(data)
		if err != nil {
			return 0, err
		}
		if j.ID != id {
			return 0, fmt.Errorf("the record is of job %q", j.ID)
		}
		st.Jobs[j.ID] = j
		return j.Seq, nil
	case "pricing":
		p, err := ledger.UnmarshalPricing(data)
		if err != nil {
			return 0, err
		}
		st.Pricing = p
		return p.Seq, nil
	}
	return 0, fmt.Errorf("unknown record kind %q", kind)
}

// rewind replaces the record at key (of kind, with id) in st by its newest
// version at or before checkpoint cp. history returns the bucket's history
// setting, which tells a key created after cp from one whose versions at or
// before cp were pushed out of its history.
func (s *Store) rewind(ctx context.Context, st *ledger.State, kind, id, key string, cp uint64, history func() (int, error)) error {
	switch kind {
	case "account":
		delete(st.Accounts, id)
	case "job":
		delete(st.Jobs, id)
	case "pricing":
		st.Pricing = nil
	}
	// History waits for its watch's end marker, which a server gone away
	// never sends: bound it.
	hctx, cancel := context.WithTimeout(ctx, loadIdleTimeout)
	defer cancel()
	hist, err := s.kv.History(hctx, key)
	if err != nil {
		return fmt.Errorf("history of %s: %w", key, err)
	}
	for i := len(hist) - 1; i >= 0; i-- {
		e := hist[i]
		if e.Operation() != jetstream.KeyValuePut {
			// Removed before the versions after the checkpoint: by an
			// archive past the checkpoint too (a job id used again within
			// one cut flush), the record it removed is the one.
			var m archiveMarker
			if kind == "job" && json.Unmarshal(e.Value(), &m) == nil && m.V >= 1 && m.Archived > cp {
				seq, err := s.add(st, kind, id, m.Record)
				if err == nil && seq > cp {
					err = fmt.Errorf("its archive marker's record is at %d, past checkpoint %d", seq, cp)
				}
				if err != nil {
					return fmt.Errorf("history of %s revision %d: %w", key, e.Revision(), err)
				}
			}
			return nil
		}
		probe := ledger.New()
		seq, err := s.add(probe, kind, id, e.Value())
		if err != nil {
			return fmt.Errorf("history of %s revision %d: %w", key, e.Revision(), err)
		}
		if seq <= cp {
			_, err := s.add(st, kind, id, e.Value())
			return err
		}
	}
	limit, err := history()
	if err != nil {
		return fmt.Errorf("rewind %s: %w", key, err)
	}
	if len(hist) >= limit {
		return fmt.Errorf("%s: every one of its %d stored versions is newer than checkpoint %d, so its state at the checkpoint is lost; raise the bucket's history", key, len(hist), cp)
	}
	return nil // created after the checkpoint: it did not exist then
}

// The KV API's header that marks a removal, and its value for a purge.
const (
	kvOperationHeader = "KV-Operation"
	kvPurge           = "PURGE"
)

// writeTimeout bounds the wait for a flush's acknowledgements.
const writeTimeout = 10 * time.Second

// Write stores each record with a compare-and-swap on the key's revision,
// pipelining the writes and waiting for every acknowledgement. A record whose
// stored version already carries its sequence or a later one is skipped: the
// stored value is that same state or newer.
func (s *Store) Write(ctx context.Context, recs []scheduler.Record) error {
	type pending struct {
		rec scheduler.Record
		rev uint64 // the revision the write is conditioned on
		fut jetstream.PubAckFuture
	}
	var errs []error
	timeout := time.NewTimer(writeTimeout)
	defer timeout.Stop()
	await := func(w pending) error {
		select {
		case ack := <-w.fut.Ok():
			s.mu.Lock()
			s.keys[w.rec.Key] = stored{rev: ack.Sequence, seq: w.rec.Seq}
			s.mu.Unlock()
			timeout.Reset(writeTimeout)
		case err := <-w.fut.Err():
			errs = append(errs, fmt.Errorf("write %s at revision %d: %w", w.rec.Key, w.rev, tooLarge(w.rec, mapConflict(err))))
		case <-timeout.C:
			// The term ends; the next one reloads what was stored.
			return fmt.Errorf("write %s: no acknowledgement within %v", w.rec.Key, writeTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	// At most writeWindow writes are in flight: the connection's async
	// publishes are bounded (and shared with the other flush stage's Write
	// and the decisions' publisher: up to three windows at once), and
	// the first batch after a takeover can hold every record changed since
	// the checkpoint.
	var waits []pending
	next := 0
	for _, r := range recs {
		s.mu.Lock()
		k := s.keys[r.Key]
		s.mu.Unlock()
		seq, rev := k.seq, k.rev
		if seq >= r.Seq && seq > 0 {
			continue
		}
		for len(waits)-next >= writeWindow {
			if err := await(waits[next]); err != nil {
				return err
			}
			next++
		}
		m := nats.NewMsg(subjects.KVSubject(s.kv.Bucket(), r.Key))
		m.Data = r.Value
		opts := []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(rev)}
		if r.Delete {
			// A purge, which drops the key's history too, leaving a
			// marker that names the archive and expires.
			var rec struct {
				Account string `json:"account"`
			}
			if err := json.Unmarshal(r.Value, &rec); err != nil {
				return fmt.Errorf("write %s: the archived record: %w", r.Key, err)
			}
			data, err := json.Marshal(archiveMarker{V: 2, Archived: r.Seq, Account: rec.Account})
			if err != nil {
				return fmt.Errorf("write %s: %w", r.Key, err)
			}
			m.Data = data
			m.Header.Set(kvOperationHeader, kvPurge)
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			opts = append(opts, jetstream.WithMsgTTL(ArchiveMarkerTTL))
		}
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			return fmt.Errorf("write %s: %w", r.Key, tooLarge(r, err))
		}
		waits = append(waits, pending{r, rev, f})
	}
	for ; next < len(waits); next++ {
		if err := await(waits[next]); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// writeWindow bounds the ledger writes in flight at once.
const writeWindow = 1024

// tooLarge wraps err, the failure to write rec, in a
// *scheduler.TooLargeError if the value is too large for the server (its
// max_payload) or the bucket (its maximum value size): no retry can store it.
func tooLarge(rec scheduler.Record, err error) error {
	var api *jetstream.APIError
	if errors.Is(err, nats.ErrMaxPayload) || errors.As(err, &api) && api.ErrorCode == errCodeMessageTooLarge {
		return &scheduler.TooLargeError{What: rec.Key, Seq: rec.Seq, Err: fmt.Errorf("%d bytes: %w", len(rec.Value), err)}
	}
	return err
}

// errCodeMessageTooLarge is the server's "message size exceeds maximum
// allowed" (JSStreamMessageExceedsMaximumErr).
const errCodeMessageTooLarge = 10054

// Checkpoint stores seq as the checkpoint, with a compare-and-swap, keeping
// the refusals above it.
func (s *Store) Checkpoint(ctx context.Context, seq uint64) error {
	s.mu.Lock()
	for r := range s.refused {
		if r <= seq {
			delete(s.refused, r)
		}
	}
	s.mu.Unlock()
	return s.writeCheckpoint(ctx, seq)
}

// Refuse records the refusal of the command at seq, for why, in the
// checkpoint record, with a compare-and-swap.
func (s *Store) Refuse(ctx context.Context, seq uint64, why string) error {
	s.mu.Lock()
	cp := s.cp
	if seq <= cp {
		s.mu.Unlock()
		return fmt.Errorf("refuse command %d: it is at or below checkpoint %d, already applied", seq, cp)
	}
	if s.refused == nil {
		s.refused = map[uint64]string{}
	}
	s.refused[seq] = why
	s.mu.Unlock()
	return s.writeCheckpoint(ctx, cp)
}

func (s *Store) writeCheckpoint(ctx context.Context, seq uint64) error {
	cp := checkpoint{V: 1, Seq: seq}
	s.mu.Lock()
	for _, r := range slices.Sorted(maps.Keys(s.refused)) {
		cp.Refused = append(cp.Refused, refusal{Seq: r, Why: s.refused[r]})
	}
	last := s.keys[subjects.CheckpointKey]
	s.mu.Unlock()
	data, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	// Bounded as every write is: an answer lost in a failover must end
	// the term, not hold it up to the caller's deadline.
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	rev, err := s.kv.Update(ctx, subjects.CheckpointKey, data, last.rev)
	if err != nil {
		return fmt.Errorf("write %s %d: %w", subjects.CheckpointKey, seq, mapConflict(err))
	}
	s.mu.Lock()
	s.keys[subjects.CheckpointKey], s.cp = stored{rev: rev, seq: last.seq}, seq
	s.mu.Unlock()
	return nil
}

// mapConflict wraps a revision mismatch (code 10071, or 10164 on replicated
// buckets) in scheduler.ErrConflict, keeping the cause.
func mapConflict(err error) error {
	var api *jetstream.APIError
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return fmt.Errorf("%w: %w", scheduler.ErrConflict, err)
	}
	return err
}

// Lease is the leader lease: key sched.leader in the ledger bucket, created
// with a TTL and renewed with a compare-and-swap that sets the TTL again. A
// contender that finds the key holding something no scheduler wrote (a value
// that is not a lease, or a lease revision that stays current past the TTL
// it names, so written without one) reports it and removes it, conditioned
// on its revision, instead of waiting on it forever. The value names the
// holder and since when it holds the lease; a contender that finds another
// holder announces itself a standby (see [StandbyValue]). A Lease is used
// by one goroutine at a time.
type Lease struct {
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	holder string
	ttl    time.Duration
	poll   time.Duration
	rev    uint64
	// seenRev is the lease key's revision as this contender last found
	// it, seenAt when (on this host's monotonic clock) it first did, and
	// checkedAt when it last read the key to check it.
	seenRev           uint64
	seenAt, checkedAt time.Time
	// since is when this holder took the lease it holds, kept in the
	// value of every renewal so readers (gpuq status) can say how long it
	// has led.
	since time.Time
	// announcedAt is when this contender last announced itself a standby.
	announcedAt time.Time
	// Logger receives the lease's reports of values it had to remove.
	// Defaults to discarding them.
	Logger *slog.Logger
}

type leaseValue struct {
	V      int       `json:"v"`
	Holder string    `json:"holder"`
	At     time.Time `json:"at"`
	// TTL is the holder's lease TTL: a revision of the key that stays
	// current for longer was written without it and would never expire.
	TTL string `json:"ttl,omitempty"`
	// Since is when the holder took the lease; At moves with each renewal.
	Since time.Time `json:"since,omitzero"`
}

// leaseTTLMargin is how much longer than its TTL a revision of the lease key
// may be seen current before it is taken for one that never expires: the
// server removes an expired key within about a second.
const leaseTTLMargin = 2 * time.Second

// NewLease returns a lease for holder (a name for logs and `gpuq` output)
// with the given TTL, whole seconds of at least 1s.
func NewLease(js jetstream.JetStream, kv jetstream.KeyValue, holder string, ttl time.Duration) (*Lease, error) {
	if ttl < time.Second || ttl%time.Second != 0 {
		return nil, fmt.Errorf("natsstore: lease TTL %v must be whole seconds, at least 1s", ttl)
	}
	return &Lease{js: js, kv: kv, holder: holder, ttl: ttl, poll: min(ttl/4, 250*time.Millisecond)}, nil
}

// TTL returns the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

func (l *Lease) value() []byte {
	data, _ := json.Marshal(leaseValue{V: 1, Holder: l.holder, At: time.Now().UTC(), TTL: l.ttl.String(), Since: l.since}) // cannot fail: plain fields
	return data
}

// leaseTTL reads a lease value: the TTL it names (0 when it names none,
// as leases written before they named one), or ok false when the value is
// not a lease at all.
func leaseTTL(data []byte) (ttl time.Duration, ok bool) {
	var v leaseValue
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&v); err != nil || dec.More() || v.V < 1 || v.Holder == "" || v.At.IsZero() {
		return 0, false
	}
	if v.TTL == "" {
		return 0, true
	}
	ttl, err := time.ParseDuration(v.TTL)
	return ttl, err == nil && ttl > 0
}

// repair removes the lease key when it cannot be a live lease that some
// scheduler wrote, so that a value another client put there (a server
// answer sent to a forged reply subject) does not keep every scheduler from
// leading: a value that is not a lease is removed at once; a lease whose
// revision this contender has seen current for longer than the TTL it
// names (counted on this host's own clock, so no clock skew can depose a
// live leader) was written without one and is removed too. The removal is
// conditioned on the revision, so a lease renewed meanwhile stays. It reads
// the key at most every half of this lease's TTL.
func (l *Lease) repair(ctx context.Context) error {
	now := time.Now()
	if now.Sub(l.checkedAt) < l.ttl/2 {
		return nil
	}
	l.checkedAt = now
	e, err := l.kv.Get(ctx, subjects.LeaderKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", subjects.LeaderKey, err)
	}
	if e.Revision() != l.seenRev {
		l.seenRev, l.seenAt = e.Revision(), now
	}
	ttl, ok := leaseTTL(e.Value())
	var why string
	switch {
	case !ok:
		why = "its value is not a lease"
	case ttl > 0 && now.Sub(l.seenAt) > ttl+leaseTTLMargin:
		why = fmt.Sprintf("its revision %d has stood for %v, past its TTL of %v: it was written without one and would never expire",
			e.Revision(), now.Sub(l.seenAt).Round(time.Second), ttl)
	default:
		return nil
	}
	snippet := e.Value()
	if len(snippet) > 120 {
		snippet = snippet[:120]
	}
	if l.Logger != nil {
		l.Logger.ErrorContext(ctx, "the leader lease key holds a value no scheduler wrote; removing it so a scheduler can lead",
			slog.String("key", subjects.LeaderKey), slog.Uint64("revision", e.Revision()), slog.String("why", why),
			slog.String("value", string(snippet)))
	}
	err = l.kv.Purge(ctx, subjects.LeaderKey, jetstream.LastRevision(e.Revision()))
	if err != nil && !errors.Is(mapConflict(err), scheduler.ErrConflict) {
		return fmt.Errorf("remove the bad %s: %w", subjects.LeaderKey, err)
	}
	return nil
}

// TryAcquire tries once to take the lease by creating its key: true if this
// holder has it now, false if another holder does. An error means the key
// could not be written or read (the server away, a timeout, no quorum); it
// wraps scheduler.ErrMisconfigured when no retry can help (the bucket has
// no per-key TTLs, the connection is closed for good).
func (l *Lease) TryAcquire(ctx context.Context) (bool, error) {
	// A try that outlasts the lease is no use; and while the server is
	// away a publish waits for its deadline, which the caller's ctx may set
	// far off.
	ctx, cancel := context.WithTimeout(ctx, min(l.ttl, tryTimeoutMax))
	defer cancel()
	l.since = time.Now().UTC().Truncate(time.Millisecond)
	rev, err := l.kv.Create(ctx, subjects.LeaderKey, l.value(), jetstream.KeyTTL(l.ttl))
	switch {
	case err == nil:
		l.rev = rev
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists):
		// Another holder's, unless the key holds something no scheduler
		// wrote: then it is removed, and the next try may take it.
		if err := l.repair(ctx); err != nil {
			return false, permanent(err)
		}
		l.announce(ctx)
		return false, nil
	}
	return false, fmt.Errorf("create %s: %w", subjects.LeaderKey, permanent(err))
}

// Acquire blocks until the lease is this holder's or ctx ends. While
// another holder has it, it tries again every quarter TTL (at most every
// 250ms); while the lease cannot be reached, it tries again with backoff (up
// to every acquireRetryMax) for as long as it takes. It returns ctx's error,
// or an error wrapping scheduler.ErrMisconfigured.
func (l *Lease) Acquire(ctx context.Context) error {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(l.poll), backoff.WithMaxInterval(acquireRetryMax),
		backoff.WithMaxElapsedTime(0))
	for {
		held, err := l.TryAcquire(ctx)
		switch {
		case held:
			return nil
		case errors.Is(err, scheduler.ErrMisconfigured):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		wait := l.poll
		if err != nil {
			wait = b.NextBackOff()
		} else {
			b.Reset()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// StandbyValue is the value of a standby's announcement, key
// subjects.StandbyKey(Name) of the ledger bucket: written by a contender
// that finds another holder, at most once per lease TTL, with a TTL of
// StandbyTTLFactor lease TTLs, so a standby that stops waiting drops out
// of the bucket by itself. A leader writes none (its own, from before it
// led, lapses).
type StandbyValue struct {
	V    int       `json:"v"`
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	TTL  string    `json:"ttl"` // the announcement's own TTL
}

// StandbyTTLFactor is how many lease TTLs a standby's announcement lives:
// it is renewed every lease TTL, so a missed renewal or two does not drop
// it.
const StandbyTTLFactor = 3

// announce writes this contender's standby announcement, unless it did
// within the last lease TTL. It is best effort: a standby that cannot
// announce itself still stands by, so a failure is only logged, at debug.
func (l *Lease) announce(ctx context.Context) {
	now := time.Now()
	if now.Sub(l.announcedAt) < l.ttl {
		return
	}
	l.announcedAt = now
	ttl := StandbyTTLFactor * l.ttl
	m := nats.NewMsg(subjects.KVSubject(l.kv.Bucket(), subjects.StandbyKey(l.holder)))
	m.Data, _ = json.Marshal(StandbyValue{V: 1, Name: l.holder, At: now.UTC(), TTL: ttl.String()}) // cannot fail: plain fields
	if _, err := l.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(ttl)); err != nil && l.Logger != nil {
		l.Logger.DebugContext(ctx, "cannot announce this scheduler a standby", slog.Any("err", err))
	}
}

// acquireRetryMax is the longest wait between Acquire's tries while the lease
// cannot be reached.
const acquireRetryMax = 5 * time.Second

// tryTimeoutMax bounds one try to create the lease key (a try lasts at most
// the lease's TTL).
const tryTimeoutMax = 5 * time.Second

// Server error codes that mean a bucket is set up without per-message TTLs.
const (
	errCodeMsgTTLInvalid  = 10165
	errCodeMsgTTLDisabled = 10166
)

// permanent wraps err in scheduler.ErrMisconfigured if no retry can mend it:
// a closed connection, or a bucket that cannot hold a key with a TTL. Any
// other failure (a timeout, no responders, a lost quorum) may pass.
func permanent(err error) error {
	var api *jetstream.APIError
	if errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed) ||
		errors.As(err, &api) && (api.ErrorCode == errCodeMsgTTLDisabled || api.ErrorCode == errCodeMsgTTLInvalid) {
		return fmt.Errorf("%w: %w", scheduler.ErrMisconfigured, err)
	}
	return err
}

// Holder returns who holds the lease now, or "" if nobody does.
func (l *Lease) Holder(ctx context.Context) (string, error) {
	e, err := l.kv.Get(ctx, subjects.LeaderKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var v leaseValue
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return "", fmt.Errorf("decode %s: %w", subjects.LeaderKey, err)
	}
	return v.Holder, nil
}

// Renew extends the lease by its TTL. It fails with scheduler.ErrLeaseLost
// when the key moved on: the lease lapsed and another holder took it.
func (l *Lease) Renew(ctx context.Context) error {
	// A renewal that outlasts the lease is no use, and one whose request or
	// answer was lost (a stream leader killed mid-request) would otherwise
	// wait for the caller's deadline, however far off, while the lease
	// lapses and the leader answers nothing.
	ctx, cancel := context.WithTimeout(ctx, min(l.ttl, tryTimeoutMax))
	defer cancel()
	m := nats.NewMsg(subjects.KVSubject(l.kv.Bucket(), subjects.LeaderKey))
	m.Data = l.value()
	ack, err := l.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(l.ttl), jetstream.WithExpectLastSequencePerSubject(l.rev))
	if err != nil {
		if errors.Is(mapConflict(err), scheduler.ErrConflict) {
			return fmt.Errorf("%w: %w", scheduler.ErrLeaseLost, err)
		}
		return fmt.Errorf("renew %s: %w", subjects.LeaderKey, err)
	}
	l.rev = ack.Sequence
	return nil
}

// Release deletes the lease key if this holder still has it, so a standby
// can take over without waiting for the TTL.
func (l *Lease) Release(ctx context.Context) error {
	if l.rev == 0 {
		return nil
	}
	err := l.kv.Purge(ctx, subjects.LeaderKey, jetstream.LastRevision(l.rev))
	l.rev = 0
	if err != nil && !errors.Is(mapConflict(err), scheduler.ErrConflict) {
		return fmt.Errorf("release %s: %w", subjects.LeaderKey, err)
	}
	return nil
}

// String describes the lease for logs.
func (l *Lease) String() string {
	return "lease " + l.holder + " ttl " + l.ttl.String() + " rev " + strconv.FormatUint(l.rev, 10)
}
