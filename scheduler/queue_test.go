// Queue tests: a differential test against an obviously correct reference
// (a sorted scan of a map) over random pushes, removals, pops and passes
// that skip jobs and set accounts aside; and benchmarks of a pick at 100,000
// and 1,000,000 queued jobs.
package scheduler

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// refQueue is the reference: every live job in a map, ordered by a full
// sort on each question, with each account's share.
type refQueue map[string]QueueItem

var shares = map[string]float64{}

func (r refQueue) order(exclude map[string]bool, asideAccounts map[string]bool) []QueueItem {
	var all []QueueItem
	for _, it := range r {
		if !exclude[it.Job] && !asideAccounts[it.Account] {
			all = append(all, it)
		}
	}
	slices.SortFunc(all, func(a, b QueueItem) int {
		switch {
		case a.Priority != b.Priority:
			return b.Priority - a.Priority
		case shares[a.Account] != shares[b.Account] && shares[a.Account] < shares[b.Account]:
			return -1
		case shares[a.Account] != shares[b.Account]:
			return 1
		case a.SubmitSeq < b.SubmitSeq:
			return -1
		case a.SubmitSeq > b.SubmitSeq:
			return 1
		}
		return 0
	})
	return all
}

func TestQueueMatchesReference(t *testing.T) {
	// Not parallel: the reference's shares are a package variable.
	rapid.Check(t, func(t *rapid.T) {
		clear(shares)
		q, ref := NewQueue(func(a string) float64 { return shares[a] }), refQueue{}
		seq := uint64(0)
		t.Repeat(map[string]func(*rapid.T){
			"share": func(t *rapid.T) {
				a := rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "account")
				shares[a] = float64(rapid.IntRange(0, 3).Draw(t, "share"))
				q.FixAccount(a)
			},
			"push": func(t *rapid.T) {
				seq++
				it := QueueItem{
					Job:       fmt.Sprintf("j%d", rapid.IntRange(0, 40).Draw(t, "job")),
					Account:   rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(t, "account"),
					Priority:  rapid.IntRange(-2, 2).Draw(t, "priority"),
					SubmitSeq: seq,
				}
				q.Push(it)
				if _, ok := ref[it.Job]; !ok {
					ref[it.Job] = it
				}
			},
			"remove": func(t *rapid.T) {
				job := fmt.Sprintf("j%d", rapid.IntRange(0, 40).Draw(t, "job"))
				q.Remove(job)
				delete(ref, job)
			},
			"pop": func(t *rapid.T) {
				want := ref.order(nil, nil)
				got, ok := q.Pop()
				if ok != (len(want) > 0) || ok && got != want[0] {
					t.Fatalf("Pop() = %+v, %v; want %+v", got, ok, want)
				}
				if ok {
					delete(ref, got.Job)
				}
			},
			"pass": func(t *rapid.T) {
				// Walk the queue, taking, skipping or setting accounts aside,
				// and check each offer is the best job not yet seen.
				p := q.Begin()
				seen, aside := map[string]bool{}, map[string]bool{}
				var taken []string
				for {
					want := ref.order(seen, aside)
					got, ok := p.Next()
					if ok != (len(want) > 0) || ok && got != want[0] {
						t.Fatalf("Pass.Next() = %+v, %v; want first of %+v", got, ok, want)
					}
					if !ok {
						break
					}
					seen[got.Job] = true
					switch rapid.IntRange(0, 2).Draw(t, "pass action") {
					case 0:
						p.Take()
						taken = append(taken, got.Job)
					case 1:
						p.SkipAccount()
						aside[got.Account] = true
					}
				}
				p.End()
				for _, job := range taken {
					delete(ref, job)
				}
			},
			"": func(t *rapid.T) {
				if q.Len() != len(ref) {
					t.Fatalf("Len() = %d, want %d", q.Len(), len(ref))
				}
				want := ref.order(nil, nil)
				got, ok := q.Peek()
				if ok != (len(want) > 0) || ok && got != want[0] {
					t.Fatalf("Peek() = %+v, %v; want %+v", got, ok, want)
				}
			},
		})
	})
}

// BenchmarkQueuePick measures one pick (pop the best job) and one push of a
// new job into a queue holding n jobs across 1,000 accounts.
func BenchmarkQueuePick(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			q := NewQueue(nil)
			for i := range n {
				q.Push(QueueItem{Job: fmt.Sprintf("j%d", i), Account: fmt.Sprintf("a%d", i%1000), Priority: i % 7, SubmitSeq: uint64(i)})
			}
			jobs := make([]string, b.N)
			for i := range jobs {
				jobs[i] = fmt.Sprintf("new%d", i)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				it, ok := q.Pop()
				if !ok {
					b.Fatal("queue ran dry")
				}
				it.Job, it.SubmitSeq = jobs[i], uint64(n+i)
				q.Push(it)
			}
		})
	}
}

// BenchmarkQueuePassCapped measures a pass that must set aside 999 capped
// accounts to reach the one account allowed to run, at 100,000 jobs.
func BenchmarkQueuePassCapped(b *testing.B) {
	q := NewQueue(nil)
	for i := range 100_000 {
		q.Push(QueueItem{Job: fmt.Sprintf("j%d", i), Account: fmt.Sprintf("a%d", i%1000), Priority: 1, SubmitSeq: uint64(i)})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := q.Begin()
		for {
			it, ok := p.Next()
			if !ok {
				b.Fatal("no open account")
			}
			if it.Account == "a999" {
				break
			}
			p.SkipAccount()
		}
		p.End()
	}
}
