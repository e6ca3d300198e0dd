package worker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gpuq/gpuq/wire"
)

// output streams one attempt's stdout and stderr to
// gpuq.log.<account>.<job>.<host> in chunks, numbered in the order they are sent, with a cap on the bytes kept
// and an end marker that says how the attempt ended. An attempt that wrote
// nothing and exited on its own sends no end marker: how it ended is in
// the job's record (its exit code and runtime), where readers take it
// from (see client.Logs), and a marker would be a stored message for
// every such job that says only that.
type output struct {
	w *Worker
	// ctx bounds the sends. It is kept here because Write, being
	// io.Writer's, cannot be given one.
	ctx     context.Context
	a       Attempt
	account string // the job's account, which the chunks' subject names
	stdout  *outputWriter
	stderr  *outputWriter
	stop    chan struct{} // closed by close: the flusher returns
	done    chan struct{} // closed once the flusher has returned, if started

	// mu guards what follows and both streams' buffers, and is held while
	// a chunk is sent: chunks go out in the order they are numbered, and
	// each stream's bytes in the order they were written.
	mu     sync.Mutex
	seq    int
	total  int   // bytes kept, across both streams
	trunc  bool  // output past MaxLogBytes was dropped
	drop   int64 // bytes dropped past MaxLogBytes
	closed bool  // the end marker is sent: nothing may follow it
	// flushing says the flusher runs: it is started by the first write
	// that leaves output buffered, so an attempt that prints nothing
	// has none.
	flushing bool
}

// outputWriter is one stream of an attempt's output. It buffers writes and
// sends a chunk when the buffer fills; the flusher sends what is left every
// flush interval.
type outputWriter struct {
	o      *output
	stream string
	buf    []byte // guarded by o.mu
}

func newOutput(ctx context.Context, w *Worker, a Attempt, account string) *output {
	o := &output{w: w, ctx: ctx, a: a, account: account, stop: make(chan struct{}), done: make(chan struct{})}
	o.stdout = &outputWriter{o: o, stream: wire.Stdout}
	o.stderr = &outputWriter{o: o, stream: wire.Stderr}
	return o
}

// flushEvery sends what is buffered every interval until close.
func (o *output) flushEvery(interval time.Duration) {
	defer close(o.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-t.C:
			o.mu.Lock()
			o.stdout.flushLocked()
			o.stderr.flushLocked()
			o.mu.Unlock()
		}
	}
}

// sendLocked numbers c and publishes it. Output is not worth blocking a job
// for: a chunk that cannot be published is dropped, and the worker logs
// once that output is being lost, and once when it is stored again. o.mu
// is held.
func (o *output) sendLocked(c wire.LogChunk) {
	o.seq++
	c.Account, c.Job, c.Host, c.Attempt, c.Seq = o.account, o.a.Job, o.w.cfg.Host, o.a.N, o.seq
	ctx, cancel := context.WithTimeout(o.ctx, 5*time.Second)
	defer cancel()
	if err := o.w.cfg.Bus.Log(ctx, c); err != nil {
		o.w.log.Debug("job output dropped", slog.String("job_id", c.Job), slog.Int("attempt", c.Attempt), slog.Int("bytes", len(c.Data)), slog.Any("err", err))
		o.w.output.fail(err)
		o.w.metrics().OutputDropped(DropUnstored, len(c.Data))
		return
	}
	o.w.output.ok()
	o.w.metrics().OutputSent(len(c.Data))
}

// note adds a line of gpuq's own to the attempt's stderr.
func (o *output) note(line string) {
	if _, err := o.stderr.Write([]byte(line)); err != nil {
		o.w.log.Warn("job output note", slog.Any("err", err))
	}
}

// close stops the flusher, sends what is buffered and then the end marker,
// unless the attempt sent nothing and exited on its own (see output).
func (o *output) close(out Outcome) {
	close(o.stop)
	o.mu.Lock()
	flushing := o.flushing
	o.mu.Unlock()
	if flushing {
		<-o.done
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stdout.flushLocked()
	o.stderr.flushLocked()
	o.closed = true
	if o.seq == 0 && out.Stopped == "" && !out.Infra {
		return // the job's record says how it ended
	}
	o.sendLocked(wire.LogChunk{End: out.describe(), Truncated: o.trunc, Dropped: o.drop,
		Data: []byte("gpuq: " + out.describe() + "\n")})
}

// Write keeps p, up to the attempt's cap, and sends every full chunk.
func (w *outputWriter) Write(p []byte) (int, error) {
	o := w.o
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return len(p), nil // the process is gone; its output has ended
	}
	keep := p
	if room := o.w.cfg.MaxLogBytes - o.total; room < len(keep) {
		keep = keep[:max(room, 0)]
		o.trunc = true
		o.drop += int64(len(p) - len(keep))
		o.w.metrics().OutputDropped(DropTruncated, len(p)-len(keep))
	}
	o.total += len(keep)
	w.buf = append(w.buf, keep...)
	chunk := o.w.cfg.LogChunkBytes
	for len(w.buf) >= chunk {
		o.sendLocked(wire.LogChunk{Stream: w.stream, Data: append([]byte(nil), w.buf[:chunk]...)})
		w.buf = w.buf[chunk:]
	}
	if len(w.buf) > 0 && !o.flushing {
		o.flushing = true
		go o.flushEvery(o.w.cfg.LogFlush)
	}
	return len(p), nil
}

// flushLocked sends whatever is buffered. o.mu is held.
func (w *outputWriter) flushLocked() {
	if len(w.buf) > 0 {
		w.o.sendLocked(wire.LogChunk{Stream: w.stream, Data: w.buf})
		w.buf = nil
	}
}
