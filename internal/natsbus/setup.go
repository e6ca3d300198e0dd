// Package natsbus connects the scheduler and the worker to JetStream
// streams: it creates the streams and buckets of the contract, follows the
// command log in order, publishes messages with de-duplication ids and
// watches host heartbeats.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// SetupConfig chooses the server-side settings of gpuq's streams and
// buckets. The zero value means defaults.
type SetupConfig struct {
	// Replicas is the replication factor of every stream and bucket: 1, or
	// 3 on a cluster. Defaults to 1.
	Replicas int
	// Duplicates is every stream's de-duplication window. Defaults to 2m.
	Duplicates time.Duration
	// EventsMaxAge is how long events and journal entries are kept.
	// Defaults to 30 days.
	EventsMaxAge time.Duration
	// DispatchMaxAge is how long an order waits for a host that never
	// fetches it. Defaults to 7 days.
	DispatchMaxAge time.Duration
	// LogsMaxAge and LogsMaxBytes bound job output. Default to 7 days and
	// 10 GiB.
	LogsMaxAge   time.Duration
	LogsMaxBytes int64
	// LedgerHistory is how many versions of each ledger record are kept:
	// recovery after a crash mid-flush reads the version before the cut.
	// Defaults to 5.
	LedgerHistory uint8
	// Storage is the storage of every stream and bucket. Its zero value is
	// jetstream.FileStorage, the default; MemoryStorage loses everything
	// when the server stops and is for throwaway setups only.
	Storage jetstream.StorageType
}

func (cfg SetupConfig) withDefaults() (SetupConfig, error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Replicas != 1 && cfg.Replicas != 3 {
		return cfg, fmt.Errorf("natsbus: Replicas %d must be 1 or 3", cfg.Replicas)
	}
	if cfg.Duplicates <= 0 {
		cfg.Duplicates = 2 * time.Minute
	}
	if cfg.EventsMaxAge <= 0 {
		cfg.EventsMaxAge = 30 * 24 * time.Hour
	}
	if cfg.DispatchMaxAge <= 0 {
		cfg.DispatchMaxAge = 7 * 24 * time.Hour
	}
	if cfg.LogsMaxAge <= 0 {
		cfg.LogsMaxAge = 7 * 24 * time.Hour
	}
	if cfg.LogsMaxBytes <= 0 {
		cfg.LogsMaxBytes = 10 << 30
	}
	if cfg.LedgerHistory == 0 {
		cfg.LedgerHistory = 5
	}
	return cfg, nil
}

// LeaseMarkerTTL is how long the marker left by an expired lease or
// heartbeat key lives. It must not exceed the shortest key TTL, because the
// server raises smaller TTLs to it on buckets with history.
const LeaseMarkerTTL = time.Second

// Streams returns the configuration of every stream of the contract.
func Streams(n subjects.Names, cfg SetupConfig) ([]jetstream.StreamConfig, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	base := func(name, desc string, subj []string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Description: desc, Subjects: subj,
			Storage: cfg.Storage, Replicas: cfg.Replicas, Duplicates: cfg.Duplicates,
			MaxMsgSize: wire.MaxMessageBytes, MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: -1,
			Discard: jetstream.DiscardOld, Retention: jetstream.LimitsPolicy,
		}
	}
	cmd := base(n.CmdStream(), "gpuq command log: every command, in order; trimmed by the scheduler only after it is applied",
		[]string{n.CmdFilter()})
	cmd.Discard = jetstream.DiscardNew // never drop an unapplied command to make room
	dispatch := base(n.DispatchStream(), "gpuq dispatch and cancel orders, one subject per host", []string{n.DispatchFilter()})
	dispatch.Retention, dispatch.MaxAge = jetstream.WorkQueuePolicy, cfg.DispatchMaxAge
	events := base(n.EventsStream(), "gpuq job and account facts and journal entries", n.EventFilters())
	events.MaxAge = cfg.EventsMaxAge
	events.AllowDirect = true
	logs := base(n.LogsStream(), "gpuq job output", []string{n.LogFilter()})
	logs.MaxAge, logs.MaxBytes = cfg.LogsMaxAge, cfg.LogsMaxBytes
	return []jetstream.StreamConfig{cmd, dispatch, events, logs}, nil
}

// Buckets returns the configuration of the ledger and hosts buckets.
func Buckets(n subjects.Names, cfg SetupConfig) ([]jetstream.KeyValueConfig, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return []jetstream.KeyValueConfig{
		{Bucket: n.LedgerBucket(), Description: "gpuq ledger: accounts, jobs, the checkpoint and the leader lease",
			History: cfg.LedgerHistory, MaxValueSize: wire.MaxMessageBytes, Storage: cfg.Storage,
			Replicas: cfg.Replicas, LimitMarkerTTL: LeaseMarkerTTL},
		{Bucket: n.HostsBucket(), Description: "gpuq worker heartbeats, one key per host, each with a TTL",
			History: 1, MaxValueSize: wire.MaxMessageBytes, Storage: cfg.Storage,
			Replicas: cfg.Replicas, LimitMarkerTTL: LeaseMarkerTTL},
	}, nil
}

// Setup creates gpuq's streams and buckets, or updates them to cfg. It is
// safe to run at every start. A setting the server cannot change on an
// existing stream fails with a message that says which and what to do.
func Setup(ctx context.Context, js jetstream.JetStream, n subjects.Names, cfg SetupConfig) error {
	streams, err := Streams(n, cfg)
	if err != nil {
		return err
	}
	for _, want := range streams {
		if err := ensureStream(ctx, js, want); err != nil {
			return err
		}
	}
	buckets, err := Buckets(n, cfg)
	if err != nil {
		return err
	}
	for _, want := range buckets {
		if err := ensureBucket(ctx, js, want); err != nil {
			return err
		}
	}
	return nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	have := s.CachedInfo().Config
	if err := immutable(want.Name, have.Storage.String(), want.Storage.String(), have.Retention.String(), want.Retention.String()); err != nil {
		return err
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("update stream %s to gpuq's settings: %w", want.Name, err)
	}
	return nil
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) error {
	s, err := js.Stream(ctx, "KV_"+want.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			return fmt.Errorf("create bucket %s: %w", want.Bucket, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up bucket %s: %w", want.Bucket, err)
	}
	have := s.CachedInfo().Config
	if err := immutable("bucket "+want.Bucket, have.Storage.String(), want.Storage.String(), "", ""); err != nil {
		return err
	}
	if _, err := js.UpdateKeyValue(ctx, want); err != nil {
		return fmt.Errorf("update bucket %s to gpuq's settings: %w", want.Bucket, err)
	}
	return nil
}

func immutable(name, haveStorage, wantStorage, haveRetention, wantRetention string) error {
	switch {
	case haveStorage != wantStorage:
		return fmt.Errorf("%s exists with %s storage but gpuq needs %s storage, which the server cannot change in place: "+
			"move its data away and delete it (nats stream rm), or run gpuq with another subject prefix", name, haveStorage, wantStorage)
	case haveRetention != wantRetention:
		return fmt.Errorf("%s exists with %s retention but gpuq needs %s retention, which the server cannot change in place: "+
			"drain and delete it (nats stream rm), or run gpuq with another subject prefix", name, haveRetention, wantRetention)
	}
	return nil
}
