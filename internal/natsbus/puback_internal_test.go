package natsbus

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natstest"
)

// TestPublishStoredReadsTheServersAnswers: publishStored against a real
// server returns the sequence of a stored message, the same sequence for a
// duplicate, the server's error for a message of another stream than the
// one expected, and ErrNoStreamResponse for a subject no stream takes.
func TestPublishStoredReadsTheServersAnswers(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	nc, js := srv.JetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, name := range []string{"S", "T"} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}}); err != nil {
			t.Fatal(err)
		}
	}
	msg := func(subject, id string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = []byte("x")
		if id != "" {
			m.Header.Set(jetstream.MsgIDHeader, id)
		}
		return m
	}
	for i := range 3 {
		seq, err := publishStored(ctx, nc, msg("s.a", ""), "S")
		if err != nil || seq != uint64(i+1) {
			t.Fatalf("publish %d = %d, %v; want %d", i+1, seq, err, i+1)
		}
	}
	first, err := publishStored(ctx, nc, msg("s.a", "id-1"), "S")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := publishStored(ctx, nc, msg("s.a", "id-1"), "S"); err != nil || again != first {
		t.Errorf("the duplicate = %d, %v; want %d (its first's), nil", again, err, first)
	}
	if seq, err := publishStored(ctx, nc, msg("t.a", ""), ""); err != nil || seq != 1 {
		t.Errorf("a publish to any stream = %d, %v; want 1, nil", seq, err)
	}
	// JSStreamNotMatchErr in nats-server's errors.json.
	const streamNotMatch = jetstream.ErrorCode(10060)
	var apiErr *jetstream.APIError
	if _, err := publishStored(ctx, nc, msg("t.a", ""), "S"); !errors.As(err, &apiErr) || apiErr.ErrorCode != streamNotMatch {
		t.Errorf("a publish to T expecting S = %v, want the server's error %d", err, streamNotMatch)
	}
	if _, err := publishStored(ctx, nc, msg("nowhere.a", ""), "S"); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("a publish no stream takes = %v, want ErrNoStreamResponse", err)
	}
}

// TestParsePubAck: answers read from their bytes and through encoding/json
// alike; what is not a stored message's answer, of the stream expected, is
// an error.
func TestParsePubAck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		data, stream string
		seq          uint64 // 0: an error
	}{
		{`{"stream":"S","seq":7}`, "S", 7},
		{`{"stream":"S","seq":7}`, "", 7},
		{`{"stream":"S","seq":18446744073709551615}`, "S", 18446744073709551615},
		{`{"stream":"S","seq":7,"duplicate":true}`, "S", 7},
		{`{"stream":"S","domain":"d","seq":7}`, "S", 7},
		{`{"stream":"S", "seq": 7}`, "S", 7},
		{`{"stream":"S","seq":0}`, "S", 0},
		{`{"stream":"S","seq":07}`, "S", 0},
		{`{"stream":"S","seq":7`, "S", 0},
		{`{"stream":"S","seq":7}}`, "S", 0},
		{`{"stream":"S","seq":18446744073709551616}`, "S", 0},
		{`{"stream":"T","seq":7}`, "S", 0},
		{`{"stream":"","seq":7}`, "", 0},
		{`{"stream":"S\"","seq":7}`, "S", 0},
		{`{"error":{"code":503,"err_code":10077,"description":"resource limits exceeded for account"}}`, "S", 0},
		{`{"stream":"S","seq":7,"error":{"code":400,"err_code":10060,"description":"x"}}`, "S", 0},
		{`{}`, "S", 0},
		{``, "S", 0},
	} {
		seq, err := parsePubAck([]byte(tc.data), tc.stream)
		if tc.seq == 0 {
			if err == nil {
				t.Errorf("parsePubAck(%s, %q) = %d, want an error", tc.data, tc.stream, seq)
			}
			continue
		}
		if err != nil || seq != tc.seq {
			t.Errorf("parsePubAck(%s, %q) = %d, %v; want %d", tc.data, tc.stream, seq, err, tc.seq)
		}
	}
}

// FuzzPlainPubAck: what plainPubAck reads from the bytes, encoding/json
// reads the same from them, with no error in them.
func FuzzPlainPubAck(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":7}`, `{"stream":"S","seq":7,"duplicate":true}`, `{"stream":"a\u0041","seq":1}`} {
		f.Add([]byte(s), "S")
		f.Add([]byte(s), "")
	}
	f.Fuzz(func(t *testing.T, data []byte, stream string) {
		seq, ok := plainPubAck(data, stream)
		if !ok {
			return
		}
		var r struct {
			Error  *jetstream.APIError `json:"error"`
			Stream string              `json:"stream"`
			Seq    uint64              `json:"seq"`
		}
		if err := json.Unmarshal(data, &r); err != nil || r.Error != nil || r.Seq != seq || r.Seq == 0 ||
			r.Stream == "" || (stream != "" && r.Stream != stream) {
			t.Errorf("plainPubAck(%q, %q) = %d; encoding/json reads %+v, %v", data, stream, seq, r, err)
		}
	})
}
