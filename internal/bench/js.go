package bench

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/jslimit"
	"github.com/gpuq/gpuq/subjects"
)

// jsValueBytes is the size of each message of the JetStream phase, about
// that of a job's command or record.
const jsValueBytes = 256

// jsKeys is the number of keys the KV phase updates, each with one
// compare-and-swap in flight at a time: the fold pipelines a flush's
// writes the same way, one per changed key.
const jsKeys = 256

// JetStreamLimit measures what the server js talks to can store
// ([jslimit]), on file storage with the replicas of the installation's
// command stream: ops async publishes to a scratch stream, then ops
// compare-and-swap updates of jsKeys keys of a scratch bucket, pipelined.
// The stream and the bucket are named after the installation's prefix and
// tag, and deleted before it returns.
func JetStreamLimit(ctx context.Context, js jetstream.JetStream, n subjects.Names, tag string, ops int) (*JS, error) {
	replicas := 1
	if s, err := js.Stream(ctx, n.CmdStream()); err == nil {
		if info, err := s.Info(ctx); err == nil && info.Config.Replicas > 0 {
			replicas = info.Config.Replicas
		}
	}
	lim, err := jslimit.Config{Messages: ops, Writes: ops, Keys: jsKeys, Size: jsValueBytes,
		Name: n.Prefix() + "_bench_" + tag, Replicas: replicas}.Measure(ctx, js)
	if err != nil {
		return nil, err
	}
	return &JS{PublishPerS: lim.PublishPerSec, KVCASPerS: lim.CASPerSec, Replicas: replicas}, nil
}
