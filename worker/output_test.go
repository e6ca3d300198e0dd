package worker

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// TestOutputKeepsOrderAndEndsLast writes both streams of many attempts while
// a flush is due every microsecond, with 4-byte chunks, and checks that each
// stream's bytes arrive in the order written, every chunk numbered in the
// order it arrived, and nothing after the end marker.
func TestOutputKeepsOrderAndEndsLast(t *testing.T) {
	t.Parallel()
	const attempts, writes = 500, 20
	bus := newFakeBus()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	w := &Worker{cfg: Config{Host: "h1", Bus: bus, LogFlush: time.Microsecond, LogChunkBytes: 4, MaxLogBytes: 1 << 20},
		log: log, output: newOutage(log, "output down", "output up")}
	// Writes of 5 and 6 bytes leave part of a chunk behind for the flusher.
	text := func(stream string, i int) string { return fmt.Sprintf("%.3s%d,", stream, i) }
	for n := 1; n <= attempts; n++ {
		o := newOutput(t.Context(), w, Attempt{Job: "j", N: n}, "acct")
		var wg sync.WaitGroup
		for _, s := range []struct {
			w      io.Writer
			stream string
		}{{o.stdout, wire.Stdout}, {o.stderr, wire.Stderr}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range writes {
					if _, err := s.w.Write([]byte(text(s.stream, i))); err != nil {
						t.Error(err)
					}
				}
			}()
		}
		wg.Wait()
		o.close(Outcome{})
	}

	_, chunks := bus.recorded()
	byAttempt := map[int][]wire.LogChunk{}
	for _, c := range chunks {
		if c.Account != "acct" || c.Host != "h1" {
			t.Fatalf("a chunk tagged account %q host %q, want the job's account and this host", c.Account, c.Host)
		}
		byAttempt[c.Attempt] = append(byAttempt[c.Attempt], c)
	}
	bad := 0
	for n := 1; n <= attempts; n++ {
		cs := byAttempt[n]
		got := map[string]*bytes.Buffer{wire.Stdout: {}, wire.Stderr: {}}
		ended := false
		for i, c := range cs {
			switch {
			case c.Seq != i+1:
				t.Errorf("attempt %d: chunk %d arrived with seq %d", n, i+1, c.Seq)
			case ended:
				t.Errorf("attempt %d: chunk %d (%q) after the end marker", n, c.Seq, c.Data)
			case c.End != "":
				ended = true
			default:
				got[c.Stream].Write(c.Data)
			}
		}
		if !ended {
			t.Errorf("attempt %d: no end marker", n)
		}
		for _, stream := range []string{wire.Stdout, wire.Stderr} {
			var want bytes.Buffer
			for i := range writes {
				want.WriteString(text(stream, i))
			}
			if got[stream].String() != want.String() {
				bad++
				if bad <= 3 {
					t.Errorf("attempt %d: %s before the end marker is\n%q, want\n%q", n, stream, got[stream], &want)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d streams out of order or cut short", bad, 2*attempts)
	}
}

// TestOutputEndSaysHowMuchWasDropped: the end marker of an attempt that
// wrote past MaxLogBytes is truncated and counts the bytes dropped; one
// that kept everything is neither.
func TestOutputEndSaysHowMuchWasDropped(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	for _, c := range []struct {
		writes  []string
		trunc   bool
		dropped int64
	}{
		{[]string{"0123456", "789abc", "def"}, true, 6},
		{[]string{"0123456789"}, false, 0},
	} {
		bus := newFakeBus()
		w := &Worker{cfg: Config{Host: "h1", Bus: bus, LogFlush: time.Hour, LogChunkBytes: 4, MaxLogBytes: 10},
			log: log, output: newOutage(log, "output down", "output up")}
		o := newOutput(t.Context(), w, Attempt{Job: "j", N: 1}, "acct")
		for _, s := range c.writes {
			if _, err := o.stderr.Write([]byte(s)); err != nil {
				t.Fatal(err)
			}
		}
		o.close(Outcome{})
		_, chunks := bus.recorded()
		end := chunks[len(chunks)-1]
		if end.End == "" || end.Truncated != c.trunc || end.Dropped != c.dropped {
			t.Errorf("writes %q: end marker %+v, want truncated %v, dropped %d", c.writes, end, c.trunc, c.dropped)
		}
	}
}

// TestOutputEndMarkerOnlyWhereTheRecordCannotSay: an attempt that wrote
// nothing and exited on its own sends no chunk at all (its record says how
// it ended); one that wrote something, or that the worker stopped, ends
// with an end marker.
func TestOutputEndMarkerOnlyWhereTheRecordCannotSay(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	for _, c := range []struct {
		name   string
		write  string
		out    Outcome
		chunks int
		end    string
	}{
		{"silent", "", Outcome{ExitCode: 1, Runtime: time.Second}, 0, ""},
		{"wrote", "x", Outcome{Runtime: time.Second}, 2, "exit 0 after 1s"},
		{"silent, stopped", "", Outcome{ExitCode: 143, Runtime: time.Second, Stopped: "walltime"}, 1, "exit 143 after 1s (stopped: walltime)"},
		{"silent, infra", "", Outcome{ExitCode: 137, Runtime: time.Second, Stopped: "GPU unhealthy", Infra: true}, 1,
			"exit 137 after 1s (stopped: GPU unhealthy)"},
	} {
		bus := newFakeBus()
		w := &Worker{cfg: Config{Host: "h1", Bus: bus, LogFlush: time.Hour, LogChunkBytes: 4, MaxLogBytes: 10},
			log: log, output: newOutage(log, "output down", "output up")}
		o := newOutput(t.Context(), w, Attempt{Job: "j", N: 1}, "acct")
		if c.write != "" {
			if _, err := o.stdout.Write([]byte(c.write)); err != nil {
				t.Fatal(err)
			}
		}
		o.close(c.out)
		_, chunks := bus.recorded()
		if len(chunks) != c.chunks || c.chunks > 0 && chunks[len(chunks)-1].End != c.end {
			t.Errorf("%s: chunks %+v, want %d ending with the end marker %q", c.name, chunks, c.chunks, c.end)
		}
	}
}

// TestOutputOfALingeringGrandchild: a job that exits while a process it
// left holds its output pipes open (and goes on writing) ends within the
// output delay, not when that process ends: what was written before it
// exited is in its output, before the end marker, and the process is
// swept.
func TestOutputOfALingeringGrandchild(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	startFake(t, bus, 1, nil)
	bus.sendOrder(t, dispatchOrder("linger", 1, 1, "sh", "-c",
		`(while :; do echo tick; sleep 0.1; done) & echo "child=$!"; echo first; echo oops >&2`))
	if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
		t.Fatalf("report %+v, want started", r)
	}
	start := time.Now()
	if r := bus.nextReport(t); r.Type != ledger.ReportDone || r.ExitCode != 0 {
		t.Fatalf("report %+v, want done with exit 0", r)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the done report came %v after the job's exit; a lingering grandchild held it", took)
	}
	out := bus.output("linger", 1)
	for _, want := range []string{"first", "oops", "child="} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	if !strings.HasPrefix(lastLine(out), "gpuq: exit 0") {
		t.Errorf("the output does not end with the end marker:\n%s", out)
	}
	m := regexp.MustCompile(`child=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no child pid in the output:\n%s", out)
	}
	if pid, _ := strconv.Atoi(m[1]); alive(pid) {
		t.Errorf("the lingering grandchild %d runs after the done report", pid)
		_ = syscall.Kill(pid, syscall.SIGKILL) // test teardown
	}
}
