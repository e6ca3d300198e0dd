package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// growingLog is a command log that gains one account-creating command every
// step of virtual time, trims as asked, and checks each trim against the
// store's checkpoint at that moment.
type growingLog struct {
	start time.Time
	step  time.Duration
	store *checkpointStore
	t     *testing.T

	mu      sync.Mutex
	trimmed uint64 // entries up to and including this one are gone
	trims   int
}

// entry is the log's entry seq, written at start + seq × step.
func (l *growingLog) entry(seq uint64) (scheduler.LogEntry, error) {
	msg, err := wire.EncodeAdmin(subjects.Default, ledger.Admin{Account: fmt.Sprintf("a%06d", seq), ID: fmt.Sprintf("create-%d", seq), Op: ledger.OpCreate, Balance: 10})
	if err != nil {
		return scheduler.LogEntry{}, err
	}
	return scheduler.LogEntry{Seq: seq, Time: l.start.Add(time.Duration(seq) * l.step), Subject: msg.Subject, Data: msg.Data}, nil
}

type growingFollower struct {
	c    chan scheduler.LogEntry
	stop chan struct{}
	once sync.Once
}

func (f *growingFollower) C() <-chan scheduler.LogEntry { return f.c }
func (f *growingFollower) Err() error                   { return nil }
func (f *growingFollower) Stop()                        { f.once.Do(func() { close(f.stop) }) }

func (l *growingLog) Follow(ctx context.Context, after uint64) (scheduler.Follower, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if after < l.trimmed {
		return nil, fmt.Errorf("follow after %d: entries up to %d were trimmed", after, l.trimmed)
	}
	f := &growingFollower{c: make(chan scheduler.LogEntry, 16), stop: make(chan struct{})}
	go func() {
		for seq := after + 1; ; seq++ {
			e, err := l.entry(seq)
			if err != nil {
				l.t.Error(err)
				return
			}
			if d := time.Until(e.Time); d > 0 {
				select {
				case <-time.After(d):
				case <-f.stop:
					return
				case <-ctx.Done():
					return
				}
			}
			select {
			case f.c <- e:
			case <-f.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return f, nil
}

func (l *growingLog) Trim(_ context.Context, upTo uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cp := l.store.checkpointed(); upTo > cp {
		l.t.Errorf("trimmed the log up to %d, past the checkpoint %d", upTo, cp)
	}
	if upTo > l.trimmed {
		l.trimmed = upTo
	}
	l.trims++
	return nil
}

// checkpointStore loads the state the log's first checkpoint entries fold
// to, and fails every failEvery-th checkpoint, which ends the term.
type checkpointStore struct {
	log       *growingLog
	failEvery int

	mu    sync.Mutex
	cp    uint64
	calls int
	fails int
}

var errCheckpoint = errors.New("checkpoint refused")

func (s *checkpointStore) checkpointed() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cp
}

func (s *checkpointStore) Load(context.Context) (*scheduler.View, error) {
	s.mu.Lock()
	cp := s.cp
	s.mu.Unlock()
	st := ledger.New()
	for seq := uint64(1); seq <= cp; seq++ {
		e, err := s.log.entry(seq)
		if err != nil {
			return nil, err
		}
		cmd, err := wire.DecodeCommand(subjects.Default, e.Subject, e.Data)
		if err != nil {
			return nil, err
		}
		st.Apply(cmd, seq, e.Time)
	}
	// A refused checkpoint came after its flush stored the records: the
	// view is ahead of the checkpoint by the entries since, which the new
	// term applies again before it flushes (ten of them, over 100 s).
	ahead := cp
	if s.fails > 0 {
		ahead = cp + 10
	}
	return &scheduler.View{State: st, Checkpoint: cp, Ahead: ahead}, nil
}

func (s *checkpointStore) Write(context.Context, []scheduler.Record) error { return nil }
func (s *checkpointStore) Refuse(context.Context, uint64, string) error    { return nil }

func (s *checkpointStore) Checkpoint(_ context.Context, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if s.calls%s.failEvery == 0 {
		s.fails++
		return errCheckpoint
	}
	s.cp = seq
	return nil
}

// TestTrimStaysBehindTheCheckpoint runs a leader for three hours of virtual
// time over a log that gains a command every ten seconds, with every
// 90th checkpoint refused (each refusal ends the term, and a new one
// loads from the last checkpoint). The leader trims what it applied more
// than ten minutes ago, and never an entry past the stored checkpoint: a
// new term always finds the entries after the checkpoint it loads.
func TestTrimStaysBehindTheCheckpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := &growingLog{start: time.Now(), step: 10 * time.Second, t: t}
		store := &checkpointStore{log: l, failEvery: 90}
		l.store = store
		logs := &logRecords{}
		svc, err := scheduler.New(scheduler.Config{Store: store, Lease: &fakeLease{}, CommandLog: l, Publisher: &fakePublisher{}, Hosts: fakeHosts{},
			Logger: slog.New(logs), StepDownWait: 100 * time.Millisecond, RetainApplied: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		time.Sleep(3 * time.Hour)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		cp := store.checkpointed()
		t.Logf("checkpoint %d, trimmed to %d in %d trims, %d checkpoints refused", cp, l.trimmed, l.trims, store.fails)
		if store.fails < 10 {
			t.Errorf("only %d checkpoints were refused; the test means to end many terms", store.fails)
		}
		// Three hours at one entry per 10 s is 1,080 entries; the last ten
		// minutes (60) stay, and up to a term more (a new term trims only
		// what it applied itself ten minutes ago).
		if cp < 1000 || l.trimmed+60 > cp || l.trimmed+60+90 < cp {
			t.Errorf("checkpoint %d, trimmed to %d: want the checkpoint near 1,080 and the trim ten minutes (60 entries) behind it", cp, l.trimmed)
		}
	})
}
