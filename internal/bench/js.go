package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/subjects"
)

// jsValueBytes is the size of each message of the JetStream phase, about
// that of a job's command or record.
const jsValueBytes = 256

// jsKeys is the number of keys the KV phase updates, each with one
// compare-and-swap in flight at a time: the fold pipelines a flush's
// writes the same way, one per changed key.
const jsKeys = 256

// jsTimeout bounds the wait for the acknowledgements of all the publishes,
// and of each round of updates.
const jsTimeout = 30 * time.Second

// JetStreamLimit measures what the server js talks to can store, on file
// storage with the replicas of the installation's command stream: ops
// async publishes to a scratch stream, then ops compare-and-swap updates
// of jsKeys keys of a scratch bucket, pipelined (every key's next update
// goes out when its last one is acknowledged, with the revision the
// acknowledgement carries). The stream and the bucket are named after tag
// and deleted before it returns.
func JetStreamLimit(ctx context.Context, js jetstream.JetStream, n subjects.Names, tag string, ops int) (*JS, error) {
	replicas := 1
	if s, err := js.Stream(ctx, n.CmdStream()); err == nil {
		if info, err := s.Info(ctx); err == nil && info.Config.Replicas > 0 {
			replicas = info.Config.Replicas
		}
	}
	res := &JS{Replicas: replicas}
	var err error
	if res.PublishPerS, err = publishRate(ctx, js, strings.ToUpper(n.Prefix()+"_bench_"+tag), n.Prefix()+"_bench."+tag, replicas, ops); err != nil {
		return nil, err
	}
	if res.KVCASPerS, err = casRate(ctx, js, n.Prefix()+"_bench_"+tag, replicas, ops); err != nil {
		return nil, err
	}
	return res, nil
}

func publishRate(ctx context.Context, js jetstream.JetStream, stream, subject string, replicas, ops int) (_ float64, err error) {
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Replicas: replicas, Retention: jetstream.LimitsPolicy}); err != nil {
		return 0, fmt.Errorf("create the scratch stream %s: %w", stream, err)
	}
	defer func() {
		// On a context of its own: a scratch stream must not outlive the run.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := js.DeleteStream(dctx, stream); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the scratch stream %s: %w", stream, derr))
		}
	}()
	data := make([]byte, jsValueBytes)
	futs := make([]jetstream.PubAckFuture, 0, ops)
	start := time.Now()
	for range ops {
		f, err := js.PublishAsync(subject, data)
		if err != nil {
			return 0, fmt.Errorf("publish to %s: %w", subject, err)
		}
		futs = append(futs, f)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(jsTimeout):
		return 0, fmt.Errorf("publish to %s: %d acknowledgements missing after %v", subject, js.PublishAsyncPending(), jsTimeout)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	elapsed := time.Since(start)
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return 0, fmt.Errorf("publish to %s: %w", subject, err)
		}
	}
	return rate(ops, elapsed), nil
}

func casRate(ctx context.Context, js jetstream.JetStream, bucket string, replicas, ops int) (_ float64, err error) {
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1,
		Storage: jetstream.FileStorage, Replicas: replicas})
	if err != nil {
		return 0, fmt.Errorf("create the scratch bucket %s: %w", bucket, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := js.DeleteKeyValue(dctx, bucket); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the scratch bucket %s: %w", bucket, derr))
		}
	}()
	data := make([]byte, jsValueBytes)
	keys := min(jsKeys, ops)
	revs := make([]uint64, keys)
	for k := range revs {
		if revs[k], err = kv.Create(ctx, fmt.Sprintf("k%d", k), data); err != nil {
			return 0, fmt.Errorf("create a key of %s: %w", bucket, err)
		}
	}
	futs := make([]jetstream.PubAckFuture, keys)
	done := 0
	start := time.Now()
	timeout := time.NewTimer(jsTimeout)
	defer timeout.Stop()
	for done < ops {
		timeout.Reset(jsTimeout)
		round := min(keys, ops-done)
		for k := range round {
			m := nats.NewMsg(subjects.KVSubject(bucket, fmt.Sprintf("k%d", k)))
			m.Data = data
			if futs[k], err = js.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(revs[k])); err != nil {
				return 0, fmt.Errorf("update a key of %s: %w", bucket, err)
			}
		}
		for k := range round {
			select {
			case ack := <-futs[k].Ok():
				revs[k] = ack.Sequence
			case err := <-futs[k].Err():
				return 0, fmt.Errorf("update k%d of %s at revision %d: %w", k, bucket, revs[k], err)
			case <-timeout.C:
				return 0, fmt.Errorf("update a key of %s: no acknowledgement within %v", bucket, jsTimeout)
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		done += round
	}
	return rate(ops, time.Since(start)), nil
}
