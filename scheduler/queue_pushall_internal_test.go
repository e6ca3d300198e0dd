package scheduler

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestPushAllOrdersAsPush checks that jobs queued in bulk (a takeover's
// Core.Load) come out in the order of the same jobs pushed one at a time,
// in any order, with some already queued.
func TestPushAllOrdersAsPush(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	share := func(a string) float64 { return float64(len(a) % 3) }
	for round := range 20 {
		var items []QueueItem
		for i := range 3000 {
			items = append(items, QueueItem{Job: fmt.Sprintf("j%05d", i), Account: fmt.Sprintf("acct%d", r.IntN(7)),
				Priority: r.IntN(4), SubmitSeq: uint64(r.IntN(500))})
		}
		one, bulk := NewQueue(share), NewQueue(share)
		for _, i := range r.Perm(len(items)) {
			one.Push(items[i])
		}
		before := round % len(items) // queued one at a time before the bulk
		for _, it := range items[:before] {
			bulk.Push(it)
		}
		r.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		bulk.pushAll(items) // the ones already queued are left as they are
		if one.Len() != bulk.Len() {
			t.Fatalf("round %d: %d queued in bulk, %d one at a time", round, bulk.Len(), one.Len())
		}
		for n := 0; ; n++ {
			a, okA := one.Pop()
			b, okB := bulk.Pop()
			if a != b || okA != okB {
				t.Fatalf("round %d, pop %d: bulk %+v (%v), one at a time %+v (%v)", round, n, b, okB, a, okA)
			}
			if !okA {
				break
			}
		}
	}
}
