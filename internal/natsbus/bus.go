package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// CommandLog is the command stream, read in order by an ordered consumer.
type CommandLog struct {
	js     jetstream.JetStream
	stream string
}

// NewCommandLog returns the command log of installation n.
func NewCommandLog(js jetstream.JetStream, n subjects.Names) *CommandLog {
	return &CommandLog{js: js, stream: n.CmdStream()}
}

type follower struct {
	c    chan scheduler.LogEntry
	done chan struct{}
	cc   jetstream.ConsumeContext
	once sync.Once
	mu   sync.Mutex
	err  error
}

// A pull of the command log waits up to followExpiry and is heartbeated
// every followHeartbeat while it waits: a pull the server has dropped
// (seen on a host's order consumer: pending messages, no waiting pull, no
// error) shows as two missed heartbeats, and the consumer pulls afresh,
// after 2s rather than the 10s jetstream's defaults (30s, 5s) would take.
// Every submission waits for the fold meanwhile.
const (
	followExpiry    = 10 * time.Second
	followHeartbeat = time.Second
)

// Follow starts an ordered consumer at entry after+1 and delivers entries
// on the follower's channel. The consumer is ephemeral: it keeps no state on
// the server, and the checkpoint says where the next one starts.
func (l *CommandLog) Follow(ctx context.Context, after uint64) (scheduler.Follower, error) {
	cons, err := l.js.OrderedConsumer(ctx, l.stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1,
	})
	if err != nil {
		return nil, fmt.Errorf("ordered consumer on %s from %d: %w", l.stream, after+1, err)
	}
	f := &follower{c: make(chan scheduler.LogEntry, 4096), done: make(chan struct{})}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		md, err := m.Metadata()
		if err != nil {
			f.fail(fmt.Errorf("metadata of a %s message: %w", l.stream, err))
			return
		}
		e := scheduler.LogEntry{Seq: md.Sequence.Stream, Time: md.Timestamp, Subject: m.Subject(), Data: m.Data(), Pending: md.NumPending}
		select {
		case f.c <- e:
		case <-f.done:
		}
	}, jetstream.PullMaxMessages(1024), jetstream.PullExpiry(followExpiry), jetstream.PullHeartbeat(followHeartbeat))
	if err != nil {
		return nil, fmt.Errorf("consume %s: %w", l.stream, err)
	}
	f.cc = cc
	go func() {
		select {
		case <-cc.Closed():
			f.fail(errors.New("the ordered consumer closed"))
		case <-ctx.Done():
			f.Stop()
		case <-f.done:
		}
	}()
	return f, nil
}

func (f *follower) C() <-chan scheduler.LogEntry { return f.c }

func (f *follower) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

func (f *follower) fail(err error) {
	f.mu.Lock()
	if f.err == nil {
		f.err = err
	}
	f.mu.Unlock()
	f.Stop()
}

// Stop ends the consumer. Entries already queued stay readable; the channel
// is not closed, so a reader must stop on its own context too.
func (f *follower) Stop() {
	f.once.Do(func() {
		close(f.done)
		if f.cc != nil {
			f.cc.Stop()
		}
	})
}

// Trim purges the log's entries up to and including upTo.
func (l *CommandLog) Trim(ctx context.Context, upTo uint64) error {
	s, err := l.js.Stream(ctx, l.stream)
	if err != nil {
		return err
	}
	return s.Purge(ctx, jetstream.WithPurgeSequence(upTo+1))
}

// Publisher publishes messages with their de-duplication ids and waits for
// every acknowledgement, retrying failures with exponential backoff until
// MaxElapsed has passed.
type Publisher struct {
	js jetstream.JetStream
	// MaxElapsed bounds the retries of one message. Defaults to 30s.
	MaxElapsed time.Duration
	// ackTimeout bounds the wait for the next acknowledgement; tests
	// shorten it. Defaults to defaultAckTimeout.
	ackTimeout time.Duration
}

// NewPublisher returns a publisher over js.
func NewPublisher(js jetstream.JetStream) *Publisher {
	return &Publisher{js: js, MaxElapsed: 30 * time.Second, ackTimeout: defaultAckTimeout}
}

// window bounds the asynchronous publishes in flight at once, below the
// client's default limit of 4000.
const window = 1024

// defaultAckTimeout bounds the wait for the next acknowledgement.
const defaultAckTimeout = 10 * time.Second

// Publish publishes msgs in order and returns once the server has stored
// each (a duplicate inside the window counts as stored), with how many it
// stored anew: those not acknowledged as duplicates. (A message stored by a
// try whose answer was lost is acknowledged as a duplicate on the retry, so
// the count can fall short; it never counts a message the server already had
// before the call.)
//
// Up to window messages are in flight at once: each acknowledgement taken
// lets the next message go, so the server is never left without work
// between two groups. A message whose publish fails is published again,
// alone, until it is stored; when no acknowledgement comes within the ack
// timeout, every message then in flight is, one by one, and the rest go
// out asynchronously again.
func (p *Publisher) Publish(ctx context.Context, msgs []wire.Message) (int, error) {
	stored := 0
	count := func(ack *jetstream.PubAck) {
		if ack != nil && !ack.Duplicate {
			stored++
		}
	}
	futs := make([]jetstream.PubAckFuture, len(msgs))
	sent := 0 // msgs[:sent] went out asynchronously, or failed to
	// stale: msgs[:stale] went out before an acknowledgement timed out;
	// they are not waited for again.
	stale := 0
	timeout := time.NewTimer(p.ackTimeout)
	defer timeout.Stop()
	for i := range msgs {
		if stale > 0 && i == stale {
			// Past the messages of a timeout round: the rest go out
			// asynchronously again, and their wait is bounded again.
			timeout.Reset(p.ackTimeout)
		}
		for i >= stale && sent < len(msgs) && sent-i < window {
			if f, err := p.js.PublishMsgAsync(natsMsg(msgs[sent])); err == nil {
				futs[sent] = f
			}
			sent++
		}
		f := futs[i]
		switch {
		case f == nil:
		case i < stale:
			// Past a timeout: take an answer already in, wait for none.
			select {
			case ack := <-f.Ok():
				count(ack)
				continue
			default:
			}
		default:
			select {
			case ack := <-f.Ok():
				count(ack)
				timeout.Reset(p.ackTimeout)
				continue
			case <-f.Err():
			case <-timeout.C:
				// The timer may have fired while this goroutine waited
				// to run, with the answer in as well (a select picks
				// either): an answer in counts, whatever the timer says.
				select {
				case ack := <-f.Ok():
					count(ack)
					timeout.Reset(p.ackTimeout)
					continue
				default:
				}
				// No answer in time: publish this message and every one
				// still unanswered one by one. A message the server did
				// store is acked again as a duplicate.
				stale = sent
			case <-ctx.Done():
				return stored, ctx.Err()
			}
		}
		ack, err := p.retry(ctx, msgs[i])
		if err != nil {
			return stored, err
		}
		count(ack)
		if i >= stale {
			// A retry outside a timeout round takes what time it takes:
			// the next message's wait starts afresh, not from before it.
			timeout.Reset(p.ackTimeout)
		}
	}
	return stored, nil
}

// retry publishes one message synchronously until it is stored.
func (p *Publisher) retry(ctx context.Context, m wire.Message) (*jetstream.PubAck, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxElapsedTime = 20*time.Millisecond, p.MaxElapsed
	var ack *jetstream.PubAck
	err := backoff.Retry(func() error {
		// Each try waits at most an ack timeout: a request or answer lost
		// in a failover is tried again, not waited on until ctx's deadline.
		actx, cancel := context.WithTimeout(ctx, p.ackTimeout)
		defer cancel()
		var err error
		ack, err = p.js.PublishMsg(actx, natsMsg(m))
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		if err != nil {
			return fmt.Errorf("publish %s (id %s): %w", m.Subject, m.MsgID, err)
		}
		return nil
	}, backoff.WithContext(b, ctx))
	return ack, err
}

func natsMsg(m wire.Message) *nats.Msg {
	nm := nats.NewMsg(m.Subject)
	nm.Data = m.Data
	if m.MsgID != "" {
		nm.Header.Set(subjects.MsgIDHeader, m.MsgID)
	}
	for k, v := range m.Header {
		nm.Header.Set(k, v)
	}
	return nm
}

// Hosts watches the hosts bucket.
type Hosts struct {
	kv  jetstream.KeyValue
	log *slog.Logger
}

// NewHosts returns a watcher of the hosts bucket kv; log receives notes on
// heartbeats that do not decode.
func NewHosts(kv jetstream.KeyValue, log *slog.Logger) *Hosts { return &Hosts{kv: kv, log: log} }

// UnstatedHeartbeatTTL is how long a heartbeat that states no TTL (one from
// a worker older than the field) counts, longer than any TTL gpuq's workers
// are configured with in practice.
const UnstatedHeartbeatTTL = time.Minute

// expiryTick is how often the watcher looks for heartbeats past their TTL.
const expiryTick = 100 * time.Millisecond

// Watch reports every current heartbeat, then every change, until ctx ends;
// then the channel closes. A heartbeat that does not decode is logged and
// treated as the host being gone, and so is a host heard of last longer ago
// than its heartbeat's TTL, counted on this process's clock from when the
// heartbeat arrived. (The bucket keeps no delete markers for expired keys:
// those need a stream that allows rollups, and every worker writes to this
// one; see [Setup].)
func (h *Hosts) Watch(ctx context.Context) (<-chan scheduler.HostUpdate, error) {
	w, err := h.kv.WatchAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", h.kv.Bucket(), err)
	}
	out := make(chan scheduler.HostUpdate, 64)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }() // ending the watch; nothing to report
		tick := time.NewTicker(expiryTick)
		defer tick.Stop()
		expires := map[string]time.Time{}
		send := func(u scheduler.HostUpdate) bool {
			select {
			case out <- u:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			var u scheduler.HostUpdate
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				for name, at := range expires {
					if now.Before(at) {
						continue
					}
					delete(expires, name)
					h.log.Info("heartbeat expired", slog.String("worker", name))
					if !send(scheduler.HostUpdate{Name: name}) {
						return
					}
				}
				continue
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue // end of the initial values
				}
				u.Name = e.Key()
				delete(expires, u.Name)
				if e.Operation() == jetstream.KeyValuePut {
					host, err := wire.DecodeHeartbeat(e.Value())
					switch {
					case err != nil:
						h.log.Warn("bad heartbeat", slog.String("worker", e.Key()), slog.Any("err", err))
					case host.Host != e.Key():
						h.log.Warn("heartbeat under another host's key", slog.String("worker", e.Key()), slog.String("names", host.Host))
					default:
						u.Host = &host
						expires[u.Name] = time.Now().Add(heartbeatTTL(host))
					}
				}
			}
			if !send(u) {
				return
			}
		}
	}()
	return out, nil
}

// heartbeatTTL is how long h counts: the TTL it states, or
// [UnstatedHeartbeatTTL].
func heartbeatTTL(h wire.Heartbeat) time.Duration {
	if d, err := time.ParseDuration(h.TTL); err == nil && d > 0 {
		return d
	}
	return UnstatedHeartbeatTTL
}
