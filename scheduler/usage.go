package scheduler

import (
	"math"
	"time"
)

// usage keeps each account's GPU-seconds of use, decayed with a half-life.
//
// Every account's usage decays by the same factor over the same time, so
// comparing accounts at a common moment needs no decay at all: values are
// kept as if at a reference time (each addition x at time t is stored as
// x·2^((t−ref)/halfLife)), and the order of accounts by value is their
// order by decayed usage at any moment. When the scale grows large, every
// value is rebased to a later reference, which keeps the order.
type usage struct {
	halfLife float64 // seconds
	ref      time.Time
	values   map[string]float64
}

func newUsage(halfLife time.Duration) *usage {
	return &usage{halfLife: halfLife.Seconds(), values: map[string]float64{}}
}

// rebaseAt is the exponent past which values are rebased.
const rebaseAt = 512

// add adds x GPU-seconds (negative to take an estimate back) to account at
// time at.
func (u *usage) add(account string, x float64, at time.Time) {
	if x == 0 || at.IsZero() {
		return
	}
	if u.ref.IsZero() {
		u.ref = at
	}
	e := at.Sub(u.ref).Seconds() / u.halfLife
	if e > rebaseAt {
		f := math.Exp2(-e)
		for k, v := range u.values {
			u.values[k] = v * f
		}
		u.ref, e = at, 0
	}
	v := u.values[account] + x*math.Exp2(e)
	if v < 1e-9*math.Exp2(e) {
		v = 0 // the estimate taken back, up to rounding
	}
	u.values[account] = v
}

// value is account's usage as kept: comparable across accounts, not in
// GPU-seconds.
func (u *usage) value(account string) float64 { return u.values[account] }

// decayedAt is account's usage in GPU-seconds as of now.
func (u *usage) decayedAt(account string, now time.Time) float64 {
	if u.ref.IsZero() {
		return 0
	}
	return u.values[account] * math.Exp2(-now.Sub(u.ref).Seconds()/u.halfLife)
}
