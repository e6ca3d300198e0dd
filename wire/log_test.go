package wire_test

import (
	"errors"
	"testing"

	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// TestLogChunkSubject checks that a chunk is published under its account,
// job and host, with no de-duplication id another publisher could claim,
// and that decoding takes all three from the subject.
func TestLogChunkSubject(t *testing.T) {
	t.Parallel()
	n := subjects.Default
	c := wire.LogChunk{Account: "vision", Job: "train-42", Host: "gpu-host-1", Attempt: 2, Seq: 3, Stream: wire.Stdout, Data: []byte("hi\n")}
	msg, err := wire.EncodeLogChunk(n, c)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "gpuq.log.vision.train-42.gpu-host-1" || msg.MsgID != "" {
		t.Errorf("chunk message: subject %q, id %q", msg.Subject, msg.MsgID)
	}
	got, err := wire.DecodeLogChunk(n, msg.Subject, func(k string) string { return msg.Header[k] }, msg.Data)
	if err != nil || got.Account != c.Account || got.Job != c.Job || got.Host != c.Host || got.Attempt != 2 || got.Seq != 3 {
		t.Errorf("decoded %+v, %v", got, err)
	}
	for _, bad := range []wire.LogChunk{{Job: "j", Host: "h", Attempt: 1, Seq: 1}, {Account: "a", Job: "j", Host: "h.1", Attempt: 1, Seq: 1}} {
		if _, err := wire.EncodeLogChunk(n, bad); !errors.Is(err, subjects.ErrBadToken) {
			t.Errorf("EncodeLogChunk(%+v) = %v, want a bad token", bad, err)
		}
	}
	if _, err := wire.DecodeLogChunk(n, "gpuq.log.train-42", func(k string) string { return msg.Header[k] }, msg.Data); !errors.Is(err, subjects.ErrBadSubject) {
		t.Errorf("a chunk on an old-style subject decoded: %v", err)
	}
}

// TestLogEndCarriesDroppedBytes: a truncated end marker says how many bytes
// were dropped in Gpuq-Dropped-Bytes, one from an older worker (no header)
// decodes with 0, and a header that is not a count is refused.
func TestLogEndCarriesDroppedBytes(t *testing.T) {
	t.Parallel()
	n := subjects.Default
	end := wire.LogChunk{Account: "a", Job: "j", Host: "h", Attempt: 1, Seq: 9, End: "exit 0 after 1s", Truncated: true, Dropped: 1234, Data: []byte("gpuq: exit 0 after 1s\n")}
	msg, err := wire.EncodeLogChunk(n, end)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header[subjects.LogDroppedHeader] != "1234" || msg.Header[subjects.LogTruncHeader] != "true" {
		t.Errorf("end marker headers %v", msg.Header)
	}
	got, err := wire.DecodeLogChunk(n, msg.Subject, func(k string) string { return msg.Header[k] }, msg.Data)
	if err != nil || !got.Truncated || got.Dropped != 1234 {
		t.Errorf("decoded %+v, %v", got, err)
	}
	delete(msg.Header, subjects.LogDroppedHeader)
	if got, err := wire.DecodeLogChunk(n, msg.Subject, func(k string) string { return msg.Header[k] }, msg.Data); err != nil || !got.Truncated || got.Dropped != 0 {
		t.Errorf("an older worker's end marker decoded as %+v, %v", got, err)
	}
	msg.Header[subjects.LogDroppedHeader] = "lots"
	if _, err := wire.DecodeLogChunk(n, msg.Subject, func(k string) string { return msg.Header[k] }, msg.Data); err == nil {
		t.Error("a Gpuq-Dropped-Bytes header that is not a number decoded")
	}
}
