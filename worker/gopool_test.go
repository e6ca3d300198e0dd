package worker

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// TestGoPoolKeepsItsGoroutines checks that work handed to the pool while
// one of its goroutines waits runs on that goroutine, that work handed to
// it while all are busy gets a new one, that each function runs once, and
// that close ends them all.
func TestGoPoolKeepsItsGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newGoPool()
		var ran atomic.Int64
		for range 5 {
			p.Go(func() { ran.Add(1) })
			synctest.Wait() // it has run, and its goroutine waits for more
		}
		if got := p.started.Load(); got != 1 {
			t.Errorf("five functions one after another started %d goroutines, want 1", got)
		}
		release := make(chan struct{})
		for range 3 {
			p.Go(func() { <-release; ran.Add(1) })
		}
		synctest.Wait()
		if got := p.started.Load(); got != 3 {
			t.Errorf("three functions at once started %d goroutines in all, want 3", got)
		}
		closed := make(chan struct{})
		go func() { p.close(); close(closed) }()
		synctest.Wait()
		select {
		case <-closed:
			t.Fatal("close returned while functions of the pool were running")
		default:
		}
		close(release)
		<-closed
		if got := ran.Load(); got != 8 {
			t.Errorf("%d functions ran, want 8", got)
		}
	})
}
