package scheduler

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// factTerm is a term's side of the facts: what it has published, by key,
// and the writer that stores changes in the background. The fold loop only
// computes and queues; the writer does the I/O, so a slow or failing facts
// bucket never slows a flush.
type factTerm struct {
	cfg       *Config
	log       *slog.Logger
	term      string
	pass      uint64
	lastPass  time.Time
	lastSeq   uint64
	published map[string]uint64 // wait fact key → explanation key; 0: present, contents unknown
	w         *factWriter
	dropping  spell
	stop      func() // ends the writer and waits for it
}

// startFacts starts a term's fact writer and queues the config fact; call
// end when the term ends. It returns nil when the service has no fact
// store.
func (s *Service) startFacts(ctx context.Context, core *Core, since time.Time) *factTerm {
	if s.cfg.Facts == nil {
		return nil
	}
	ft := &factTerm{cfg: &s.cfg, log: s.log.With("component", "facts"), term: rand.Text()[:12],
		published: map[string]uint64{}, w: newFactWriter(s.cfg.Facts, s.cfg.FactWrites)}
	cf := core.SchedulerFact()
	cf.Leader, cf.Term, cf.Since = s.cfg.Name, ft.term, since.UTC()
	cf.Facts = wire.FactsLimits{Window: s.cfg.FactWindow, PerSecond: s.cfg.FactWrites}
	if v, err := wire.EncodeFact(cf); err != nil {
		ft.log.Error("encode the config fact", slog.Any("err", err))
	} else {
		ft.w.put(subjects.FactConfigKey, v)
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		ft.w.run(wctx, ft.log)
	}()
	ft.stop = func() { cancel(); <-done }
	return ft
}

// end stops the term's fact writer; changes still queued are left to the
// next term, which lists the bucket when it begins.
func (ft *factTerm) end() {
	if ft != nil {
		ft.stop()
	}
}

// after runs after a decision pass, at most every FactInterval: it
// explains the first FactWindow waiting jobs and queues the facts that
// changed, the deletions of those that left the queue or the window, and
// then the pass fact.
func (ft *factTerm) after(t *term, now time.Time) {
	if ft == nil || now.Sub(ft.lastPass) < ft.cfg.FactInterval {
		return
	}
	if keys, ok := ft.w.listed(); ok {
		// What the bucket held at takeover: facts of an earlier term,
		// deleted below unless this term explains the same jobs.
		for _, k := range keys {
			if _, ok := ft.published[k]; !ok && strings.HasPrefix(k, subjects.FactWaitPrefix) {
				ft.published[k] = 0
			}
		}
	}
	ws, queued := t.core.Waiting(t.state, now, ft.cfg.FactWindow)
	changed, dropped := 0, 0
	ft.pass++
	seen := make(map[string]bool, len(ws))
	for _, w := range ws {
		k := subjects.FactWaitKey(w.Account, w.Job)
		seen[k] = true
		if old, ok := ft.published[k]; ok && old == w.key {
			continue
		}
		if ft.w.backlog() > 8*ft.cfg.FactWindow {
			ft.dropping.failed(ft.log, "the facts bucket takes writes slower than explanations change; skipping some until it catches up",
				slog.Int("backlog", ft.w.backlog()))
			dropped++
			continue
		}
		v, err := wire.EncodeFact(w.Fact(ft.term, ft.pass, t.applied, now.UTC()))
		if err != nil {
			ft.log.Error("encode a wait fact", slog.String("job_id", w.Job), slog.Any("err", err))
			continue
		}
		ft.published[k] = w.key
		ft.w.put(k, v)
		changed++
	}
	if dropped == 0 {
		ft.dropping.ok(ft.log, "the facts bucket caught up")
	}
	for k := range ft.published {
		if !seen[k] {
			delete(ft.published, k)
			ft.w.del(k)
			changed++
		}
	}
	if dropped > 0 || changed == 0 && t.applied == ft.lastSeq && !ft.lastPass.IsZero() {
		// Nothing new to say, or not all of it queued: the pass fact
		// must not vouch for facts that were skipped.
		ft.lastPass = now
		return
	}
	ft.lastPass, ft.lastSeq = now, t.applied
	v, err := wire.EncodeFact(wire.PassFact{Term: ft.term, Pass: ft.pass, Seq: t.applied, At: now.UTC(),
		Queued: queued, Window: ft.cfg.FactWindow})
	if err != nil {
		ft.log.Error("encode the pass fact", slog.Any("err", err))
		return
	}
	ft.w.setPass(v)
}

// factWriter stores queued fact changes in the background, at most
// perSecond a second, each change of a key replacing the one still queued.
// The pass fact is written only once every change queued before it is
// stored, so it never claims more than the bucket holds. A failed write is
// retried with backoff, logged once per spell, until the term ends.
type factWriter struct {
	store     FactStore
	perSecond int
	wake      chan struct{}
	keys      chan []string

	mu      sync.Mutex
	pending map[string][]byte // nil value: delete
	order   []string
	pass    []byte
}

func newFactWriter(store FactStore, perSecond int) *factWriter {
	return &factWriter{store: store, perSecond: perSecond, wake: make(chan struct{}, 1), keys: make(chan []string, 1),
		pending: map[string][]byte{}}
}

func (w *factWriter) put(key string, v []byte) { w.queue(key, v) }
func (w *factWriter) del(key string)           { w.queue(key, nil) }

func (w *factWriter) queue(key string, v []byte) {
	w.mu.Lock()
	if _, ok := w.pending[key]; !ok {
		w.order = append(w.order, key)
	}
	w.pending[key] = v
	w.mu.Unlock()
	w.poke()
}

func (w *factWriter) setPass(v []byte) {
	w.mu.Lock()
	w.pass = v
	w.mu.Unlock()
	w.poke()
}

func (w *factWriter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *factWriter) backlog() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending)
}

// listed returns the keys the bucket held when the term began, once.
func (w *factWriter) listed() ([]string, bool) {
	select {
	case k := <-w.keys:
		return k, true
	default:
		return nil, false
	}
}

// next returns the next write: a key and value (nil: delete), or the pass
// fact once nothing else is queued.
func (w *factWriter) next() (key string, v []byte, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.order) > 0 {
		key = w.order[0]
		if v, queued := w.pending[key]; queued {
			return key, v, true
		}
		w.order = w.order[1:]
	}
	if w.pass != nil {
		return subjects.FactPassKey, w.pass, true
	}
	return "", nil, false
}

// done records that key was stored with v, unless it was queued again since.
func (w *factWriter) done(key string, v []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if key == subjects.FactPassKey {
		if string(w.pass) == string(v) {
			w.pass = nil
		}
		return
	}
	if cur, ok := w.pending[key]; ok && (cur == nil) == (v == nil) && string(cur) == string(v) {
		delete(w.pending, key)
		w.order = w.order[1:]
	}
}

// run lists the bucket's keys, then stores queued changes until ctx ends.
func (w *factWriter) run(ctx context.Context, log *slog.Logger) {
	var failing spell
	wait := 100 * time.Millisecond
	pause := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for {
		kctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		keys, err := w.store.Keys(kctx)
		cancel()
		if err == nil {
			w.keys <- keys
			break
		}
		if ctx.Err() != nil {
			return
		}
		failing.failed(log, "cannot list the facts bucket; trying again", slog.Any("err", err))
		if !pause(wait) {
			return
		}
		wait = min(wait*2, 5*time.Second)
	}
	window, inWindow := time.Now(), 0
	for {
		key, v, ok := w.next()
		if !ok {
			select {
			case <-ctx.Done():
				return
			case <-w.wake:
				continue
			}
		}
		if inWindow >= w.perSecond {
			if !pause(time.Until(window.Add(time.Second))) {
				return
			}
		}
		if time.Since(window) >= time.Second {
			window, inWindow = time.Now(), 0
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		if v == nil {
			err = w.store.Delete(wctx, key)
		} else {
			err = w.store.Put(wctx, key, v)
		}
		cancel()
		inWindow++
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failing.failed(log, "cannot write a fact; retrying (the fold goes on)", slog.String("key", key), slog.Any("err", err))
			if !pause(wait) {
				return
			}
			wait = min(wait*2, 5*time.Second)
			continue
		}
		failing.ok(log, "writing facts again")
		wait = 100 * time.Millisecond
		w.done(key, v)
	}
}
