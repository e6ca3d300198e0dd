// Tests of the Metrics seam: a recording Metrics on a Service over the fakes
// of service_test.go, inside a synctest bubble. The properties: the service
// reports each standing it finds (unreachable, standby, leading); every
// folded command once with its kind and outcome; the credits its journal
// entries move; the decisions it stores; its progress through the log; and
// stats of its queue and hosts. And the leaf that classifies outcomes, on
// its own.
package scheduler_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// recorder is a Metrics that keeps every call.
type recorder struct {
	mu        sync.Mutex
	standings []scheduler.Standing
	folded    []string // "kind outcome"
	credits   map[scheduler.CreditMove]ledger.Credits
	decided   map[string]int
	flushes   int
	failed    int // flushes that failed
	conflicts int
	progress  scheduler.Progress
	stats     []scheduler.Stats
}

func (r *recorder) Standing(s scheduler.Standing) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.standings) == 0 || r.standings[len(r.standings)-1] != s {
		r.standings = append(r.standings, s)
	}
}

func (r *recorder) Folded(kind string, o scheduler.FoldOutcome, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.folded = append(r.folded, kind+" "+string(o))
}

func (r *recorder) Credits(_ string, m scheduler.CreditMove, amount ledger.Credits) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.credits[m] += amount
}

func (r *recorder) JobStarted(string, time.Duration)                {}
func (r *recorder) JobEnded(string, ledger.JobState, time.Duration) {}
func (r *recorder) Conflict()                                       { r.mu.Lock(); r.conflicts++; r.mu.Unlock() }
func (r *recorder) Flushed(_ time.Duration, _, _ int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.flushes++
	if err != nil {
		r.failed++
	}
}
func (r *recorder) Progress(p scheduler.Progress) { r.mu.Lock(); r.progress = p; r.mu.Unlock() }
func (r *recorder) Stats(s scheduler.Stats)       { r.mu.Lock(); r.stats = append(r.stats, s); r.mu.Unlock() }
func (r *recorder) Decided(kind string, n int)    { r.mu.Lock(); r.decided[kind] += n; r.mu.Unlock() }
func (r *recorder) snapshot() (fold []string, p scheduler.Progress) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.folded), r.progress
}

func entry(t *testing.T, seq, pending uint64, c ledger.Command) scheduler.LogEntry {
	t.Helper()
	m, err := wire.EncodeCommand(subjects.Default, c)
	if err != nil {
		t.Fatal(err)
	}
	return scheduler.LogEntry{Seq: seq, Time: time.Now(), Subject: m.Subject, Data: m.Data, Pending: pending}
}

func TestServiceReportsMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entries := []scheduler.LogEntry{
			entry(t, 1, 2, ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 100}),
			entry(t, 2, 1, ledger.Submit{Account: "vision", ID: "j1", GPUs: 1, Cost: 30, Command: []string{"true"}, Walltime: time.Hour}),
			entry(t, 3, 0, ledger.Submit{Account: "nobody", ID: "j2", GPUs: 1, Cost: 30, Command: []string{"true"}, Walltime: time.Hour}),
		}
		log := &fakeLog{entries: func(_ int, after uint64) []scheduler.LogEntry {
			var out []scheduler.LogEntry
			for _, e := range entries {
				if e.Seq > after {
					out = append(out, e)
				}
			}
			return out
		}}
		hosts := fakeHosts{hosts: []wire.Heartbeat{{Host: "h1", Time: time.Now(), TTL: "1h",
			Devices: []wire.Device{{UUID: "GPU-a", Healthy: true}, {UUID: "GPU-b", Healthy: true}}}}}
		rec := &recorder{credits: map[scheduler.CreditMove]ledger.Credits{}, decided: map[string]int{}}
		svc, err := scheduler.New(scheduler.Config{Store: &fakeStore{}, Lease: &fakeLease{script: []error{errTimeout, errHeld}},
			CommandLog: log, Publisher: &fakePublisher{}, Hosts: hosts, Metrics: rec})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		for range 600 {
			time.Sleep(100 * time.Millisecond)
			if f, p := rec.snapshot(); len(f) == 3 && p.Caught {
				break
			}
		}
		time.Sleep(2 * scheduler.StatsInterval)
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}

		rec.mu.Lock()
		defer rec.mu.Unlock()
		wantStandings := []scheduler.Standing{scheduler.StandingUnreachable, scheduler.StandingStandby, scheduler.StandingLeading, scheduler.StandingContending}
		if !slices.Equal(rec.standings, wantStandings) {
			t.Errorf("standings = %v, want %v", rec.standings, wantStandings)
		}
		wantFolded := []string{"admin applied", "submit applied", "submit rejected"}
		if !slices.Equal(rec.folded, wantFolded) {
			t.Errorf("folded = %v, want %v", rec.folded, wantFolded)
		}
		if got := rec.credits[scheduler.CreditsReserved]; got != 30 {
			t.Errorf("credits reserved = %d, want 30 (j1's reservation)", got)
		}
		if got := rec.decided["dispatch"]; got < 1 {
			t.Errorf("dispatch decisions = %d, want at least 1 (j1 onto h1)", got)
		}
		if rec.flushes == 0 {
			t.Error("no flush reported")
		}
		if want := (scheduler.Progress{Applied: 3, Stored: 3, Caught: true}); rec.progress != want {
			t.Errorf("progress = %+v, want %+v", rec.progress, want)
		}
		if len(rec.stats) == 0 {
			t.Fatal("no stats reported")
		}
		last := rec.stats[len(rec.stats)-1]
		if len(last.Hosts) != 1 || last.Hosts[0].Host != "h1" || len(last.Hosts[0].Devices) != 2 {
			t.Errorf("stats hosts = %+v, want h1 with 2 devices", last.Hosts)
		}
		queued := 0
		for _, c := range last.Jobs {
			if c.Account != "vision" || c.State.Terminal() {
				t.Errorf("stats count %+v, want only vision's states that are not final", c)
			}
			queued += c.N
		}
		if queued != 1 {
			t.Errorf("stats jobs = %+v, want vision's one job (j1; j2 was rejected)", last.Jobs)
		}
	})
}

func TestProgressLag(t *testing.T) {
	for _, tc := range []struct {
		p    scheduler.Progress
		want uint64
	}{
		{scheduler.Progress{Applied: 5, Stored: 9}, 4},
		{scheduler.Progress{Applied: 9, Stored: 9}, 0},
		{scheduler.Progress{Applied: 9, Stored: 3}, 0}, // a stale stored figure is no lag
	} {
		if got := tc.p.Lag(); got != tc.want {
			t.Errorf("%+v.Lag() = %d, want %d", tc.p, got, tc.want)
		}
	}
}

// conflictStore fails its first write with a revision conflict, as a store
// does once another scheduler has written.
type conflictStore struct {
	fakeStore
	mu     sync.Mutex
	writes int
}

func (s *conflictStore) Write(context.Context, []scheduler.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	if s.writes == 1 {
		return fmt.Errorf("write account.vision: %w: revision 7 is not 6", scheduler.ErrConflict)
	}
	return nil
}

// TestServiceCountsConflicts: a flush whose write is fenced is reported as a
// failed flush and a conflict; the term ends, and the next one leads again.
func TestServiceCountsConflicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		entries := []scheduler.LogEntry{entry(t, 1, 0, ledger.Admin{Account: "vision", ID: "op-1", Op: ledger.OpCreate, Balance: 100})}
		log := &fakeLog{entries: func(_ int, after uint64) []scheduler.LogEntry {
			if after >= 1 {
				return nil
			}
			return entries
		}}
		rec := &recorder{credits: map[scheduler.CreditMove]ledger.Credits{}, decided: map[string]int{}}
		svc, err := scheduler.New(scheduler.Config{Store: &conflictStore{}, Lease: &fakeLease{}, CommandLog: log, Publisher: &fakePublisher{},
			Hosts: fakeHosts{}, Metrics: rec, StepDownWait: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- svc.Run(ctx) }()
		for range 600 {
			time.Sleep(100 * time.Millisecond)
			rec.mu.Lock()
			ok := rec.conflicts > 0 && rec.flushes > rec.failed
			rec.mu.Unlock()
			if ok {
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.conflicts != 1 || rec.failed != 1 {
			t.Errorf("conflicts %d, failed flushes %d; want 1 and 1 (the fenced write)", rec.conflicts, rec.failed)
		}
		leads := 0
		for _, s := range rec.standings {
			if s == scheduler.StandingLeading {
				leads++
			}
		}
		if leads != 2 {
			t.Errorf("standings %v: want two terms, the fenced one and the next", rec.standings)
		}
	})
}
