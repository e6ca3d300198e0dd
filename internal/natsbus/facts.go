package natsbus

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Facts is the scheduler's fact store (scheduler.FactStore) over the
// gpuq_facts bucket: plain puts and deletes, no compare-and-swap, because
// only the leader writes there and a fact is advisory (a reader checks it
// against the ledger and says how old it is).
type Facts struct {
	kv jetstream.KeyValue
}

// NewFacts returns the fact store over kv, the bucket named by
// subjects.Names.FactsBucket.
func NewFacts(kv jetstream.KeyValue) *Facts { return &Facts{kv: kv} }

// Put stores value at key.
func (f *Facts) Put(ctx context.Context, key string, value []byte) error {
	_, err := f.kv.Put(ctx, key, value)
	return err
}

// FactMarkerTTL is how long the marker a deleted fact leaves stays in the
// bucket: a purge with a TTL, so that the jobs passing through the queue
// leave no marker each behind for good.
const FactMarkerTTL = time.Minute

// Delete removes key, leaving a marker for FactMarkerTTL. Deleting a key
// that is not there is no error.
func (f *Facts) Delete(ctx context.Context, key string) error {
	err := f.kv.Purge(ctx, key, jetstream.PurgeTTL(FactMarkerTTL))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// Keys lists the keys present (none for an empty bucket).
func (f *Facts) Keys(ctx context.Context) ([]string, error) {
	keys, err := f.kv.Keys(ctx, jetstream.MetaOnly())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	return keys, err
}
