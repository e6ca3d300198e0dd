package natsbus

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishStored publishes m and returns the stream sequence it was stored
// at, once the server has said it is stored in stream (checked by the
// server, with the Nats-Expected-Stream header, when stream is not "").
// It is jetstream's PublishMsg without its encoding/json: a worker sends
// three such publishes for each job, and decoding their answers, with the
// stack the decoder grows in the goroutines that send them, cost more
// worker CPU than the sends. ctx must have a deadline.
func publishStored(ctx context.Context, nc *nats.Conn, m *nats.Msg, stream string) (uint64, error) {
	if stream != "" {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(jetstream.ExpectedStreamHeader, stream)
	}
	resp, err := nc.RequestMsgWithContext(ctx, m)
	// As jetstream's does: a stream between leaders has no responder
	// for a moment.
	for try := 0; errors.Is(err, nats.ErrNoResponders) && try < jetstream.DefaultPubRetryAttempts; try++ {
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("publish to %s: %w", m.Subject, ctx.Err())
		case <-time.After(jetstream.DefaultPubRetryWait):
		}
		resp, err = nc.RequestMsgWithContext(ctx, m)
	}
	if errors.Is(err, nats.ErrNoResponders) {
		return 0, fmt.Errorf("publish to %s: %w", m.Subject, jetstream.ErrNoStreamResponse)
	}
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	seq, err := parsePubAck(resp.Data, stream)
	if err != nil {
		return 0, fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	return seq, nil
}

// parsePubAck reads the server's answer to a publish: the sequence it was
// stored at, or the error the server gave. An answer of the plain form the
// server writes (see plainPubAck) is read from its bytes; any other
// (a duplicate's, an error's: {"error":{"code":…,"err_code":…,
// "description":…}}) goes through encoding/json. A stored answer must name
// stream (any stream when it is "") and a sequence above 0.
func parsePubAck(data []byte, stream string) (uint64, error) {
	if seq, ok := plainPubAck(data, stream); ok {
		return seq, nil
	}
	var r struct {
		Error  *jetstream.APIError `json:"error"`
		Stream string              `json:"stream"`
		Seq    uint64              `json:"seq"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return 0, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
	}
	switch {
	case r.Error != nil:
		return 0, fmt.Errorf("nats: %w", r.Error)
	case r.Stream == "" || r.Seq == 0:
		return 0, fmt.Errorf("%w: %q", jetstream.ErrInvalidJSAck, data)
	case stream != "" && r.Stream != stream:
		return 0, fmt.Errorf("stored in stream %q, not %q", r.Stream, stream)
	}
	return r.Seq, nil
}

// plainPubAck reads an answer that is exactly {"stream":"<name>","seq":<n>},
// as the server writes a stored message's (nats-server's stream.go), with
// a name of printable ASCII without escapes that is stream's (any, when
// stream is ""), and n a decimal above 0 without leading zeros.
func plainPubAck(data []byte, stream string) (uint64, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(`{"stream":"`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return 0, false
	}
	name := rest[:end]
	for _, c := range name {
		if c <= ' ' || c > '~' || c == '\\' { // a name JSON writes as it is: printable ASCII, no escapes
			return 0, false
		}
	}
	if stream != "" && string(name) != stream {
		return 0, false
	}
	rest, ok = bytes.CutPrefix(rest[end:], []byte(`","seq":`))
	if !ok {
		return 0, false
	}
	var seq uint64
	i := 0
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
		if i == 19 { // past what a uint64 surely holds: let encoding/json say
			return 0, false
		}
		seq = seq*10 + uint64(rest[i]-'0')
	}
	if i == 0 || seq == 0 || rest[0] == '0' || string(rest[i:]) != "}" {
		return 0, false
	}
	return seq, true
}
