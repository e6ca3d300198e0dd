package scheduler

import (
	"maps"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// Sealing quiet accounts: the fold seals an account's journal only when a
// command moves it, so the core decides to seal every account whose newest
// seal is ledger.SealInterval old (see [ledger.Seal]). It looks once a
// minute, on the first pass at or after each whole minute of the clock, so
// that a leader that takes over scans when the one before it would have
// (both decide the same on the same state), and makes at most maxSeals
// decisions a pass, in account order.

const (
	sealScanEvery = time.Minute
	maxSeals      = 100
)

// sealer is the core's record of seal decisions in flight.
type sealer struct {
	next time.Time           // the next scan
	sent map[string]sentSeal // per account
}

type sentSeal struct {
	at    time.Time
	after uint64
}

func newSealer() *sealer { return &sealer{sent: map[string]sentSeal{}} }

// seals returns seal decisions for accounts whose journal is due one.
func (c *Core) seals(s *ledger.State, now time.Time) []ledger.Command {
	sl := c.sealer
	if now.Before(sl.next) {
		return nil
	}
	sl.next = now.Truncate(sealScanEvery).Add(sealScanEvery)
	var out []ledger.Command
	for _, id := range slices.Sorted(maps.Keys(s.Accounts)) {
		a := s.Accounts[id]
		if !ledger.SealDue(a, now) {
			delete(sl.sent, id)
			continue
		}
		if d, ok := sl.sent[id]; ok && d.after == a.Journal.Sealed && now.Sub(d.at) <= c.cfg.DecisionTimeout {
			continue // in flight
		}
		if len(out) == maxSeals {
			sl.next = now // more are due: look again on the next pass
			break
		}
		sl.sent[id] = sentSeal{at: now, after: a.Journal.Sealed}
		out = append(out, ledger.Seal{Account: id, After: a.Journal.Sealed})
	}
	return out
}

// abandonSeal forgets a seal decision that could not be published.
func (c *Core) abandonSeal(d ledger.Seal) {
	delete(c.sealer.sent, d.Account)
	c.sealer.next = time.Time{}
}
