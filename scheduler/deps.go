package scheduler

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpuq/gpuq/ledger"
)

// Gated jobs: a pending job that waits on a dependency or that its owner
// paused (see [ledger.Job.Gated]) holds its reservation but is kept out of
// the queue, so Decide never dispatches it (and the fold would ignore a
// dispatch of it anyway). The fold clears the gate; Observe then brings the
// job into the queue at its submit sequence.

// queueJob queues pending job j, at its current priority, or sets it aside
// when it is gated.
func (c *Core) queueJob(j *ledger.Job) {
	if c.gated == nil {
		c.gated = map[string]bool{}
	}
	if j.Gated() {
		c.queue.Remove(j.ID)
		c.gated[j.ID] = true
		return
	}
	delete(c.gated, j.ID)
	if it := c.queue.index[j.ID]; it != nil && it.Priority != j.Priority {
		c.queue.Remove(j.ID) // its owner changed its priority: queue it again
	}
	c.queue.Push(QueueItem{Job: j.ID, Account: j.Account, Priority: j.Priority, SubmitSeq: j.SubmitSeq})
}

// unqueueJob takes job id out of the queue and the gated set.
func (c *Core) unqueueJob(id string) {
	c.queue.Remove(id)
	delete(c.gated, id)
}

// gateBlockers says why gated job j is held back: "user_hold" when its
// owner paused it, "waiting_on_dependency" naming each job it still waits
// for and how (afterok or afterany).
func gateBlockers(s *ledger.State, j *ledger.Job) []Blocker {
	var out []Blocker
	if j.Paused {
		out = append(out, Blocker{Kind: "user_hold", Message: "its owner holds it: it keeps its reservation and is not dispatched until released (gpuq release " + j.ID + ")"})
	}
	if len(j.WaitingOn()) > 0 {
		var parts []string
		for _, id := range j.WaitingOn() {
			how := "to end, however it ends (afterany)"
			if slices.Contains(j.After(), id) {
				how = "to succeed (afterok)"
			}
			state := "unknown"
			if d := s.Jobs[id]; d != nil {
				state = string(d.State)
			}
			parts = append(parts, fmt.Sprintf("job %s (%s) %s", id, state, how))
		}
		out = append(out, Blocker{Kind: "waiting_on_dependency", Message: "it waits for " + strings.Join(parts, "; ")})
	}
	return out
}

// waitingGated explains the first limit gated jobs, in job order.
func (c *Core) waitingGated(s *ledger.State, limit int) []Waiting {
	var out []Waiting
	ids := firstSorted(maps.Keys(c.gated), limit, func(id string) bool {
		j := s.Jobs[id]
		return j != nil && j.State == ledger.StatePending && j.Gated()
	})
	for _, id := range ids {
		j := s.Jobs[id]
		w := Waiting{Job: j.ID, Account: j.Account, State: j.State, Blockers: gateBlockers(s, j)}
		w.key = blockersKey(w.Blockers, strings.Join(j.WaitingOn(), ",")+fmt.Sprint(j.Paused))
		out = append(out, w)
	}
	return out
}
