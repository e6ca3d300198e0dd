package client

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Event is one message of the events stream (gpuq.event.>), as
// [Client.Events] reads it: where it was stored and what it is about. Body
// is the message as the scheduler published it, to decode with the wire
// decoder of its Kind ([wire.DecodeJobEvent], …).
type Event struct {
	// StreamSeq is the message's sequence in the events stream (not the
	// command log's sequence, which the body carries).
	StreamSeq uint64
	Time      time.Time // when the server stored it
	Subject   string
	// Kind is what the subject says the event is about: EventJob,
	// EventAccount, EventInvalid or EventConfig.
	Kind    EventKind
	Account string // "" for config events and unaddressed invalid ones
	Job     string // only for job events
	Body    []byte
}

// EventKind is what an event is about, read from its subject.
type EventKind string

// Event kinds.
const (
	EventJob     EventKind = "job"     // gpuq.event.<account>.job.<job>
	EventAccount EventKind = "account" // gpuq.event.<account>.account
	EventInvalid EventKind = "invalid" // gpuq.event.<account>.invalid, gpuq.event.invalid
	EventConfig  EventKind = "config"  // gpuq.event.config
)

// EventOptions say which events [Client.Events] reads.
type EventOptions struct {
	// Last starts the read with the last Last events the stream holds; 0
	// for none of them (only events published from now on, with Follow).
	Last int
	// Follow goes on with events as they are published, until ctx ends;
	// without it the read ends with the last event stored when it began.
	Follow bool
}

// ErrBadEvent is wrapped by the error [Client.Events] yields for a message
// whose subject is not an event subject of the installation; the read goes
// on after it.
var ErrBadEvent = errors.New("gpuq: not an event subject")

// Events reads the events stream through an ordered consumer, oldest
// first: every event of every account, so it needs the right to read the
// whole stream (an admin's, or the scheduler's); a tenant follows one job
// with [Client.Watch]. With Follow it ends only with ctx, which ends the
// sequence without an error; any other error ends it, except one wrapping
// [ErrBadEvent], after which it goes on.
func (c *Client) Events(ctx context.Context, o EventOptions) iter.Seq2[Event, error] {
	return func(yield func(Event, error) bool) {
		if o.Last < 0 {
			yield(Event{}, fmt.Errorf("events: last %d is negative", o.Last))
			return
		}
		stream := c.n.EventsStream()
		var last uint64
		{
			lctx, cancel := c.ctx(ctx)
			str, err := c.js.Stream(lctx, stream)
			if err == nil {
				var info *jetstream.StreamInfo
				if info, err = str.Info(lctx); err == nil {
					last = info.State.LastSeq
				}
			}
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					yield(Event{}, fmt.Errorf("events: look up %s: %w", stream, err))
				}
				return
			}
		}
		if !o.Follow && (last == 0 || o.Last == 0) {
			return
		}
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: c.n.EventFilters(), NamePrefix: ConsumerName(),
			DeliverPolicy: jetstream.DeliverNewPolicy}
		if o.Last > 0 && last > 0 {
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = 1
			if last > uint64(o.Last) {
				cfg.OptStartSeq = last - uint64(o.Last) + 1
			}
		}
		cons, err := c.js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			if ctx.Err() == nil {
				yield(Event{}, fmt.Errorf("events: read %s: %w", stream, err))
			}
			return
		}
		it, err := cons.Messages()
		if err != nil {
			yield(Event{}, fmt.Errorf("events: read %s: %w", stream, err))
			return
		}
		defer it.Stop()
		stop := context.AfterFunc(ctx, it.Stop)
		defer stop()
		for {
			m, err := it.Next()
			if err != nil {
				if ctx.Err() == nil {
					yield(Event{}, fmt.Errorf("events: read %s: %w", stream, err))
				}
				return
			}
			md, err := m.Metadata()
			if err != nil {
				yield(Event{}, fmt.Errorf("events: read %s: %w", stream, err))
				return
			}
			ev := Event{StreamSeq: md.Sequence.Stream, Time: md.Timestamp, Subject: m.Subject(), Body: m.Data()}
			err = c.parseEvent(&ev)
			if !yield(ev, err) {
				return
			}
			if !o.Follow && ev.StreamSeq >= last {
				return
			}
		}
	}
}

// parseEvent fills in ev's Kind, Account and Job from its subject.
func (c *Client) parseEvent(ev *Event) error {
	rest, ok := strings.CutPrefix(ev.Subject, c.n.Prefix()+".event.")
	parts := strings.Split(rest, ".")
	switch {
	case !ok:
	case len(parts) == 1 && parts[0] == "config":
		ev.Kind = EventConfig
		return nil
	case len(parts) == 1 && parts[0] == "invalid":
		ev.Kind = EventInvalid
		return nil
	case len(parts) == 2 && parts[1] == "account":
		ev.Kind, ev.Account = EventAccount, parts[0]
		return nil
	case len(parts) == 2 && parts[1] == "invalid":
		ev.Kind, ev.Account = EventInvalid, parts[0]
		return nil
	case len(parts) == 3 && parts[1] == "job":
		ev.Kind, ev.Account, ev.Job = EventJob, parts[0], parts[2]
		return nil
	}
	return fmt.Errorf("%w: %s", ErrBadEvent, ev.Subject)
}
