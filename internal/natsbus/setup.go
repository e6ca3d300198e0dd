// Package natsbus connects the scheduler and the worker to JetStream
// streams: it creates the streams and buckets of the contract (adopting
// their replication, never lowering it), follows the command log in order,
// publishes messages with de-duplication ids and watches host heartbeats.
// [Transient] tells a daemon which errors to wait out.
package natsbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/scheduler"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// SetupConfig chooses the server-side settings of gpuq's streams and
// buckets. The zero value means defaults.
type SetupConfig struct {
	// Replicas is the replication factor of every stream and bucket: 1, or
	// 3 on a cluster. 0, the default, adopts what exists: the highest
	// factor among gpuq's streams and buckets, to which the others are
	// raised, or 1 where none exists yet. An explicit value raises what has
	// fewer; Setup never lowers one that has more, and refuses with a
	// [*ReplicasError] instead.
	Replicas int
	// Duplicates is every stream's de-duplication window. Defaults to 2m.
	Duplicates time.Duration
	// EventsMaxAge is how long events are kept. Defaults to 30 days.
	// (Journal entries are not events: see JournalMaxAge.)
	EventsMaxAge time.Duration
	// JournalMaxAge is how long journal entries, the money record, are
	// kept. 0, the default, keeps them for as long as the installation
	// lives. An age cut is auditable only from a seal: every account that
	// moves money is sealed at least every [ledger.SealInterval], so an age
	// well above that (e.g. a year) keeps a seal of every such account; an
	// account whose whole journal is older than the age has none left and
	// fails the audit until it moves money again.
	JournalMaxAge time.Duration
	// JournalMaxBytes caps the journal stream. The journal refuses new
	// entries when full (discard new), so the scheduler stops folding and
	// says so rather than lose one: size it with room to spare. 0, the
	// default, sets no cap.
	JournalMaxBytes int64
	// DispatchMaxAge is how long an order waits for a host that never
	// fetches it. Defaults to 7 days.
	DispatchMaxAge time.Duration
	// LogsMaxAge and LogsMaxBytes bound job output. Default to 7 days and
	// 10 GiB.
	LogsMaxAge   time.Duration
	LogsMaxBytes int64
	// HistoryMaxAge is how long the final records of archived jobs are
	// kept in the history stream, and HistoryMaxBytes how much of them.
	// Zero keeps them for as long as the installation lives (the
	// defaults); a positive value drops the oldest past it.
	HistoryMaxAge   time.Duration
	HistoryMaxBytes int64
	// LedgerHistory is how many versions of each ledger record are kept:
	// recovery after a crash mid-flush reads the version before the cut.
	// Defaults to 5; at least [scheduler.MinLedgerHistory]: a
	// scheduler's flush can leave one version fewer than that past its
	// checkpoint, and a load rewinds to the one before them.
	LedgerHistory uint8
	// Storage is the storage of every stream and bucket. Its zero value is
	// jetstream.FileStorage, the default; MemoryStorage loses everything
	// when the server stops and is for throwaway setups only.
	Storage jetstream.StorageType
	// Logger receives what Setup found and did: each factor it raised, and
	// one line with the replication of every stream and bucket. Defaults
	// to discarding them.
	Logger *slog.Logger
}

func (cfg SetupConfig) withDefaults() (SetupConfig, error) {
	if cfg.Replicas != 0 && cfg.Replicas != 1 && cfg.Replicas != 3 {
		return cfg, fmt.Errorf("natsbus: Replicas %d must be 1 or 3 (or 0 to adopt what exists)", cfg.Replicas)
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
	if cfg.LedgerHistory < scheduler.MinLedgerHistory {
		return cfg, fmt.Errorf("natsbus: LedgerHistory %d is too short: a scheduler's flush can leave %d versions of a record past its checkpoint, and a load after a crash rewinds to the one before them; keep at least %d",
			cfg.LedgerHistory, scheduler.MinLedgerHistory-1, scheduler.MinLedgerHistory)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// replicas is the factor Streams and Buckets configure: a fresh setup's 1
// where Replicas is left to adopt.
func (cfg SetupConfig) replicas() int {
	if cfg.Replicas == 0 {
		return 1
	}
	return cfg.Replicas
}

// ReplicasError is Setup's refusal to lower replication: SetupConfig.Replicas
// asked for fewer replicas than a stream or bucket has.
type ReplicasError struct {
	Kind string // "stream" or "bucket"
	Name string // the stream's or the bucket's name
	Have int    // its replicas on the server
	Want int    // SetupConfig.Replicas
}

func (e *ReplicasError) Error() string {
	return fmt.Sprintf("%s %s has %d replicas; Replicas %d would lower it: leave Replicas at 0 to keep %d "+
		"(Setup never lowers replication; lower it on the server first if you mean to)", e.Kind, e.Name, e.Have, e.Want, e.Have)
}

// LeaseMarkerTTL is how long the marker left by an expired lease or
// heartbeat key lives. It must not exceed the shortest key TTL, because the
// server raises smaller TTLs to it on buckets with history.
const LeaseMarkerTTL = time.Second

// Streams returns the configuration of every stream of the contract. Where
// cfg.Replicas is 0 they carry 1, the factor of a fresh setup.
func Streams(n subjects.Names, cfg SetupConfig) ([]jetstream.StreamConfig, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	base := func(name, desc string, subj []string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name: name, Description: desc, Subjects: subj,
			Storage: cfg.Storage, Replicas: cfg.replicas(), Duplicates: cfg.Duplicates,
			MaxMsgSize: wire.MaxMessageBytes, MaxMsgs: -1, MaxBytes: -1, MaxMsgsPerSubject: -1,
			Discard: jetstream.DiscardOld, Retention: jetstream.LimitsPolicy,
		}
	}
	cmd := base(n.CmdStream(), "gpuq command log: every command, in order; trimmed by the scheduler only after it is applied",
		[]string{n.CmdFilter()})
	cmd.Discard = jetstream.DiscardNew // never drop an unapplied command to make room
	dispatch := base(n.DispatchStream(), "gpuq dispatch and cancel orders, one subject per host", []string{n.DispatchFilter()})
	dispatch.Retention, dispatch.MaxAge = jetstream.WorkQueuePolicy, cfg.DispatchMaxAge
	events := base(n.EventsStream(), "gpuq job and account facts", n.EventFilters())
	events.MaxAge = cfg.EventsMaxAge
	events.AllowDirect = true
	// The journal follows the events stream: Setup updates streams in this
	// order, so an installation whose events stream still holds the
	// journal's subjects gives them up before the journal claims them.
	journal := base(n.JournalStream(), "gpuq journal: every balance movement, hash-chained per account, and seals; the money record",
		[]string{n.JournalAll()})
	journal.Discard = jetstream.DiscardNew // never drop an entry to make room
	if cfg.JournalMaxAge > 0 {
		journal.MaxAge = cfg.JournalMaxAge
	}
	if cfg.JournalMaxBytes > 0 {
		journal.MaxBytes = cfg.JournalMaxBytes
	}
	logs := base(n.LogsStream(), "gpuq job output", []string{n.LogFilter()})
	logs.MaxAge, logs.MaxBytes = cfg.LogsMaxAge, cfg.LogsMaxBytes
	history := base(n.HistoryStream(), "gpuq finished jobs, archived out of the ledger: one final record per job", []string{n.HistoryFilter()})
	history.AllowDirect = true // gpuq job looks a record up by subject
	if cfg.HistoryMaxAge > 0 {
		history.MaxAge = cfg.HistoryMaxAge
	}
	if cfg.HistoryMaxBytes > 0 {
		history.MaxBytes = cfg.HistoryMaxBytes
	}
	return []jetstream.StreamConfig{cmd, dispatch, events, journal, logs, history}, nil
}

// Buckets returns the configuration of the ledger, hosts and facts buckets. Where
// cfg.Replicas is 0 they carry 1, the factor of a fresh setup.
func Buckets(n subjects.Names, cfg SetupConfig) ([]jetstream.KeyValueConfig, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return []jetstream.KeyValueConfig{
		{Bucket: n.LedgerBucket(), Description: "gpuq ledger: accounts, jobs, the checkpoint and the leader lease",
			History: cfg.LedgerHistory, MaxValueSize: wire.MaxMessageBytes, Storage: cfg.Storage,
			Replicas: cfg.replicas(), LimitMarkerTTL: LeaseMarkerTTL},
		// Created with markers, which is how the KV API allows per-message
		// TTLs; Setup then drops the markers and refuses rollups (see
		// hardenHosts).
		{Bucket: n.HostsBucket(), Description: "gpuq worker heartbeats, one key per host, each with a TTL",
			History: 1, MaxValueSize: wire.MaxMessageBytes, Storage: cfg.Storage,
			Replicas: cfg.replicas(), LimitMarkerTTL: LeaseMarkerTTL},
		// Read-optimised facts the leader publishes for readers (gpuq why):
		// advisory, rebuilt by every new leader, so one version a key, and a
		// deleted key's marker expires.
		{Bucket: n.FactsBucket(), Description: "gpuq scheduler facts: its configuration, its latest pass, and why each waiting job waits",
			History: 1, MaxValueSize: wire.MaxMessageBytes, Storage: cfg.Storage, Replicas: cfg.replicas(),
			LimitMarkerTTL: LeaseMarkerTTL}, // allows the TTL of a deleted fact's marker (Facts.Delete)
	}, nil
}

// Setup creates gpuq's streams and buckets, or updates them to cfg. It is
// safe to run at every start. A setting the server cannot change on an
// existing stream fails with a message that says which and what to do.
//
// Every stream and bucket ends up with one replication factor, chosen as
// [SetupConfig.Replicas] says, before anything is changed: Setup never
// lowers replication, and returns a [*ReplicasError] when asked to. It logs
// each factor it raises and, at the end, the replication of every stream
// and bucket as the server reports it.
func Setup(ctx context.Context, js jetstream.JetStream, n subjects.Names, cfg SetupConfig) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	streams, err := Streams(n, cfg)
	if err != nil {
		return err
	}
	buckets, err := Buckets(n, cfg)
	if err != nil {
		return err
	}
	var have []existing
	for _, want := range streams {
		e, err := lookUp(ctx, js, "stream", want.Name, want.Name)
		if err != nil {
			return err
		}
		have = append(have, e)
	}
	for _, want := range buckets {
		e, err := lookUp(ctx, js, "bucket", want.Bucket, kvStream(want.Bucket))
		if err != nil {
			return err
		}
		have = append(have, e)
	}
	r, source, err := chooseReplicas(have, cfg.Replicas)
	if err != nil {
		return err
	}
	log := cfg.Logger.With(slog.String("component", "setup"))
	var streamNames, bucketNames []string
	for i, want := range streams {
		want.Replicas = r
		if err := ensureStream(ctx, js, have[i], want); err != nil {
			return err
		}
		streamNames = append(streamNames, want.Name)
	}
	for i, want := range buckets {
		want.Replicas = r
		ensure := ensureBucket
		if want.Bucket == n.HostsBucket() {
			ensure = ensureHosts
		}
		if err := ensure(ctx, js, have[len(streams)+i], want); err != nil {
			return err
		}
		bucketNames = append(bucketNames, want.Bucket)
	}
	// Report the replication the server holds now, not what was asked.
	for _, e := range have {
		now, err := lookUp(ctx, js, e.kind, e.name, e.stream)
		if err != nil {
			return err
		}
		if now.cfg == nil || now.cfg.Replicas != r {
			return fmt.Errorf("%s %s does not have the %d replicas it was just given: %+v", e.kind, e.name, r, now.cfg)
		}
		if e.cfg != nil && e.cfg.Replicas < r {
			log.InfoContext(ctx, "raised replication", slog.String(e.kind, e.name), slog.Int("from", e.cfg.Replicas), slog.Int("replicas", r))
		}
	}
	log.InfoContext(ctx, "streams and buckets ready", slog.Int("replicas", r), slog.String("chosen", source),
		slog.String("streams", strings.Join(streamNames, ",")), slog.String("buckets", strings.Join(bucketNames, ",")))
	return nil
}

// existing is what the server holds of one stream or bucket.
type existing struct {
	kind, name string
	stream     string // the stream's name: a bucket's is KV_<bucket>
	cfg        *jetstream.StreamConfig
}

func kvStream(bucket string) string { return "KV_" + bucket }

func lookUp(ctx context.Context, js jetstream.JetStream, kind, name, stream string) (existing, error) {
	e := existing{kind: kind, name: name, stream: stream}
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return e, nil
	}
	if err != nil {
		return e, fmt.Errorf("look up %s %s: %w", kind, name, err)
	}
	cfg := s.CachedInfo().Config
	e.cfg = &cfg
	return e, nil
}

// chooseReplicas returns the one factor every stream and bucket gets, and
// how it was chosen: adopted from what exists, given, or the default for a
// fresh setup.
func chooseReplicas(have []existing, want int) (int, string, error) {
	top := 0
	for _, e := range have {
		if e.cfg != nil {
			top = max(top, e.cfg.Replicas)
		}
	}
	switch {
	case want == 0 && top == 0:
		return 1, "default", nil
	case want == 0:
		return top, "adopted", nil
	}
	for _, e := range have {
		if e.cfg != nil && e.cfg.Replicas > want {
			return 0, "", &ReplicasError{Kind: e.kind, Name: e.name, Have: e.cfg.Replicas, Want: want}
		}
	}
	return want, "given", nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, have existing, want jetstream.StreamConfig) error {
	if have.cfg == nil {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		return nil
	}
	if err := immutable(want.Name, have.cfg.Storage.String(), want.Storage.String(), have.cfg.Retention.String(), want.Retention.String()); err != nil {
		return err
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("update stream %s to gpuq's settings: %w", want.Name, err)
	}
	return nil
}

// ensureBucket creates or updates a bucket. UpdateKeyValue rebuilds the
// bucket's whole stream configuration from want, so every setting gpuq
// relies on must be in want.
func ensureBucket(ctx context.Context, js jetstream.JetStream, have existing, want jetstream.KeyValueConfig) error {
	if have.cfg == nil {
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			return fmt.Errorf("create bucket %s: %w", want.Bucket, err)
		}
		return nil
	}
	if err := immutable("bucket "+want.Bucket, have.cfg.Storage.String(), want.Storage.String(), "", ""); err != nil {
		return err
	}
	if _, err := js.UpdateKeyValue(ctx, want); err != nil {
		return fmt.Errorf("update bucket %s to gpuq's settings: %w", want.Bucket, err)
	}
	return nil
}

// ensureHosts creates or updates the hosts bucket, and leaves it refusing
// messages with a Nats-Rollup header. Every worker may write to the bucket,
// and one rollup of "all" on its own key would wipe every host's heartbeat.
// Rollups cannot be refused while the stream leaves delete markers for
// expired keys, so it leaves none: the scheduler times heartbeats out by
// the TTL each states (see [Hosts.Watch]). The KV API would turn rollups and
// markers back on, so an existing bucket is updated at the stream level.
func ensureHosts(ctx context.Context, js jetstream.JetStream, have existing, want jetstream.KeyValueConfig) error {
	if have.cfg == nil {
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			return fmt.Errorf("create bucket %s: %w", want.Bucket, err)
		}
		s, err := js.Stream(ctx, kvStream(want.Bucket))
		if err != nil {
			return fmt.Errorf("look up bucket %s: %w", want.Bucket, err)
		}
		cfg := s.CachedInfo().Config
		have.cfg = &cfg
	}
	if err := immutable("bucket "+want.Bucket, have.cfg.Storage.String(), want.Storage.String(), "", ""); err != nil {
		return err
	}
	cfg := *have.cfg
	cfg.Description, cfg.Replicas = want.Description, want.Replicas
	cfg.MaxMsgsPerSubject, cfg.MaxMsgSize = int64(want.History), want.MaxValueSize
	cfg.AllowRollup, cfg.SubjectDeleteMarkerTTL, cfg.AllowMsgTTL = false, 0, true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
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

// Transient reports whether err is one to wait out and retry: the server
// cannot be reached or cannot answer yet (a timeout, no responders, a
// connection being re-established, a cluster electing a leader or missing
// a node, JetStream temporarily unavailable). Anything else, such as a
// [*ReplicasError] or a storage mismatch, is a configuration error that
// retrying will not mend.
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrNoHeartbeat),
		errors.Is(err, jetstream.ErrConsumerLeadershipChanged), errors.Is(err, jetstream.ErrServerShutdown):
		return true
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10004, // JSClusterIncompleteErr: incomplete results
		10005, // JSClusterNoPeersErr: no suitable peers for placement, as while a node is away
		10008, // JSClusterNotAvailErr: JetStream system temporarily unavailable
		10009, // JSClusterNotLeaderErr: JetStream cluster can not handle request
		10023, // JSInsufficientResourcesErr
		jetstream.JSErrCodeJetStreamNotEnabledForAccount, // also what no responders map to while JetStream starts
		jetstream.JSErrCodeJetStreamNotEnabled,           // likewise
		10118,                                            // JSStreamOfflineErr
		10163,                                            // JSStreamExpectedLastSeqPerSubjectNotReady
		10202:                                            // JSClusterServerMemberChangeInflightErr
		return true
	}
	return false
}
