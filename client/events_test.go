// Client.Events against a real installation: the last N events in stream
// order with their subjects read, a follow that sees what is published
// after it began, and a message on a subject no event has, reported and
// stepped over.
package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

func TestEvents(t *testing.T) {
	f := newFixture(t)
	f.run(t, "vision", "e-1", 10, "true")

	var last []client.Event
	for ev, err := range f.c.Events(f.ctx, client.EventOptions{Last: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		last = append(last, ev)
	}
	// e-1's story ends dispatched, started, succeeded.
	var types []string
	for i, ev := range last {
		if ev.Kind != client.EventJob || ev.Account != "vision" || ev.Job != "e-1" {
			t.Errorf("event %d: %s is read as kind %q account %q job %q, want a job event of vision's e-1", i, ev.Subject, ev.Kind, ev.Account, ev.Job)
		}
		if i > 0 && ev.StreamSeq != last[i-1].StreamSeq+1 {
			t.Errorf("event %d has stream sequence %d after %d, want the next", i, ev.StreamSeq, last[i-1].StreamSeq)
		}
		types = append(types, jsonType(t, ev.Body))
	}
	if len(last) != 3 || types[2] != string(ledger.EventSucceeded) {
		t.Fatalf("the last 3 events are %d, of types %v; want 3 ending with succeeded", len(last), types)
	}

	// A follow from now on sees a foreign subject, reported, then the
	// next job's events.
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	got := make(chan client.Event, 64)
	bad := make(chan error, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev, err := range f.c.Events(ctx, client.EventOptions{Follow: true}) {
			if errors.Is(err, client.ErrBadEvent) {
				bad <- err
				continue
			}
			if err != nil {
				bad <- err
				return
			}
			got <- ev
		}
	}()
	// The follow has begun once it sees a first event; publish them until
	// it does.
	seen := false
	for i := 0; !seen; i++ {
		if _, err := f.in.js.Publish(ctx, "gpuq.event.vision.bogus.subject.here", []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-bad:
			if !errors.Is(err, client.ErrBadEvent) {
				t.Fatalf("follow: %v", err)
			}
			seen = true
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the follow never saw a message")
		}
	}
	f.run(t, "nlp", "e-2", 10, "true")
	for {
		select {
		case ev := <-got:
			if ev.Job == "e-2" && jsonType(t, ev.Body) == string(ledger.EventSucceeded) {
				cancel()
				<-done // ends without an error once ctx ends
				select {
				case err := <-bad:
					if !errors.Is(err, client.ErrBadEvent) {
						t.Errorf("the follow ended with %v, want no error", err)
					}
				default:
				}
				return
			}
		case err := <-bad:
			if !errors.Is(err, client.ErrBadEvent) {
				t.Fatalf("follow: %v", err)
			}
		case <-ctx.Done():
			t.Fatal("the follow never saw e-2 succeed")
		}
	}
}

// jsonType reads the "type" field of an event body.
func jsonType(t *testing.T, body []byte) string {
	t.Helper()
	var v struct{ Type string }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("event body %s: %v", body, err)
	}
	return v.Type
}
