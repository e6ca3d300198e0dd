// Package jslimit measures what a JetStream server can store at most, and
// runs a worker that costs nothing, so a benchmark can say how close the
// scheduler comes to the server under it.
//
// [Measure] publishes to a stream of its own and writes to a KV bucket of its
// own, both on file storage as gpuq's are, and reports two rates: pipelined
// asynchronous publishes per second (what the scheduler's effects and
// decisions cost) and pipelined compare-and-swap KV writes per second (what
// its ledger writes cost). It removes what it created. [Worker] takes a
// host's dispatch orders the way gpuq's worker does (its durable consumer,
// through natsbus.WorkerBus) and reports each attempt started and done over
// the wire at once, running nothing; a scheduler fed by it is the only cost
// left between a submission and its settlement.
//
// The package is for benchmarks and `gpuq bench`; nothing in a running
// installation uses it.
package jslimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/subjects"
)

// Limit is what one server stored at most, per second.
type Limit struct {
	// PublishPerSec is asynchronous publishes, pipelined, each with a
	// de-duplication id, stored and acknowledged per second.
	PublishPerSec float64
	// CASPerSec is KV writes conditioned on the key's last revision,
	// pipelined across keys, stored and acknowledged per second.
	CASPerSec float64
}

// Config sizes a measurement. Its zero value means the defaults.
type Config struct {
	// Messages is how many messages the publish measurement stores.
	// Defaults to 50,000.
	Messages int
	// Writes is how many compare-and-swap writes the KV measurement
	// stores. Defaults to 50,000.
	Writes int
	// Keys is how many keys the KV writes are spread over; writes to
	// different keys are pipelined, writes to one key wait for the last
	// one's revision. Defaults to 1,024.
	Keys int
	// Size is each message's and value's size in bytes. Defaults to 300,
	// about a gpuq job record or event.
	Size int
	// Window bounds the publishes awaiting acknowledgement. Defaults to
	// 1,024, the scheduler's publish window.
	Window int
	// Name names the scratch stream (upper-cased) and bucket, and the
	// stream's subject; it must be a valid stream and bucket name.
	// Defaults to jslimit_ and a random suffix.
	Name string
	// Replicas is the scratch stream's and bucket's replication factor,
	// as the installation measured uses. Defaults to 1.
	Replicas int
	// Timeout bounds the wait for each window's or round's
	// acknowledgements. Defaults to 30s.
	Timeout time.Duration
}

func (c *Config) defaults() {
	if c.Messages <= 0 {
		c.Messages = 50_000
	}
	if c.Writes <= 0 {
		c.Writes = 50_000
	}
	if c.Keys <= 0 {
		c.Keys = 1024
	}
	if c.Size <= 0 {
		c.Size = 300
	}
	if c.Window <= 0 {
		c.Window = 1024
	}
	if c.Name == "" {
		c.Name = "jslimit_" + rand.Text()[:10]
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Second
	}
}

// Measure measures the server js is connected to with the default
// [Config].
func Measure(ctx context.Context, js jetstream.JetStream) (Limit, error) {
	return Config{}.Measure(ctx, js)
}

// Measure measures the server js is connected to: first the publishes, then
// the KV writes, on a stream and a bucket it creates for the purpose and
// deletes afterwards; a scratch stream it could not delete is an error.
//
// Both are created before either is measured, and deleted only after both
// were. nats-server (v2.15.2, single server) removes an account's streams
// directory in the background once the account's last stream is deleted, so
// a stream created just after that can fail with "error creating store for
// stream" (10049; the server logs "mkdir .../streams: no such file or
// directory"). On a server with no other stream in the account (a bare test
// server) deleting the first scratch stream before creating the second hit
// that in one run of every 5 to 100 here.
func (c Config) Measure(ctx context.Context, js jetstream.JetStream) (_ Limit, err error) {
	c.defaults()
	stream, subject := strings.ToUpper(c.Name), c.Name+".msgs"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Replicas: c.Replicas, Duplicates: 2 * time.Minute}); err != nil {
		return Limit{}, fmt.Errorf("jslimit: create stream %s: %w", stream, err)
	}
	defer func() {
		if derr := remove(ctx, func(ctx context.Context) error { return js.DeleteStream(ctx, stream) }); derr != nil {
			err = errors.Join(err, fmt.Errorf("jslimit: delete stream %s: %w", stream, derr))
		}
	}()
	bucket := c.Name
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1,
		Storage: jetstream.FileStorage, Replicas: c.Replicas}); err != nil {
		return Limit{}, fmt.Errorf("jslimit: create bucket %s: %w", bucket, err)
	}
	defer func() {
		if derr := remove(ctx, func(ctx context.Context) error { return js.DeleteKeyValue(ctx, bucket) }); derr != nil {
			err = errors.Join(err, fmt.Errorf("jslimit: delete bucket %s: %w", bucket, derr))
		}
	}()
	var l Limit
	if l.PublishPerSec, err = c.publish(ctx, js, subject); err != nil {
		return l, err
	}
	if l.CASPerSec, err = c.cas(ctx, js, bucket); err != nil {
		return l, err
	}
	return l, nil
}

// publish stores c.Messages messages on subject, a stream's, and returns
// their rate.
func (c Config) publish(ctx context.Context, js jetstream.JetStream, subject string) (float64, error) {
	body := make([]byte, c.Size)
	for i := range body {
		body[i] = 'x'
	}
	nonce := rand.Text()[:8]
	began := time.Now()
	futs := make([]jetstream.PubAckFuture, 0, c.Window)
	for i := 0; i < c.Messages; i++ {
		m := nats.NewMsg(subject)
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s.%d", nonce, i))
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return 0, fmt.Errorf("jslimit: publish: %w", err)
		}
		futs = append(futs, f)
		if len(futs) == c.Window {
			if err := c.await(ctx, futs); err != nil {
				return 0, err
			}
			futs = futs[:0]
		}
	}
	if err := c.await(ctx, futs); err != nil {
		return 0, err
	}
	return float64(c.Messages) / time.Since(began).Seconds(), nil
}

// cas stores c.Writes compare-and-swap writes over c.Keys keys of bucket
// and returns their rate. Each round writes every key once, pipelined, each
// on the revision the last round's acknowledgement gave.
func (c Config) cas(ctx context.Context, js jetstream.JetStream, bucket string) (float64, error) {
	body := make([]byte, c.Size)
	for i := range body {
		body[i] = 'y'
	}
	revs := make([]uint64, c.Keys)
	keys := make([]string, c.Keys)
	for k := range keys {
		keys[k] = subjects.KVSubject(bucket, fmt.Sprintf("k%d", k))
	}
	futs := make([]jetstream.PubAckFuture, 0, c.Keys)
	began := time.Now()
	written := 0
	for written < c.Writes {
		n := min(c.Keys, c.Writes-written)
		futs = futs[:0]
		for k := range n {
			m := nats.NewMsg(keys[k])
			m.Data = body
			f, err := js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(revs[k]))
			if err != nil {
				return 0, fmt.Errorf("jslimit: write: %w", err)
			}
			futs = append(futs, f)
		}
		timeout := time.After(c.Timeout)
		for k, f := range futs {
			select {
			case ack := <-f.Ok():
				revs[k] = ack.Sequence
			case err := <-f.Err():
				return 0, fmt.Errorf("jslimit: write k%d at revision %d: %w", k, revs[k], err)
			case <-timeout:
				return 0, fmt.Errorf("jslimit: write k%d: no acknowledgement within %v", k, c.Timeout)
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		written += n
	}
	return float64(written) / time.Since(began).Seconds(), nil
}

// await waits for every future's acknowledgement, at most c.Timeout.
func (c Config) await(ctx context.Context, futs []jetstream.PubAckFuture) error {
	timeout := time.After(c.Timeout)
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("jslimit: publish: %w", err)
		case <-timeout:
			return fmt.Errorf("jslimit: publish: no acknowledgement within %v", c.Timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// remove runs del on a context of its own, so that what was measured on is
// removed even when ctx has ended.
func remove(ctx context.Context, del func(context.Context) error) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return del(dctx)
}
