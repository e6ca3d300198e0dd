package natsbus

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
	"github.com/gpuq/gpuq/worker"
)

// WorkerBus is one host's link to JetStream: its durable dispatch consumer,
// its report subject, the logs stream, its heartbeat key and reads of job
// records in the ledger. It implements worker.Bus.
type WorkerBus struct {
	js    jetstream.JetStream
	n     subjects.Names
	host  string
	hosts jetstream.KeyValue // nil until bound, when NewWorkerBus was given none
	// AckWait is how long a delivered order may go unacked before it is
	// delivered again (the worker died before its started report was
	// stored). Defaults to 30s.
	AckWait time.Duration
	// PullExpiry is how long one pull request for orders waits. Defaults
	// to 10s, as does a value under 1s.
	PullExpiry time.Duration
	// PullHeartbeat is how often the server tells a waiting pull request
	// it still holds it; two missed heartbeats make the bus read its
	// orders afresh. They are missed when the consumer's server is gone,
	// and when the server no longer holds a pull the client counts on:
	// with nats-server in a process of its own, about one run in eight of
	// BenchmarkLifecycles -bench.child found a host's consumer with 64
	// orders pending and no pull waiting, its reader waiting on a pull
	// the server no longer had. Defaults to 1s (the client's default, half
	// the expiry, let that last 10s); at most half of PullExpiry.
	PullHeartbeat time.Duration
	// ReportRetried, if set, is called each time a report's publish
	// failed and is retried (for metrics). Defaults to nil.
	ReportRetried func(err error)

	mu     sync.Mutex
	ledger jetstream.KeyValue // bound on first use, see Job
}

// NewWorkerBus returns the bus of host. hosts is the hosts bucket, or nil
// to bind it on first use (so a worker started while the server is
// unreachable need not bind it first).
func NewWorkerBus(js jetstream.JetStream, n subjects.Names, host string, hosts jetstream.KeyValue) (*WorkerBus, error) {
	if err := subjects.CheckToken("host", host); err != nil {
		return nil, err
	}
	return &WorkerBus{js: js, n: n, host: host, hosts: hosts, AckWait: 30 * time.Second,
		PullExpiry: 10 * time.Second, PullHeartbeat: time.Second}, nil
}

// ConsumerName is the durable consumer a host's worker reads its orders with.
func ConsumerName(host string) string { return "worker-" + host }

// Orders delivers the host's orders until ctx ends, then closes the
// channel. It creates (or updates) the host's durable consumer and reads
// it; whenever that fails (the server is unreachable, the consumer's server
// died and its heartbeats stopped, the consumer was deleted) it calls lost
// with the error, and creates the consumer and its reader again with
// backoff, for as long as it takes, calling lost(nil) each time it reads
// again. An order not acked within AckWait is delivered again, so orders
// buffered by a reader given up are not lost. Up to ordersBuffer orders
// wait on the channel, decoded, while the worker handles one: orders sent
// together are then there together, for the worker to take as one batch
// (one record of them on disk).
func (b *WorkerBus) Orders(ctx context.Context, lost func(error)) <-chan worker.Order {
	out := make(chan worker.Order, ordersBuffer)
	go func() {
		defer close(out)
		bo := backoff.NewExponentialBackOff()
		bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 50*time.Millisecond, 5*time.Second, 0
		bo.Reset()
		for {
			err := b.readOrders(ctx, out, lost, bo)
			if ctx.Err() != nil {
				return // our own stop
			}
			lost(err)
			t := time.NewTimer(bo.NextBackOff())
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return
			}
		}
	}()
	return out
}

// ordersBuffer is how many orders wait on Orders' channel: a pull's worth.
const ordersBuffer = 16

// readOrders creates the consumer and a reader of it, and delivers orders
// until reading fails or ctx ends. It resets bo once an order comes.
func (b *WorkerBus) readOrders(ctx context.Context, out chan<- worker.Order, lost func(error), bo backoff.BackOff) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	cons, err := b.js.CreateOrUpdateConsumer(cctx, b.n.DispatchStream(), jetstream.ConsumerConfig{
		Durable: ConsumerName(b.host), Description: "orders for worker " + b.host,
		FilterSubject: b.n.Dispatch(b.host), AckPolicy: jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy, AckWait: b.AckWait,
		MaxDeliver: -1, MaxAckPending: 64, InactiveThreshold: 0,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("consumer %s on %s: %w", ConsumerName(b.host), b.n.DispatchStream(), err)
	}
	expiry := b.PullExpiry
	if expiry < time.Second {
		expiry = 10 * time.Second
	}
	hb := b.PullHeartbeat
	if hb <= 0 || hb > expiry/2 {
		hb = min(time.Second, expiry/2)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(ordersBuffer), jetstream.PullExpiry(expiry), jetstream.PullHeartbeat(hb))
	if err != nil {
		return fmt.Errorf("read orders of %s: %w", b.host, err)
	}
	defer it.Stop()
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	lost(nil)
	for {
		m, err := it.Next()
		if err != nil {
			return fmt.Errorf("read orders of %s: %w", b.host, err)
		}
		bo.Reset()
		eff, _, derr := wire.DecodeOrder(b.host, m.Data())
		o := worker.Order{Effect: eff, Err: derr,
			// A plain ack: the worker does not wait for the server's
			// answer (see worker.Order.Ack), which would cost it a
			// round trip for each order.
			Ack:  func(context.Context) error { return m.Ack() },
			Term: func(ctx context.Context, reason string) error { return m.TermWithReason(reason) },
		}
		select {
		case out <- o:
		case <-ctx.Done():
			return nil
		}
	}
}

// Job reads job id's record from the ledger bucket, binding the bucket on
// first use. It returns nil when the ledger has no record of the job.
func (b *WorkerBus) Job(ctx context.Context, id string) (*ledger.Job, error) {
	kv, err := b.ledgerBucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, subjects.JobKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the record of job %s: %w", id, err)
	}
	j, err := ledger.UnmarshalJob(e.Value())
	if err != nil {
		return nil, fmt.Errorf("%w: job %s: %v", worker.ErrBadRecord, id, err)
	}
	return j, nil
}

// ledgerBucket binds the ledger bucket once; a failed bind is tried again
// on the next call.
func (b *WorkerBus) ledgerBucket(ctx context.Context) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv := b.ledger
	b.mu.Unlock()
	if kv != nil {
		return kv, nil
	}
	// Bound without the lock, which must not wait on the network; two
	// binds at once are harmless.
	kv, err := b.js.KeyValue(ctx, b.n.LedgerBucket())
	if err != nil {
		return nil, fmt.Errorf("bind bucket %s: %w", b.n.LedgerBucket(), err)
	}
	b.mu.Lock()
	b.ledger = kv
	b.mu.Unlock()
	return kv, nil
}

// Report publishes r with its de-duplication id, retrying with exponential
// backoff until the server has stored it or ctx ends.
func (b *WorkerBus) Report(ctx context.Context, r ledger.Report) error {
	msg, err := wire.EncodeReport(b.n, r)
	if err != nil {
		return err
	}
	// A secret nonce, kept across this report's retries: another publisher
	// cannot take the id first and have the report dropped as a duplicate.
	// A report sent again after a restart gets a new one and may be stored
	// twice; the fold counts one report per attempt and state.
	msg = wire.WithNonce(msg, rand.Text())
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 50*time.Millisecond, 5*time.Second, 0
	return backoff.RetryNotify(func() error {
		// Each try waits a bounded time: an answer lost in a failover is
		// tried again, not waited on until ctx's deadline.
		tctx, cancel := context.WithTimeout(ctx, tryTimeout)
		defer cancel()
		_, err := publishStored(tctx, b.js.Conn(), natsMsg(msg), b.n.CmdStream())
		if err != nil && ctx.Err() != nil {
			return backoff.Permanent(ctx.Err())
		}
		return err
	}, backoff.WithContext(bo, ctx), func(err error, _ time.Duration) {
		if b.ReportRetried != nil {
			b.ReportRetried(err)
		}
	})
}

// Log publishes one output chunk.
func (b *WorkerBus) Log(ctx context.Context, c wire.LogChunk) error {
	msg, err := wire.EncodeLogChunk(b.n, c)
	if err != nil {
		return err
	}
	_, err = publishStored(ctx, b.js.Conn(), natsMsg(msg), b.n.LogsStream())
	return err
}

// Beat writes the heartbeat to key <host> with a per-message TTL, so the key
// disappears if the worker stops renewing it, and states the TTL in the
// heartbeat, so the scheduler counts the host gone at the same time.
func (b *WorkerBus) Beat(ctx context.Context, h wire.Heartbeat, ttl time.Duration) error {
	h.TTL = ttl.String()
	data, err := wire.EncodeHeartbeat(h)
	if err != nil {
		return err
	}
	m := nats.NewMsg(subjects.KVSubject(b.n.HostsBucket(), subjects.HostKey(b.host)))
	m.Data = data
	// A beat that outlasts the TTL it renews is no use; one whose answer
	// was lost must not hold up the next.
	ctx, cancel := context.WithTimeout(ctx, min(ttl, tryTimeout))
	defer cancel()
	_, err = b.js.PublishMsg(ctx, m, jetstream.WithMsgTTL(ttl))
	return err
}

// tryTimeout bounds one publish try of a report or a heartbeat.
const tryTimeout = 5 * time.Second

// Installation names the dispatch stream and when it was created, so a
// worker's record of started attempts is not carried over to streams set up
// anew with the same names.
func (b *WorkerBus) Installation(ctx context.Context) (string, error) {
	s, err := b.js.Stream(ctx, b.n.DispatchStream())
	if err != nil {
		return "", fmt.Errorf("stream %s: %w", b.n.DispatchStream(), err)
	}
	info := s.CachedInfo()
	return info.Config.Name + "@" + info.Created.UTC().Format(time.RFC3339Nano), nil
}

// Leave deletes the heartbeat key.
func (b *WorkerBus) Leave(ctx context.Context) error {
	kv := b.hostsBucket()
	if kv == nil {
		var err error
		if kv, err = b.js.KeyValue(ctx, b.n.HostsBucket()); err != nil {
			return fmt.Errorf("bind bucket %s: %w", b.n.HostsBucket(), err)
		}
		b.mu.Lock()
		b.hosts = kv
		b.mu.Unlock()
	}
	err := kv.Delete(ctx, subjects.HostKey(b.host))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// hostsBucket is the hosts bucket, or nil if it is not bound yet.
func (b *WorkerBus) hostsBucket() jetstream.KeyValue {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.hosts
}
