package worker

import (
	"sync"
	"sync/atomic"
)

// goPool runs functions on goroutines it keeps from one to the next. Every
// attempt runs the same deep calls (os.StartProcess, nats.go's request
// path, the report's encoding) on goroutines of its own: a new goroutine
// starts with a small stack and grows it, copying it at each doubling, on
// every attempt, where a kept one has grown it once. A goroutine is kept
// while it waits for the next function, so the pool never holds more than
// ran at once; close ends them.
//
// The zero goPool is not usable; see newGoPool.
type goPool struct {
	work chan func()
	quit chan struct{}
	wg   sync.WaitGroup
	// started counts the goroutines the pool has started.
	started atomic.Int64
}

func newGoPool() *goPool {
	return &goPool{work: make(chan func()), quit: make(chan struct{})}
}

// Go runs f on a goroutine of the pool that waits for work, or on a new
// one when none waits. Go must not be called once close has begun.
func (p *goPool) Go(f func()) {
	select {
	case p.work <- f:
	default:
		p.wg.Add(1)
		p.started.Add(1)
		go p.loop(f)
	}
}

// loop runs f, then each function handed to it, until the pool closes.
func (p *goPool) loop(f func()) {
	defer p.wg.Done()
	for {
		f()
		f = nil // what f held is not kept while waiting
		select {
		case f = <-p.work:
		case <-p.quit:
			return
		}
	}
}

// close ends the pool's goroutines once each has run what it was given,
// and returns when they have ended.
func (p *goPool) close() {
	close(p.quit)
	p.wg.Wait()
}
