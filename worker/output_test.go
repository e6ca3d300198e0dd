package worker

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

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
