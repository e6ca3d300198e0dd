package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

// ErrNoAttempt is returned by [Client.Logs] for an attempt the job's record
// does not name.
var ErrNoAttempt = errors.New("gpuq: no such attempt")

// ErrBadChunk is wrapped by the error [Client.Logs] yields for a message of
// the logs stream that is not a log chunk; the read goes on after it.
var ErrBadChunk = errors.New("gpuq: not a log chunk")

// AttemptHost returns the host attempt n of j ran on, or "" when the record
// names none.
func AttemptHost(j *ledger.Job, n int) string {
	for _, a := range j.Attempts() {
		if a.N == n {
			return a.Host
		}
	}
	if n == j.Attempt {
		return j.Host()
	}
	return ""
}

// LogOptions say which output [Client.Logs] reads.
type LogOptions struct {
	// Attempt is the attempt to read; 0 for the job's latest.
	Attempt int
	// Follow waits for more output until the attempt ends (its end
	// marker, or its end in the job's record), rather than ending with
	// the output stored so far.
	Follow bool
}

// logIdle is how long a read that does not follow waits for the output
// stored so far. A follow's pulls wait logPollMin, then twice as long at
// each pull up to logPollMax; one that finds nothing new is followed by a
// read of the job's record, to see whether the attempt has ended: a short
// quiet job's end shows within a second or two, and a long follow costs a
// pull (each a consumer made anew) and at most one read of the record
// every logPollMax, as a follow cost a pull every 5s before.
const (
	logIdle    = 500 * time.Millisecond
	logPollMin = time.Second
	logPollMax = 5 * time.Second
	// logRecordTries is how many reads of the record in a row may fail
	// (one a pull) before a follow ends with the error: a moment without
	// the server is ridden out, a record that cannot be read at all is
	// said.
	logRecordTries = 3
)

// Logs reads the output of one attempt of job j (its record, from
// [Client.Job] or [Client.Lookup]), oldest first, ending with the attempt's
// end marker (a chunk with End set) once it has ended. Without Follow it
// ends with the output stored so far; with Follow it waits until the end
// marker or the end of ctx (which ends the sequence without an error).
//
// A worker sends no end marker for an attempt that wrote nothing and
// exited on its own, and none reaches the stream from a worker that died
// first: once the job's record says the attempt ended and every chunk
// stored is read, Logs yields an end marker of its own, made from the
// record: "exit 0 after 2ms" for the job's last attempt (its runtime as
// the record keeps it, in whole milliseconds), what the record says of an
// earlier one, such as "attempt 1 on h1 lost: …". Without Follow the
// record is j; with Follow it is read again after each pull that finds
// nothing new; a read that fails is tried again at the next pull, and
// ends the sequence with its error after logRecordTries in a row. An
// attempt the scheduler declared lost may still have a worker that stores
// output after the record ended it: a read after that shows it, after the
// marker made from the record.
//
// Only chunks from the host the attempt ran on are read: another host's
// worker can publish chunks that name this job, but only under its own
// host. A tenant reads its own account's logs.
//
// The sequence yields an error wrapping [ErrBadChunk] for a message that is
// not a chunk and goes on; any other error ends it. Logs returns
// [ErrNoAttempt] (in the sequence's one error) for an attempt the record
// does not name, among them every attempt of a job that has not run.
func (c *Client) Logs(ctx context.Context, j *ledger.Job, o LogOptions) iter.Seq2[wire.LogChunk, error] {
	return func(yield func(wire.LogChunk, error) bool) {
		want := o.Attempt
		if want == 0 {
			want = j.Attempt
		}
		host := ""
		if want > 0 {
			host = AttemptHost(j, want)
		}
		if host == "" {
			yield(wire.LogChunk{}, fmt.Errorf("job %s attempt %d (its latest is %d): %w", j.ID, want, j.Attempt, ErrNoAttempt))
			return
		}
		cons, err := c.js.OrderedConsumer(ctx, c.n.LogsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{c.n.Log(j.Account, j.ID, host)}, NamePrefix: ConsumerName()})
		if err != nil {
			yield(wire.LogChunk{}, fmt.Errorf("read the output of job %s: %w", j.ID, err))
			return
		}
		wait := logIdle
		if o.Follow {
			wait = logPollMin
		}
		// Once the record says the attempt ended, what is stored is all
		// there is: it is read without waiting for more.
		rec := j
		_, ended := attemptEnd(rec, want)
		seq := 0       // the last chunk of the attempt read
		recFailed := 0 // reads of the record that failed in a row
		for {
			var batch jetstream.MessageBatch
			if ended {
				batch, err = cons.FetchNoWait(256)
			} else {
				batch, err = cons.Fetch(256, jetstream.FetchMaxWait(wait))
			}
			if err != nil {
				if ctx.Err() == nil {
					yield(wire.LogChunk{}, fmt.Errorf("read the output of job %s: %w", j.ID, err))
				}
				return
			}
			got := 0
			for m := range batch.Messages() {
				got++
				ch, err := wire.DecodeLogChunk(c.n, m.Subject(), m.Headers().Get, m.Data())
				if err != nil {
					if !yield(wire.LogChunk{}, fmt.Errorf("%w: %w", ErrBadChunk, err)) {
						return
					}
					continue
				}
				if ch.Attempt != want {
					continue
				}
				seq = max(seq, ch.Seq)
				if !yield(ch, nil) || ch.End != "" {
					return
				}
			}
			if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
				yield(wire.LogChunk{}, fmt.Errorf("read the output of job %s: %w", j.ID, err))
				return
			}
			if ctx.Err() != nil {
				return
			}
			if o.Follow {
				wait = min(2*wait, logPollMax)
			}
			if got > 0 {
				continue
			}
			// Everything stored so far is read, and no end marker.
			if !ended && o.Follow {
				r, _, err := c.Lookup(ctx, j.Account, j.ID)
				if err != nil {
					if recFailed++; recFailed >= logRecordTries && ctx.Err() == nil {
						yield(wire.LogChunk{}, fmt.Errorf("read the record of job %s (%d tries): %w", j.ID, recFailed, err))
						return
					}
					continue // read again after the next pull
				}
				recFailed = 0
				rec = r
				_, ended = attemptEnd(rec, want) // then a last pull reads what was stored since the last one
				continue
			}
			if end, ok := attemptEnd(rec, want); ok {
				yield(wire.LogChunk{Account: j.Account, Job: j.ID, Host: host, Attempt: want, Seq: seq + 1,
					End: end, Data: []byte("gpuq: " + end + "\n")}, nil)
			}
			return // or the attempt is still running
		}
	}
}

// attemptEnd says how attempt n of j ended, in the words of a worker's end
// marker, as far as j's record tells, and whether it has ended. An attempt
// that exited on its own is the job's last, whose exit code and runtime
// the record keeps; an earlier one has its message or its outcome.
func attemptEnd(j *ledger.Job, n int) (string, bool) {
	for _, a := range j.Attempts() {
		if a.N != n {
			continue
		}
		switch code := j.ExitCode(); {
		case n == j.Attempt && code != nil:
			return fmt.Sprintf("exit %d after %v", *code, time.Duration(j.RuntimeMS())*time.Millisecond), true
		case a.Message != "":
			return a.Message, true // such as "attempt 1 on h1 lost: …"
		case a.Outcome == ledger.StatePending:
			return "requeued", true
		}
		return string(a.Outcome), true
	}
	return "", false
}
