package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// answers is one ordered consumer of the events stream on one filter,
// shared by every call of a client that waits for the answer to a command
// under that filter. A consumer per call cost a JetStream API request each
// and stayed on the server for its inactivity threshold after the call, and
// nats-server allows 1,000 consumers per stream by default: a pipeline
// submitting a thousand jobs within minutes was refused ("maximum consumers
// limit reached").
//
// A call takes a ticket before it publishes; the follower, which delivers
// every event stored after it started, keeps the events that arrive while
// some ticket does not know its command's sequence yet, and the ticket
// looks back through them once it does. So no answer slips between the
// publish and the wait, and the follower keeps no events while nobody is
// between the two.
type answers struct {
	filter string
	ready  chan struct{} // closed once the consumer is open (it is set) or failed to open (err is set)
	it     jetstream.MessagesContext

	mu      sync.Mutex
	last    uint64    // stream sequence of the newest event delivered
	lastAt  time.Time // when the follower last delivered (or started)
	users   int
	idle    *time.Timer
	err     error // set once the follower has failed; it takes no new users
	done    chan struct{}
	base    int       // index of kept[0] in the follower's sequence of events
	kept    []answer  // events since the oldest unresolved ticket began
	open    []*ticket // tickets whose command's sequence is not known yet
	waiting map[uint64][]*ticket
}

// answer is one event the follower delivered: its subject, body and the
// sequence of the command that caused it.
type answer struct {
	seq     uint64
	subject string
	data    []byte
}

// ticket is one call's wait for its answer.
type ticket struct {
	start int // the follower's event index when the ticket was taken
	subjs []string
	got   chan answer
	after uint64    // the follower's last stream sequence when it was taken (0: none yet)
	at    time.Time // when it was taken
}

// errStalled says a follower delivered nothing for answersPatience while
// a call waited on it: its consumer may be gone with a server (an ordered
// consumer notices only after missed heartbeats, and may not recover), or
// the scheduler is slow to answer; the call reads its answer with a
// consumer of its own, and the follower is replaced only if that consumer
// finds an answer the follower should have delivered.
var errStalled = errors.New("the shared events follower delivered nothing")

// answersPatience is how long a call waits on a follower that delivers
// nothing before it reads its answer with a consumer of its own.
const answersPatience = 2 * time.Second

// answersIdle is how long a follower nobody uses is kept, so a steady
// stream of calls reuses one consumer.
const answersIdle = 30 * time.Second

// answersThreshold is the inactivity threshold of a follower's consumer
// and of every other consumer the client opens: once the client stops
// pulling, the server removes the consumer after it.
const answersThreshold = 10 * time.Second

// answersFor returns the client's follower of filter, started if there is
// none, counted as used until release. The consumer is created without the
// client's lock: a creation that hangs (JetStream unreachable) holds up
// only the calls waiting for that same follower, each until its own
// context ends, not every other call of the client.
func (c *Client) answersFor(ctx context.Context, filter string) (*answers, error) {
	for {
		c.mu.Lock()
		a := c.answers[filter]
		if a == nil {
			a = &answers{filter: filter, users: 1, ready: make(chan struct{}), done: make(chan struct{}), waiting: map[uint64][]*ticket{}}
			if c.answers == nil {
				c.answers = map[string]*answers{}
			}
			c.answers[filter] = a
			c.mu.Unlock()
			if err := c.start(ctx, a); err != nil {
				return nil, err
			}
			return a, nil
		}
		c.mu.Unlock()
		select {
		case <-a.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		a.mu.Lock()
		ok := a.err == nil
		if ok {
			a.users++
			if a.idle != nil {
				a.idle.Stop()
				a.idle = nil
			}
		}
		a.mu.Unlock()
		if ok {
			return a, nil
		}
		// It failed or was stopped: take it out (if still there) and start
		// another. A start that failed on its caller's context is no
		// reason for this call to fail.
		c.mu.Lock()
		if c.answers[filter] == a {
			delete(c.answers, filter)
		}
		c.mu.Unlock()
	}
}

// start opens a's consumer and starts its follower, or takes a out of the
// client's followers if the consumer could not be opened. Either way it
// closes a.ready.
func (c *Client) start(ctx context.Context, a *answers) error {
	defer close(a.ready)
	it, err := c.open(ctx, a.filter, jetstream.DeliverNewPolicy)
	if err != nil {
		a.mu.Lock()
		a.err = err
		a.mu.Unlock()
		c.mu.Lock()
		if c.answers[a.filter] == a {
			delete(c.answers, a.filter)
		}
		c.mu.Unlock()
		close(a.done)
		return err
	}
	a.mu.Lock()
	a.it, a.lastAt = it, time.Now()
	a.mu.Unlock()
	go a.follow()
	return nil
}

// release ends one use of a; the last user's release stops it after
// answersIdle unless another call takes it up meanwhile.
func (c *Client) release(a *answers) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.users--
	if a.users > 0 || a.err != nil {
		return
	}
	a.idle = time.AfterFunc(answersIdle, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		a.mu.Lock()
		idle := a.users == 0 && a.err == nil
		if idle {
			a.err = errors.New("stopped while idle")
		}
		a.mu.Unlock()
		if idle {
			if c.answers[a.filter] == a {
				delete(c.answers, a.filter)
			}
			a.it.Stop()
		}
	})
}

// follow delivers the consumer's events to the tickets until it fails or
// is stopped.
func (a *answers) follow() {
	defer close(a.done)
	for {
		m, err := a.it.Next()
		if err != nil {
			a.mu.Lock()
			if a.err == nil {
				a.err = fmt.Errorf("read %s: %w", a.filter, err)
			}
			a.mu.Unlock()
			a.it.Stop()
			return
		}
		ev := answer{seq: eventSeq(m.Data()), subject: m.Subject(), data: m.Data()}
		md, mderr := m.Metadata()
		a.mu.Lock()
		a.lastAt = time.Now()
		if mderr == nil {
			a.last = md.Sequence.Stream
		}
		if len(a.open) > 0 {
			a.kept = append(a.kept, ev)
		} else {
			a.base++
		}
		for _, t := range a.waiting[ev.seq] {
			t.deliver(ev)
		}
		a.mu.Unlock()
	}
}

// deliver hands ev to t if it is an answer t waits for and t has none yet.
func (t *ticket) deliver(ev answer) {
	if !slices.Contains(t.subjs, ev.subject) {
		return
	}
	select {
	case t.got <- ev:
	default:
	}
}

// take returns a ticket for an answer on one of subjs, to be taken before
// the command is published.
func (a *answers) take(subjs []string) *ticket {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := &ticket{start: a.base + len(a.kept), subjs: subjs, got: make(chan answer, 1), after: a.last, at: time.Now()}
	a.open = append(a.open, t)
	return t
}

// wait waits for t's answer to the command at seq (0: the command was not
// published, and the ticket is only given back) until ctx ends, the
// follower fails, or it stalls (errStalled).
func (a *answers) wait(ctx context.Context, t *ticket, seq uint64) (answer, error) {
	a.mu.Lock()
	if seq == 0 {
		a.resolve(t)
		a.mu.Unlock()
		return answer{}, nil
	}
	for _, ev := range a.kept[max(t.start-a.base, 0):] {
		if ev.seq == seq {
			t.deliver(ev)
		}
	}
	a.waiting[seq] = append(a.waiting[seq], t)
	a.resolve(t)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.waiting[seq] = slices.DeleteFunc(a.waiting[seq], func(w *ticket) bool { return w == t })
		if len(a.waiting[seq]) == 0 {
			delete(a.waiting, seq)
		}
	}()
	check := time.NewTicker(answersPatience / 4)
	defer check.Stop()
	for {
		select {
		case ev := <-t.got:
			return ev, nil
		case <-ctx.Done():
			return answer{}, ctx.Err()
		case <-check.C:
			a.mu.Lock()
			// Quiet from the later of the follower's last delivery and
			// this wait's start: an account quiet before the call is not
			// a stall.
			stalled := time.Since(later(a.lastAt, t.at)) >= answersPatience
			a.mu.Unlock()
			if stalled {
				select {
				case ev := <-t.got:
					return ev, nil
				default:
				}
				return answer{}, errStalled
			}
		case <-a.done:
			select {
			case ev := <-t.got:
				return ev, nil
			default:
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			return answer{}, a.err
		}
	}
}

// retire stops a, a follower that failed or stalled, and takes it out of
// the client's followers: the next call starts a new one. Calls waiting on
// it see it end.
func (c *Client) retire(a *answers) {
	c.mu.Lock()
	if c.answers[a.filter] == a {
		delete(c.answers, a.filter)
	}
	c.mu.Unlock()
	a.mu.Lock()
	if a.err == nil {
		a.err = errStalled
	}
	if a.idle != nil {
		a.idle.Stop()
	}
	a.mu.Unlock()
	a.it.Stop()
}

// answerOf reads the answer to the command at seq with a consumer of its
// own, from just after the last event the follower had delivered when t
// was taken (or, if it had none, from a minute before, by the server's
// clock as the client's sees it).
func (c *Client) answerOf(ctx context.Context, filter string, t *ticket, seq uint64) (string, []byte, uint64, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, NamePrefix: ConsumerName(), InactiveThreshold: answersThreshold}
	if t.after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, t.after+1
	} else {
		from := t.at.Add(-time.Minute)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	cons, err := c.js.OrderedConsumer(ctx, c.n.EventsStream(), cfg)
	if err != nil {
		return "", nil, 0, fmt.Errorf("read %s: %w", filter, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return "", nil, 0, fmt.Errorf("read %s: %w", filter, err)
	}
	defer it.Stop()
	var subject string
	var data []byte
	var at uint64
	err = c.each(ctx, it, filter, func(m jetstream.Msg) (bool, error) {
		if eventSeq(m.Data()) != seq || !slices.Contains(t.subjs, m.Subject()) {
			return false, nil
		}
		subject, data = m.Subject(), m.Data()
		if md, err := m.Metadata(); err == nil {
			at = md.Sequence.Stream
		}
		return true, nil
	})
	return subject, data, at, err
}

// behind reports whether a has not delivered the event at stream sequence
// at, which a consumer of its own, started later, did: a is stuck.
func (a *answers) behind(at uint64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return at > a.last
}

// resolve takes t off the open tickets and drops the kept events that no
// open ticket can still look back to. Called with a.mu held.
func (a *answers) resolve(t *ticket) {
	a.open = slices.DeleteFunc(a.open, func(o *ticket) bool { return o == t })
	keepFrom := a.base + len(a.kept)
	for _, o := range a.open {
		keepFrom = min(keepFrom, o.start)
	}
	if drop := keepFrom - a.base; drop > 0 {
		a.kept = slices.Delete(a.kept, 0, drop)
		a.base = keepFrom
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
