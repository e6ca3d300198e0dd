package scheduler

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"time"
)

// DefaultJobRetention is how long a finished job stays in the ledger before
// it is archived, unless CoreConfig.JobRetention says otherwise.
const DefaultJobRetention = 7 * 24 * time.Hour

// CoreConfig tunes the decisions. The zero value means defaults.
type CoreConfig struct {
	// HalfLife is how fast past use fades from an account's fair share:
	// GPU-seconds used HalfLife ago count half. Defaults to 24h.
	HalfLife time.Duration
	// NoBackfill turns EASY backfill off: a job that fits now starts even
	// if it delays the first job waiting for room. Defaults to false.
	NoBackfill bool
	// Retry times the attempts after a lost, refused or infrastructure
	// failed one. A busy refusal (the host found the GPUs taken) is not
	// a failure and waits no retry delay.
	Retry RetryPolicy
	// HostBackoff is how long a host that refused an order (busy or not),
	// or whose attempt the infrastructure ended, gets no new one, by the
	// number of its failures in a row: refusals start again when the host
	// reports an attempt started, infrastructure failures when an attempt
	// on it ends by its job's doing. Its Initial defaults to 1s,
	// Multiplier to 2 and Max to 30s.
	HostBackoff RetryPolicy
	// UnplaceableAfter is how long a job may need more GPUs than the largest
	// live host has before it fails as unplaceable. Hosts may join, so this
	// is a grace period, not a verdict at first sight. Defaults to 1m; a
	// negative value means at once.
	UnplaceableAfter time.Duration
	// LostAfter is how long a host may be gone (its heartbeat key expired),
	// or a running attempt missing from its host's heartbeat, before the
	// attempt is declared lost. Defaults to 30s; a negative value means at
	// once.
	LostAfter time.Duration
	// StartTimeout is how long a dispatched attempt may go unlisted by its
	// live host (the worker never took the order) before it is declared
	// lost. Workers take orders in turn, so this is longer. Defaults to 5m.
	StartTimeout time.Duration
	// DecisionTimeout is how long a published decision may go unapplied
	// before Core forgets it and may decide again. Defaults to 30s.
	DecisionTimeout time.Duration
	// MaxExamine bounds how many queued jobs one Decide looks at. Defaults
	// to 10000.
	MaxExamine int
	// JobRetention is how long a job stays in the ledger after it ends
	// (succeeded, failed, cancelled or rejected); then an archive decision
	// moves its final record to the history stream and removes its key.
	// Defaults to 7 days; a negative or zero value means the default
	// (jobs are always archived in the end).
	JobRetention time.Duration
	// MaxArchives bounds the archive decisions of one Decide. Defaults to
	// 256.
	MaxArchives int
}

func (c *CoreConfig) withDefaults() CoreConfig {
	out := *c
	if out.HalfLife <= 0 {
		out.HalfLife = 24 * time.Hour
	}
	out.Retry = out.Retry.withDefaults()
	out.HostBackoff = hostBackoffDefaults(out.HostBackoff)
	if out.UnplaceableAfter == 0 {
		out.UnplaceableAfter = time.Minute
	}
	if out.LostAfter == 0 {
		out.LostAfter = 30 * time.Second
	}
	if out.StartTimeout <= 0 {
		out.StartTimeout = 5 * time.Minute
	}
	if out.DecisionTimeout <= 0 {
		out.DecisionTimeout = 30 * time.Second
	}
	if out.MaxExamine <= 0 {
		out.MaxExamine = 10000
	}
	if out.JobRetention <= 0 {
		out.JobRetention = DefaultJobRetention
	}
	if out.MaxArchives <= 0 {
		out.MaxArchives = 256
	}
	return out
}

// RetryPolicy is the exponential backoff between an attempt that failed
// through no fault of the job and the next. The delay after n failures
// (n ≥ 1) is closed-form:
//
//	base(n)  = min(Initial × Multiplier^(n−1), Max)
//	delay(n) = base(n) × (1 + Jitter × u),  u in [−1, 1]
//
// where u is drawn from a hash of the job id and n, not from a random
// source: every scheduler, and `gpuq why`, computes the same delay for the
// same job and failure count, and no clock is read. With Jitter 0 (the
// default) the delay is base(n) exactly.
type RetryPolicy struct {
	// Initial defaults to 10s.
	Initial time.Duration
	// Multiplier defaults to 2.
	Multiplier float64
	// Max defaults to 10m.
	Max time.Duration
	// Jitter is a fraction from 0 to 1. Defaults to 0.
	Jitter float64
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Initial <= 0 {
		p.Initial = 10 * time.Second
	}
	if p.Multiplier < 1 {
		p.Multiplier = 2
	}
	if p.Max <= 0 {
		p.Max = 10 * time.Minute
	}
	p.Jitter = min(max(p.Jitter, 0), 1)
	return p
}

// Delay returns the wait before the next attempt of job after failures
// failed attempts (failures ≥ 1; less counts as 1), by the formula on
// [RetryPolicy]. (For HostBackoff, job is the host and failures its
// failures in a row.) It is a pure function of its arguments: no clock, no
// random source.
func (p RetryPolicy) Delay(job string, failures int) time.Duration {
	p = p.withDefaults()
	failures = max(failures, 1)
	d := p.Max
	// Initial × Multiplier^(failures−1), computed only while below Max,
	// so it never overflows.
	if b := float64(p.Initial) * math.Pow(p.Multiplier, float64(failures-1)); b < float64(p.Max) {
		d = time.Duration(b)
	}
	if p.Jitter > 0 {
		h := fnv.New64a()
		h.Write([]byte(job))
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(failures))
		h.Write(n[:])
		u := float64(h.Sum64()%1_000_001)/1_000_000*2 - 1 // in [-1, 1]
		d = time.Duration(float64(d) * (1 + p.Jitter*u))
	}
	return d
}
