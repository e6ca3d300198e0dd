package scheduler

import (
	"container/heap"
	"maps"
	"slices"
)

// Queue orders pending jobs: highest priority first; among accounts whose
// best jobs have equal priority, the account with the lowest share first (a
// function the owner supplies, such as decayed usage over weight); then
// oldest (lowest submit sequence). It keeps one heap per account and a heap
// of the accounts' best jobs, so a pick costs O(log n) and setting a capped
// account aside for the rest of a pass costs O(log accounts). When an
// account's share changes, [Queue.FixAccount] restores its place in
// O(log accounts).
//
// Removal is lazy: [Queue.Remove] marks the job and drops it from the index
// in O(1); the heap entry is discarded when it reaches the top.
//
// Queue is not safe for concurrent use.
type Queue struct {
	accounts map[string]*accountQueue
	heads    headHeap
	index    map[string]*item // live items by job id
}

// ShareFunc returns an account's share of recent use: lower goes first.
type ShareFunc func(account string) float64

// QueueItem is one queued job as the queue sees it.
type QueueItem struct {
	Job       string
	Account   string
	Priority  int
	SubmitSeq uint64
}

// item is a queued job. It names its account by the account's queue, not
// by a string of its own: a takeover of a million pending jobs holds a
// million items, and the pointer keeps each in a 48-byte size class.
type item struct {
	Job       string
	Priority  int
	SubmitSeq uint64
	acct      *accountQueue // the queue it was pushed to; its id is the account
	dead      bool
}

func (x *item) queueItem() QueueItem {
	return QueueItem{Job: x.Job, Account: x.acct.id, Priority: x.Priority, SubmitSeq: x.SubmitSeq}
}

type accountQueue struct {
	id    string
	items itemHeap
	pos   int  // index in the heads heap, -1 when not in it
	aside bool // set aside for the rest of a pass: kept out of the heads
}

// NewQueue returns an empty queue. share may be nil: every account then has
// the same share.
func NewQueue(share ShareFunc) *Queue {
	if share == nil {
		share = func(string) float64 { return 0 }
	}
	return &Queue{accounts: map[string]*accountQueue{}, index: map[string]*item{}, heads: headHeap{share: share}}
}

// FixAccount restores account's place among the heads after its share
// changed.
func (q *Queue) FixAccount(account string) {
	if aq := q.accounts[account]; aq != nil {
		q.fixHead(aq)
	}
}

// Len returns the number of live jobs queued.
func (q *Queue) Len() int { return len(q.index) }

// Push queues a job. Pushing a job already queued does nothing.
func (q *Queue) Push(it QueueItem) {
	if q.index[it.Job] != nil {
		return
	}
	aq := q.accounts[it.Account]
	if aq == nil {
		aq = &accountQueue{id: it.Account, pos: -1}
		q.accounts[it.Account] = aq
	}
	x := &item{Job: it.Job, Priority: it.Priority, SubmitSeq: it.SubmitSeq, acct: aq}
	q.index[it.Job] = x
	heap.Push(&aq.items, x)
	q.fixHead(aq)
}

// pushAll queues every job of items (one already queued is left as it is)
// as Push would one at a time: the items are added to their accounts' heaps,
// which are then restored at once, in O(n) rather than O(n log n), and the
// index is sized once. Items are allocated in blocks: a million queued at a
// takeover are a thousand allocations, not a million.
func (q *Queue) pushAll(items []QueueItem) {
	if len(q.index) == 0 && len(items) > 0 {
		q.index = make(map[string]*item, len(items))
	}
	touched := map[string]*accountQueue{}
	var block []item
	var aq *accountQueue
	for _, it := range items {
		if q.index[it.Job] != nil {
			continue
		}
		if aq == nil || aq.id != it.Account {
			if aq = q.accounts[it.Account]; aq == nil {
				aq = &accountQueue{id: it.Account, pos: -1}
				q.accounts[it.Account] = aq
			}
			touched[aq.id] = aq
		}
		if len(block) == 0 {
			block = make([]item, min(len(items), pushAllBlock))
		}
		x := &block[0]
		block = block[1:]
		*x = item{Job: it.Job, Priority: it.Priority, SubmitSeq: it.SubmitSeq, acct: aq}
		q.index[it.Job] = x
		aq.items = append(aq.items, x)
	}
	for _, id := range slices.Sorted(maps.Keys(touched)) { // no map order, even where it could not matter
		aq := touched[id]
		heap.Init(&aq.items)
		q.fixHead(aq)
	}
}

// pushAllBlock is how many items pushAll allocates at once. A block lives
// while any of its items is queued.
const pushAllBlock = 1024

// Remove drops job from the queue, if it is there. It costs O(1), or
// O(log n) when the job is its account's best, whose place among the heads
// must then be fixed.
func (q *Queue) Remove(job string) {
	x := q.index[job]
	if x == nil {
		return
	}
	x.dead = true
	delete(q.index, job)
	if aq := q.accounts[x.acct.id]; aq != nil && len(aq.items) > 0 && aq.items[0] == x {
		q.fixHead(aq)
	}
}

// Peek returns the job that should run next without removing it.
func (q *Queue) Peek() (QueueItem, bool) {
	for len(q.heads.items) > 0 {
		aq := q.heads.items[0]
		if x := aq.top(); x != nil {
			return x.queueItem(), true
		}
		q.fixHead(aq) // the account emptied out: drop it from the heads
	}
	return QueueItem{}, false
}

// Pop removes and returns the job that should run next.
func (q *Queue) Pop() (QueueItem, bool) {
	it, ok := q.Peek()
	if ok {
		q.take(q.accounts[it.Account])
	}
	return it, ok
}

// take pops aq's top item for good.
func (q *Queue) take(aq *accountQueue) {
	x := heap.Pop(&aq.items).(*item)
	delete(q.index, x.Job)
	q.fixHead(aq)
}

// top returns the account's best live item, discarding dead ones.
func (aq *accountQueue) top() *item {
	for len(aq.items) > 0 {
		if x := aq.items[0]; !x.dead {
			return x
		}
		heap.Pop(&aq.items)
	}
	return nil
}

// fixHead puts aq in the heads heap at the place of its best item, or takes
// it out when it has none.
func (q *Queue) fixHead(aq *accountQueue) {
	if aq.aside {
		return
	}
	empty := aq.top() == nil
	switch {
	case empty && aq.pos >= 0:
		heap.Remove(&q.heads, aq.pos)
	case empty:
	case aq.pos >= 0:
		heap.Fix(&q.heads, aq.pos)
	default:
		heap.Push(&q.heads, aq)
	}
	if empty && len(aq.items) == 0 {
		delete(q.accounts, aq.id)
	}
}

// Pass walks the queue in order for one scheduling round. Jobs it skips and
// accounts it sets aside are restored by [Pass.End]; jobs it takes leave the
// queue.
type Pass struct {
	q       *Queue
	cur     *accountQueue
	curItem *item
	skipped []*item
	aside   []*accountQueue
}

// Begin starts a pass. Call End when done; the queue must not be changed
// otherwise while a pass is open.
func (q *Queue) Begin() *Pass { return &Pass{q: q} }

// Next returns the next job in order, or false when the pass has seen every
// job it may see.
func (p *Pass) Next() (QueueItem, bool) {
	p.settle()
	it, ok := p.q.Peek()
	if !ok {
		return QueueItem{}, false
	}
	p.cur = p.q.accounts[it.Account]
	p.curItem = p.cur.top()
	return it, true
}

// Take removes the current job from the queue for good.
func (p *Pass) Take() {
	if p.curItem != nil {
		p.q.take(p.cur)
		p.cur, p.curItem = nil, nil
	}
}

// SkipAccount sets the current job's account aside for the rest of the pass:
// none of its jobs is offered again until End.
func (p *Pass) SkipAccount() {
	if p.cur == nil {
		return
	}
	if p.cur.pos >= 0 {
		heap.Remove(&p.q.heads, p.cur.pos)
	}
	p.cur.aside = true
	p.aside = append(p.aside, p.cur)
	p.cur, p.curItem = nil, nil
}

// settle skips the current job if the caller neither took it nor set its
// account aside: it is held out of the queue until End.
func (p *Pass) settle() {
	if p.curItem == nil {
		return
	}
	heap.Pop(&p.cur.items)
	p.skipped = append(p.skipped, p.curItem)
	p.q.fixHead(p.cur)
	p.cur, p.curItem = nil, nil
}

// End restores every skipped job and set-aside account.
func (p *Pass) End() {
	p.settle()
	for _, aq := range p.aside {
		if len(aq.items) > 0 {
			p.q.accounts[aq.id] = aq
		}
		aq.pos, aq.aside = -1, false
		p.q.fixHead(aq)
	}
	for _, x := range p.skipped {
		if x.dead {
			continue
		}
		aq := p.q.accounts[x.acct.id]
		if aq == nil {
			aq = &accountQueue{id: x.acct.id, pos: -1}
			p.q.accounts[aq.id] = aq
		}
		x.acct = aq
		heap.Push(&aq.items, x)
		p.q.fixHead(aq)
	}
	p.skipped, p.aside = nil, nil
}

// before orders items: higher priority first, then lower submit sequence,
// then job id. The order is total (ids are unique), so which job comes
// first never depends on the order the heap was filled in.
func before(a, b *item) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.SubmitSeq != b.SubmitSeq {
		return a.SubmitSeq < b.SubmitSeq
	}
	return a.Job < b.Job
}

type itemHeap []*item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return before(h[i], h[j]) }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *itemHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return x
}

// headHeap orders accounts by their best live item: priority, then the
// account's share, then age, then account id (a total order, as in
// before). Every account in it has a live item (fixHead keeps it so).
type headHeap struct {
	items []*accountQueue
	share ShareFunc
}

func (h *headHeap) Len() int { return len(h.items) }
func (h *headHeap) Less(i, j int) bool {
	a, b := h.items[i].top(), h.items[j].top()
	if a == nil || b == nil {
		return b == nil && a != nil // an emptied account sorts last until dropped
	}
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if sa, sb := h.share(a.acct.id), h.share(b.acct.id); sa != sb {
		return sa < sb
	}
	if a.SubmitSeq != b.SubmitSeq {
		return a.SubmitSeq < b.SubmitSeq
	}
	return a.acct.id < b.acct.id
}
func (h *headHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].pos, h.items[j].pos = i, j
}
func (h *headHeap) Push(x any) {
	aq := x.(*accountQueue)
	aq.pos = len(h.items)
	h.items = append(h.items, aq)
}
func (h *headHeap) Pop() any {
	old := h.items
	aq := old[len(old)-1]
	old[len(old)-1] = nil
	h.items = old[:len(old)-1]
	aq.pos = -1
	return aq
}
