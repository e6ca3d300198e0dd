package scheduler

import (
	"container/heap"
	"maps"
	"slices"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// Archiving: the core keeps the ledger's final jobs in order of their end,
// and decides to archive those that ended more than CoreConfig.JobRetention
// ago, at most CoreConfig.MaxArchives per pass, oldest first, so a backlog
// (an installation upgraded with a million finished jobs) drains over many
// passes without holding up dispatching.

// endedJob is a final job waiting for its retention to pass: the record it
// was indexed at (its Seq) and when it ended.
type endedJob struct {
	end time.Time
	id  string
	seq uint64
}

// endedHeap is a min-heap of final jobs by end time, then id. An entry whose
// job has changed since (a rejected id submitted again) or left is dropped
// when it comes up.
type endedHeap []endedJob

func (h endedHeap) Len() int { return len(h) }
func (h endedHeap) Less(i, k int) bool {
	if c := h[i].end.Compare(h[k].end); c != 0 {
		return c < 0
	}
	return h[i].id < h[k].id
}
func (h endedHeap) Swap(i, k int) { h[i], h[k] = h[k], h[i] }
func (h *endedHeap) Push(x any)   { *h = append(*h, x.(endedJob)) }
func (h *endedHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// archiver is the core's index of final jobs and its archive decisions in
// flight.
type archiver struct {
	heap endedHeap
	// queued is the record each final job was queued at, so a job
	// indexed again unchanged is not queued twice.
	queued map[string]uint64
	// sent is when an archive decision was published, per job, with the
	// record it named.
	sent map[string]sentArchive
}

type sentArchive struct {
	at  time.Time
	seq uint64
}

func newArchiver() *archiver {
	return &archiver{queued: map[string]uint64{}, sent: map[string]sentArchive{}}
}

// index queues j if it is final and not queued at this record already.
func (ar *archiver) index(j *ledger.Job) {
	if !j.State.Terminal() || j.EndedAt().IsZero() {
		delete(ar.queued, j.ID)
		return
	}
	if seq, ok := ar.queued[j.ID]; ok && seq == j.Seq {
		return
	}
	if s, ok := ar.sent[j.ID]; ok && s.seq == j.Seq {
		return // a decision about this record is in flight
	}
	ar.queued[j.ID] = j.Seq
	heap.Push(&ar.heap, endedJob{end: j.EndedAt(), id: j.ID, seq: j.Seq})
}

// removed forgets a job the fold archived.
func (ar *archiver) removed(id string) {
	delete(ar.queued, id)
	delete(ar.sent, id)
}

// archives returns archive decisions for final jobs that ended at least the
// retention before now, oldest first, at most MaxArchives. A decision that
// has gone unapplied for DecisionTimeout is made again.
func (c *Core) archives(s *ledger.State, now time.Time) []ledger.Command {
	ar, retention := c.archiver, c.cfg.JobRetention
	// In job order, so which decisions come back first is the same on
	// every scheduler.
	for _, id := range slices.Sorted(maps.Keys(ar.sent)) {
		if d := ar.sent[id]; now.Sub(d.at) > c.cfg.DecisionTimeout {
			delete(ar.sent, id)
			if j := s.Jobs[id]; j != nil {
				ar.index(j)
			}
		}
	}
	var out []ledger.Command
	for len(out) < c.cfg.MaxArchives && ar.heap.Len() > 0 {
		top := ar.heap[0]
		if now.Before(top.end.Add(retention)) {
			break
		}
		heap.Pop(&ar.heap)
		j := s.Jobs[top.id]
		if j == nil || j.Seq != top.seq || ar.queued[top.id] != top.seq {
			continue // changed or gone since it was queued
		}
		delete(ar.queued, top.id)
		if !ledger.Archivable(j, retention, now) {
			ar.index(j)
			continue
		}
		ar.sent[j.ID] = sentArchive{at: now, seq: j.Seq}
		out = append(out, ledger.Archive{Job: j.ID, Seq: j.Seq, Retention: retention})
	}
	return out
}

// abandonArchive forgets an archive decision that could not be published.
func (c *Core) abandonArchive(s *ledger.State, a ledger.Archive) {
	delete(c.archiver.sent, a.Job)
	if j := s.Jobs[a.Job]; j != nil {
		c.archiver.index(j)
	}
}

// observeArchived updates the core after the fold archived job: its
// attempts' use leaves the account's fair share, as it is absent from
// what a new leader loads.
func (c *Core) observeArchived(j *ledger.Job) {
	c.archiver.removed(j.ID)
	for _, a := range j.Attempts() {
		c.usage.add(j.Account, -attemptUsage(a), a.EndedAt)
	}
	c.queue.Remove(j.ID)
	c.queue.FixAccount(j.Account)
	delete(c.unplaceableSince, j.ID)
	delete(c.lostSent, j.ID)
}

// nextArchive returns when the oldest queued final job's retention ends,
// or the zero time.
func (c *Core) nextArchive() time.Time {
	if c.archiver.heap.Len() == 0 {
		return time.Time{}
	}
	return c.archiver.heap[0].end.Add(c.cfg.JobRetention)
}

// ArchiveQueued returns how many final jobs wait for their retention to pass, for
// tests and metrics.
func (c *Core) ArchiveQueued() int { return len(c.archiver.queued) }
