package scheduler

// Tests of the fact writer inside testing/synctest bubbles, so its pacing
// and retries pass in virtual time: changes of one key coalesce into the
// latest, the pass fact is written only after every change queued before
// it, writes are bounded per second, and a failing store is retried until
// it takes the writes, logged once.

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// memFacts is an in-memory FactStore that records each write and can fail
// the next fail writes.
type memFacts struct {
	mu   sync.Mutex
	kv   map[string]string
	log  []string
	fail int
}

func (m *memFacts) write(op, key, v string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail > 0 {
		m.fail--
		return errors.New("store unavailable")
	}
	m.log = append(m.log, op+" "+key)
	if m.kv == nil {
		m.kv = map[string]string{}
	}
	if op == "del" {
		delete(m.kv, key)
	} else {
		m.kv[key] = v
	}
	return nil
}

func (m *memFacts) Put(_ context.Context, key string, v []byte) error {
	return m.write("put", key, string(v))
}
func (m *memFacts) Delete(_ context.Context, key string) error { return m.write("del", key, "") }
func (m *memFacts) Keys(context.Context) ([]string, error)     { return nil, nil }

func (m *memFacts) writes() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.log)
}

func runWriter(t *testing.T, w *factWriter, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, log)
	}()
	return func() { cancel(); <-done }
}

func TestFactWriterCoalescesAndWritesThePassLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memFacts{}
		w := newFactWriter(m, 100)
		w.put("wait.a.j1", []byte("v1"))
		w.put("wait.a.j2", []byte("x"))
		w.put("wait.a.j1", []byte("v2"))
		w.setPass([]byte("p1"))
		w.del("wait.a.j3")
		stop := runWriter(t, w, slog.New(slog.DiscardHandler))
		defer stop()
		synctest.Wait()
		want := []string{"put wait.a.j1", "put wait.a.j2", "del wait.a.j3", "put pass"}
		if got := m.writes(); !slices.Equal(got, want) {
			t.Errorf("writes = %v, want %v (one write per key, the pass last)", got, want)
		}
		if m.kv["wait.a.j1"] != "v2" {
			t.Errorf("wait.a.j1 = %q, want the latest value v2", m.kv["wait.a.j1"])
		}
		// Nothing changed: nothing more is written.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if got := m.writes(); len(got) != len(want) {
			t.Errorf("writes while idle: %v", got[len(want):])
		}
	})
}

func TestFactWriterIsBoundedPerSecond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memFacts{}
		w := newFactWriter(m, 5)
		for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"} {
			w.put("wait.x."+k, []byte(k))
		}
		w.setPass([]byte("p"))
		stop := runWriter(t, w, slog.New(slog.DiscardHandler))
		defer stop()
		for sec, want := range []int{5, 10, 13} {
			synctest.Wait()
			if got := len(m.writes()); got != want {
				t.Errorf("after %ds: %d writes, want %d (5 a second)", sec, got, want)
			}
			time.Sleep(time.Second)
		}
	})
}

func TestFactWriterRetriesUntilTheStoreTakesIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memFacts{fail: 6}
		var logs bytes.Buffer
		w := newFactWriter(m, 100)
		w.put("config", []byte("c"))
		stop := runWriter(t, w, slog.New(slog.NewTextHandler(&logs, nil)))
		defer stop()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := m.writes(); !slices.Equal(got, []string{"put config"}) {
			t.Errorf("writes = %v, want the config once the store recovers", got)
		}
		if n := strings.Count(logs.String(), "cannot write a fact"); n != 1 {
			t.Errorf("logged the failing writes %d times, want once:\n%s", n, logs.String())
		}
		if !strings.Contains(logs.String(), "writing facts again") {
			t.Errorf("no log of the recovery:\n%s", logs.String())
		}
	})
}
