package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuq/gpuq/wire"
)

// output streams one attempt's stdout and stderr to gpuq.log.<job> in
// chunks, numbered in the order they are sent, with a cap on the bytes kept
// and an end marker that says how the attempt ended.
type output struct {
	w      *Worker
	ctx    context.Context
	a      Attempt
	stdout *outputWriter
	stderr *outputWriter

	mu    sync.Mutex // orders sends and numbers them
	seq   int
	total int
	trunc bool
	tick  *time.Ticker
	done  chan struct{}
}

func newOutput(w *Worker, ctx context.Context, a Attempt) *output {
	o := &output{w: w, ctx: ctx, a: a, tick: time.NewTicker(w.cfg.LogFlush), done: make(chan struct{})}
	var share sync.Mutex
	mk := func(stream string) *outputWriter {
		return &outputWriter{stream: stream, emit: o.send, max: w.cfg.MaxLogBytes, chunk: w.cfg.LogChunkBytes,
			total: &o.total, share: &share, trunc: &o.trunc}
	}
	o.stdout, o.stderr = mk(wire.Stdout), mk(wire.Stderr)
	go func() {
		for {
			select {
			case <-o.done:
				return
			case <-o.tick.C:
				o.stdout.flush()
				o.stderr.flush()
			}
		}
	}()
	return o
}

// send publishes one chunk. Output is not worth blocking a job for: a chunk
// that cannot be published is logged and dropped.
func (o *output) send(stream string, data []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	c := wire.LogChunk{Job: o.a.Job, Attempt: o.a.N, Stream: stream, Seq: o.seq, Data: data}
	o.publish(c)
}

func (o *output) publish(c wire.LogChunk) {
	ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
	defer cancel()
	if err := o.w.cfg.Bus.Log(ctx, c); err != nil {
		o.w.log.Warn("job output dropped", slog.String("job_id", c.Job), slog.Int("attempt", c.Attempt), slog.Int("bytes", len(c.Data)), slog.Any("err", err))
	}
}

// note adds a line of gpuq's own to the attempt's stderr.
func (o *output) note(line string) {
	if _, err := o.stderr.Write([]byte(line)); err != nil {
		o.w.log.Warn("job output note", slog.Any("err", err))
	}
}

// close flushes what is buffered and sends the end marker.
func (o *output) close(out Outcome) {
	close(o.done)
	o.tick.Stop()
	o.stdout.flush()
	o.stderr.flush()
	o.stdout.share.Lock()
	trunc := o.trunc
	o.stdout.share.Unlock()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	o.publish(wire.LogChunk{Job: o.a.Job, Attempt: o.a.N, Seq: o.seq, End: out.describe(), Truncated: trunc,
		Data: []byte("gpuq: " + out.describe() + "\n")})
}
