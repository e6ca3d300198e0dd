// Package client is the Go API a pipeline uses to talk to gpuq: submit a job
// and learn whether it was accepted, cancel it, watch a job's events until
// it ends, and read what gpuq knows: jobs (with filters and paging, archived
// ones too), accounts, hosts, a job's output, usage, the journal of every
// balance movement, an audit of the ledger against that journal, and the
// installation's status at a glance ([Client.Status]). The gpuq command is a
// thin layer over it.
//
// Reads come in two consistencies. [Client.Job], [Client.Account],
// [Client.Jobs] and [Client.Accounts] read each ledger key's current value:
// every record as of one moment, not the ledger as of one command.
// [Client.Snapshot] reads the ledger as of the scheduler's checkpoint, with
// records stored past it read back from their keys' history; [Client.Usage]
// and [Client.Audit] use it, since they compare records with the journal
// ([Client.Journal], [Client.JournalFromSeals]).
// No read goes through the scheduler's recovery, and a value gpuq did not
// write is reported as a *[ForeignValueError], not a crash.
//
// A rejection is a *[RejectedError], which errors.Is matches with the
// sentinel of its reason ([ErrInsufficientCredits], …).
//
// Every call publishes to, or reads from, JetStream over the *nats.Conn the
// caller provides; the client keeps no state of its own beyond a handle on
// the ledger bucket, and is safe for concurrent use. Programs in other
// languages use the wire contract (docs/wire.md) directly.
//
// Against the deploy configuration (deploy/), where each tenant is a NATS
// account of its own, connect with the user's nkey and its own inbox prefix:
// nats.Connect(url, nats.NkeyOptionFromSeed(seed), nats.CustomInboxPrefix("_INBOX_vision")).
//
//	c, _ := client.New(nc)
//	ev, err := c.Submit(ctx, ledger.Submit{Account: "vision", ID: "train-42", GPUs: 2, Cost: 120,
//		Command: []string{"python", "train.py"}})
//	// ev.Type == ledger.EventAccepted, or err is a *client.RejectedError saying why.
//	final, err := c.Wait(ctx, "vision", "train-42", ev.Seq)
package client

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// ErrNotFound is returned when a job or account does not exist.
var ErrNotFound = errors.New("gpuq: not found")

// ErrNoAnswer is returned when the scheduler did not answer a command in
// time. The command is in the log and will be applied when a scheduler runs.
var ErrNoAnswer = errors.New("gpuq: no answer from the scheduler")

// RejectedError is a command the scheduler refused. Reason is
// machine-readable (ledger.ReasonInsufficientCredits, …); Message says it
// for people.
type RejectedError struct {
	Seq     uint64
	Reason  ledger.Reason
	Message string
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("rejected (%s): %s", e.Reason, e.Message)
}

// Client talks to one gpuq installation.
type Client struct {
	js      jetstream.JetStream
	n       subjects.Names
	timeout time.Duration
	// tailReorder is the tail's reorder bound (jobs_tail.go): tailReorder,
	// or less in tests, which would otherwise need thousands of events.
	tailReorder int

	mu sync.Mutex
	kv jetstream.KeyValue // the ledger bucket, once a read has opened it

	// facts is the facts bucket, once Explain has opened it (explain.go);
	// guarded by mu.
	facts jetstream.KeyValue

	// answers holds the followers of the events stream that calls share to
	// wait for their commands' answers, by filter (answers.go); guarded by
	// mu.
	answers map[string]*answers
}

// Option configures a [Client].
type Option func(*Client) error

// WithPrefix selects the installation by its subject prefix. Defaults to
// "gpuq".
func WithPrefix(prefix string) Option {
	return func(c *Client) error {
		n, err := subjects.New(prefix)
		c.n = n
		return err
	}
}

// WithTimeout sets how long a call waits when its context has no deadline.
// Defaults to 30s.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) error {
		if d <= 0 {
			return fmt.Errorf("client: timeout %v must be positive", d)
		}
		c.timeout = d
		return nil
	}
}

// New returns a client over nc.
func New(nc *nats.Conn, opts ...Option) (*Client, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	c := &Client{js: js, n: subjects.Default, timeout: 30 * time.Second, tailReorder: tailReorder}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Names returns the installation's subject names.
func (c *Client) Names() subjects.Names { return c.n }

func (c *Client) ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.timeout)
}

// Submit publishes s and waits for the scheduler's answer to this call. It
// returns the accepted event (or, when the id is already taken by a job with
// the same terms, an ignored event with reason duplicate that carries that
// job's state). A refused submission returns its rejected event and a
// *RejectedError: duplicate_conflict when the id is taken by a job with
// other terms, and after a rejection a new call is evaluated afresh (say,
// once the account is topped up). A submission that fails validation is not
// published at all.
//
// Each call's de-duplication id is the terms' id plus a random nonce, so the
// transport never answers a call with the outcome of another: the fold, which
// decides idempotency by job id, judges every call.
func (c *Client) Submit(ctx context.Context, s ledger.Submit) (wire.JobEvent, error) {
	msg, err := wire.EncodeSubmit(c.n, s)
	if err != nil {
		return wire.JobEvent{}, fmt.Errorf("submit %s: %w", s.ID, err)
	}
	return c.jobCommand(ctx, msg, s.Account, s.ID)
}

// Cancel asks the scheduler to cancel job of account and waits for its
// answer: cancelled (a pending job), cancel_requested (a running one, settled
// when its worker reports), or ignored with the reason.
func (c *Client) Cancel(ctx context.Context, account, job string) (wire.JobEvent, error) {
	msg, err := wire.EncodeCancel(c.n, ledger.Cancel{Account: account, Job: job})
	if err != nil {
		return wire.JobEvent{}, fmt.Errorf("cancel %s: %w", job, err)
	}
	return c.jobCommand(ctx, msg, account, job)
}

func (c *Client) jobCommand(ctx context.Context, msg wire.Message, account, job string) (wire.JobEvent, error) {
	seq, data, err := c.accountAnswer(ctx, msg, account, c.n.JobEvent(account, job))
	if err != nil {
		return wire.JobEvent{}, err
	}
	ev, err := wire.DecodeJobEvent(data)
	if err != nil {
		return wire.JobEvent{}, err
	}
	return ev, rejection(seq, ev.Type, ev.Reason, ev.Message)
}

// Admin publishes an account administration command and waits for its
// outcome. A refused command returns its event and a *RejectedError.
func (c *Client) Admin(ctx context.Context, a ledger.Admin) (wire.AccountEvent, error) {
	msg, err := wire.EncodeAdmin(c.n, a)
	if err != nil {
		return wire.AccountEvent{}, fmt.Errorf("%s %s: %w", a.Op, a.ID, err)
	}
	seq, data, err := c.accountAnswer(ctx, msg, a.Account, c.n.AccountEvent(a.Account))
	if err != nil {
		return wire.AccountEvent{}, err
	}
	ev, err := wire.DecodeAccountEvent(data)
	if err != nil {
		return wire.AccountEvent{}, err
	}
	return ev, rejection(seq, ev.Type, ev.Reason, ev.Message)
}

// accountAnswer publishes msg, a command of account, and waits for its
// answer on want or on the account's invalid-event subject. It returns the
// command's sequence and the answer's body, still to decode; an
// invalid-event answer is returned as a *RejectedError.
func (c *Client) accountAnswer(ctx context.Context, msg wire.Message, account, want string) (uint64, []byte, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	invalid := c.n.InvalidEvent(account)
	seq, subject, data, err := c.ask(ctx, msg, c.n.AccountEvents(account), want, invalid)
	if err != nil {
		return 0, nil, err
	}
	if subject == invalid {
		ev, err := wire.DecodeInvalidEvent(data)
		if err != nil {
			return 0, nil, err
		}
		return 0, nil, &RejectedError{Seq: seq, Reason: ev.Reason, Message: ev.Message}
	}
	return seq, data, nil
}

// rejection returns a *RejectedError for an answer of type rejected to
// the command at seq, and nil for any other answer.
func rejection(seq uint64, typ ledger.EventType, reason ledger.Reason, msg string) error {
	if typ != ledger.EventRejected {
		return nil
	}
	return &RejectedError{Seq: seq, Reason: reason, Message: msg}
}

// SetPricing publishes a price table for metered jobs and waits for the
// scheduler's answer.
func (c *Client) SetPricing(ctx context.Context, p ledger.SetPricing) (wire.ConfigEvent, error) {
	msg, err := wire.EncodePricing(c.n, p)
	if err != nil {
		return wire.ConfigEvent{}, fmt.Errorf("price table %s: %w", p.ID, err)
	}
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	seq, _, data, err := c.ask(ctx, msg, c.n.ConfigEvent(), c.n.ConfigEvent())
	if err != nil {
		return wire.ConfigEvent{}, err
	}
	ev, err := wire.DecodeConfigEvent(data)
	if err != nil {
		return wire.ConfigEvent{}, err
	}
	return ev, rejection(seq, ev.Type, ev.Reason, ev.Message)
}

// Pricing reads the price table of metered jobs; nil when none is set.
func (c *Client) Pricing(ctx context.Context) (*ledger.Pricing, error) {
	data, err := c.get(ctx, subjects.PricingKey)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	return ledger.UnmarshalPricing(data)
}

// ask publishes msg and waits for the first event it caused on one of
// subjs, all under filter: a submitter reads through gpuq.event.<account>.>,
// so it needs to read only its own events. It listens before publishing, so
// the answer cannot slip past; when the server recognises a duplicate, the
// answer was given before and is read from the stream's start.
func (c *Client) ask(ctx context.Context, msg wire.Message, filter string, subjs ...string) (uint64, string, []byte, error) {
	live, err := c.answersFor(ctx, filter)
	if err != nil {
		return 0, "", nil, err
	}
	defer c.release(live)
	t := live.take(subjs)
	seq, dup, err := c.publish(ctx, msg)
	if err != nil || dup {
		_, _ = live.wait(ctx, t, 0) // gives the ticket back; nothing to wait for
	}
	if err != nil {
		return 0, "", nil, err
	}
	var subject string
	var data []byte
	if dup {
		// The answer was given before: read it from the stream's start.
		past, err := c.open(ctx, filter, jetstream.DeliverAllPolicy)
		if err != nil {
			return 0, "", nil, err
		}
		defer past.Stop()
		err = c.each(ctx, past, filter, func(m jetstream.Msg) (bool, error) {
			if eventSeq(m.Data()) != seq || !slices.Contains(subjs, m.Subject()) {
				return false, nil
			}
			subject, data = m.Subject(), m.Data()
			return true, nil
		})
	} else {
		var ev answer
		ev, err = live.wait(ctx, t, seq)
		subject, data = ev.subject, ev.data
		if err != nil && ctx.Err() == nil {
			// The shared follower failed or stalled: read this answer with
			// a consumer of its own. A follower that failed, or stalled
			// while the answer was stored past where it had read, is
			// replaced; one that only waited on a slow scheduler is kept,
			// so a slow scheduler does not cost a consumer per call.
			failed := !errors.Is(err, errStalled)
			var at uint64
			subject, data, at, err = c.answerOf(ctx, filter, t, seq)
			if failed || err == nil && live.behind(at) {
				c.retire(live)
			}
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return seq, "", nil, fmt.Errorf("command %d: %w within the wait; it is in the log and will be applied when a scheduler runs", seq, ErrNoAnswer)
	}
	return seq, subject, data, err
}

// publish stores msg in the command stream and returns its sequence (the
// original's, when the server recognised a duplicate). The id gets a random
// nonce ([wire.WithNonce]), so each call is one command for the fold to
// judge, a retry inside the call is stored once, and nobody else on the
// stream can take the id first and have this command dropped as a
// duplicate.
func (c *Client) publish(ctx context.Context, msg wire.Message) (uint64, bool, error) {
	msg = wire.WithNonce(msg, rand.Text())
	m := nats.NewMsg(msg.Subject)
	m.Data = msg.Data
	m.Header.Set(subjects.MsgIDHeader, msg.MsgID)
	ack, err := c.js.PublishMsg(ctx, m, jetstream.WithExpectStream(c.n.CmdStream()))
	if err != nil {
		return 0, false, fmt.Errorf("publish to %s: %w", msg.Subject, err)
	}
	return ack.Sequence, ack.Duplicate, nil
}

// ConsumerName returns a fresh name prefix for an ordered consumer: 130
// random bits. Where tenants share gpuq's streams from accounts of their
// own (deploy/), a consumer is pulled by name, and no tenant may list
// consumers; a name nobody can guess keeps one tenant from pulling
// another's.
func ConsumerName() string { return "c" + rand.Text() }

// open starts an ordered consumer of the events stream on one filter (one,
// so that the filter is in the request's subject, which is what the deploy
// configuration's permissions check).
func (c *Client) open(ctx context.Context, filter string, from jetstream.DeliverPolicy) (jetstream.MessagesContext, error) {
	cons, err := c.js.OrderedConsumer(ctx, c.n.EventsStream(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter}, DeliverPolicy: from, NamePrefix: ConsumerName(), InactiveThreshold: answersThreshold})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filter, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", filter, err)
	}
	return it, nil
}

// each delivers its messages to fn until fn says stop, fn fails or ctx
// ends.
func (c *Client) each(ctx context.Context, it jetstream.MessagesContext, filter string, fn func(jetstream.Msg) (bool, error)) error {
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w", filter, err)
		}
		done, err := fn(m)
		if err != nil || done {
			return err
		}
	}
}

// eventSeq reads the "seq" field of an event body.
func eventSeq(data []byte) uint64 {
	var ev struct {
		Seq uint64 `json:"seq"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return 0
	}
	return ev.Seq
}

// Final reports whether ev ends its job's story: the job succeeded, failed,
// was cancelled, or its submission was rejected. (A rejected resubmission of
// a job that exists, such as a duplicate_conflict, does not end that job.)
func Final(ev wire.JobEvent) bool {
	switch ev.Type {
	case ledger.EventSucceeded, ledger.EventFailed, ledger.EventCancelled:
		return true
	case ledger.EventRejected:
		return ev.State == ledger.StateRejected
	}
	return false
}

// Watch calls fn with each event of job, oldest first, from the submission
// at log sequence fromSeq on (0 for every event the stream keeps), until a
// final event, an error from fn, or the end of ctx. It returns the final
// event. Watch waits as long as ctx allows: give it a deadline.
func (c *Client) Watch(ctx context.Context, account, job string, fromSeq uint64, fn func(wire.JobEvent) error) (wire.JobEvent, error) {
	var last wire.JobEvent
	filter := c.n.JobEvent(account, job)
	it, err := c.open(ctx, filter, jetstream.DeliverAllPolicy)
	if err != nil {
		return last, err
	}
	defer it.Stop()
	err = c.each(ctx, it, filter, func(m jetstream.Msg) (bool, error) {
		ev, err := wire.DecodeJobEvent(m.Data())
		if err != nil {
			return false, err
		}
		if ev.Seq < fromSeq {
			return false, nil
		}
		last = ev
		if fn != nil {
			if err := fn(ev); err != nil {
				return false, err
			}
		}
		return Final(ev), nil
	})
	return last, err
}

// Wait waits until job ends and returns its final event. fromSeq is the
// sequence of its accepted submission (wire.JobEvent.Seq of Submit's
// answer); 0 reads it from the job's record.
func (c *Client) Wait(ctx context.Context, account, job string, fromSeq uint64) (wire.JobEvent, error) {
	if fromSeq == 0 {
		j, err := c.Job(ctx, job)
		if err != nil {
			return wire.JobEvent{}, err
		}
		fromSeq = j.SubmitSeq
	}
	return c.Watch(ctx, account, job, fromSeq, nil)
}

// Job reads a job's record from the ledger view. The view trails the log by
// at most one flush; events are the way to follow a job as it happens.
func (c *Client) Job(ctx context.Context, id string) (*ledger.Job, error) {
	if err := subjects.CheckToken("job id", id); err != nil {
		return nil, err
	}
	data, err := c.get(ctx, subjects.JobKey(id))
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	return ledger.UnmarshalJob(data)
}

// Account reads an account's record from the ledger view.
func (c *Client) Account(ctx context.Context, id string) (*ledger.Account, error) {
	if err := subjects.CheckToken("account", id); err != nil {
		return nil, err
	}
	data, err := c.get(ctx, subjects.AccountKey(id))
	if err != nil {
		return nil, fmt.Errorf("account %s: %w", id, err)
	}
	return ledger.UnmarshalAccount(data)
}

func (c *Client) get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := c.ctx(ctx)
	defer cancel()
	kv, err := c.ledgerKV(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return e.Value(), nil
}

// ledgerKV returns the ledger bucket, opening it on first use: opening costs
// a round trip. A failure is not kept, so a later call tries again (the
// bucket appears when a scheduler first runs).
func (c *Client) ledgerKV(ctx context.Context) (jetstream.KeyValue, error) {
	return c.bucket(ctx, c.n.LedgerBucket(), &c.kv)
}

// bucket returns the bucket name, kept in *held once opened (under c.mu).
// It is opened without the lock, so concurrent first reads do not queue
// behind one another's round trip; any of the handles will do.
func (c *Client) bucket(ctx context.Context, name string, held *jetstream.KeyValue) (jetstream.KeyValue, error) {
	c.mu.Lock()
	kv := *held
	c.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	kv, err := c.js.KeyValue(ctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, fmt.Errorf("open %s: %w", name, ErrNoBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if *held == nil {
		*held = kv
	}
	return *held, nil
}
