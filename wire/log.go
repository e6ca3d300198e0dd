package wire

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gpuq/gpuq/subjects"
)

// LogChunk is one piece of a job's output on gpuq.log.<account>.<job>.<host>.
// The body is the raw bytes the job wrote; the headers say which attempt
// and stream wrote them and in what order. The last chunk of an attempt has
// End set, an empty stream and, as its body, a line saying how the attempt
// ended.
//
// A chunk carries no de-duplication id: a worker sends each chunk once, and
// an id any publisher could claim first would let it drop another's chunk.
// Readers tell chunks apart by attempt and Seq.
type LogChunk struct {
	Account   string // the job's account: the subject's first token
	Job       string
	Host      string // the host that wrote it: the subject's last token
	Attempt   int
	Stream    string // "stdout" or "stderr"; "" on the end marker
	Seq       int    // from 1 within the attempt
	Data      []byte
	End       string // on the end marker: how the attempt ended, e.g. "exit 0"
	Truncated bool   // set on the end marker when output past the cap was dropped
	// Dropped is, on a truncated end marker, how many bytes past the cap
	// were dropped; 0 from a worker that does not count them.
	Dropped int64
}

// Output streams.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// EncodeLogChunk returns the message carrying c.
func EncodeLogChunk(n subjects.Names, c LogChunk) (Message, error) {
	for _, t := range [][2]string{{"account", c.Account}, {"job id", c.Job}, {"host", c.Host}} {
		if err := subjects.CheckToken(t[0], t[1]); err != nil {
			return Message{}, fmt.Errorf("log chunk: %w", err)
		}
	}
	if c.Attempt < 1 || c.Seq < 1 {
		return Message{}, fmt.Errorf("log chunk of %s: attempt %d and seq %d must be ≥ 1", c.Job, c.Attempt, c.Seq)
	}
	if len(c.Data) > MaxMessageBytes-1024 {
		return Message{}, fmt.Errorf("log chunk of %s is %d bytes, too large", c.Job, len(c.Data))
	}
	h := map[string]string{
		subjects.LogAttemptHeader: strconv.Itoa(c.Attempt),
		subjects.LogSeqHeader:     strconv.Itoa(c.Seq),
	}
	if c.Stream != "" {
		h[subjects.LogStreamHeader] = c.Stream
	}
	if c.End != "" {
		h[subjects.LogEndHeader] = c.End
	}
	if c.Truncated {
		h[subjects.LogTruncHeader] = "true"
	}
	if c.Dropped > 0 {
		h[subjects.LogDroppedHeader] = strconv.FormatInt(c.Dropped, 10)
	}
	return Message{Subject: n.Log(c.Account, c.Job, c.Host), Header: h, Data: c.Data}, nil
}

// DecodeLogChunk reads a chunk from a message of the logs stream: its
// subject (account, job and host), headers and body.
func DecodeLogChunk(n subjects.Names, subject string, header func(string) string, data []byte) (LogChunk, error) {
	ls, err := n.ParseLog(subject)
	if err != nil {
		return LogChunk{}, fmt.Errorf("log chunk: %w", err)
	}
	job := ls.Job
	attempt, err1 := strconv.Atoi(header(subjects.LogAttemptHeader))
	seq, err2 := strconv.Atoi(header(subjects.LogSeqHeader))
	if err := errors.Join(err1, err2); err != nil || attempt < 1 || seq < 1 {
		return LogChunk{}, fmt.Errorf("log chunk of %s: bad %s or %s header", job, subjects.LogAttemptHeader, subjects.LogSeqHeader)
	}
	c := LogChunk{Account: ls.Account, Job: job, Host: ls.Host, Attempt: attempt, Seq: seq, Data: data, Stream: header(subjects.LogStreamHeader),
		End: header(subjects.LogEndHeader), Truncated: header(subjects.LogTruncHeader) == "true"}
	if v := header(subjects.LogDroppedHeader); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return LogChunk{}, fmt.Errorf("log chunk of %s: bad %s header %q", job, subjects.LogDroppedHeader, v)
		}
		c.Dropped = n
	}
	if c.Stream != "" && c.Stream != Stdout && c.Stream != Stderr {
		return LogChunk{}, fmt.Errorf("log chunk of %s: unknown stream %q", job, c.Stream)
	}
	return c, nil
}
