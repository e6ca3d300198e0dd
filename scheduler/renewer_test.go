package scheduler_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// A load that takes ten lease TTLs is renewed all along, and the term then
// leads.
func TestALongLoadKeepsTheLeaseRenewed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &service{store: &fakeStore{delay: 10 * time.Second}}
		runService(t, s)
		s.waitLead(t)
		s.lease.mu.Lock()
		renewed := s.lease.renewals
		s.lease.mu.Unlock()
		if renewed < 25 {
			t.Errorf("%d renewals during a load of 10 lease TTLs; want one every third of the TTL", renewed)
		}
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// A renewal that fails once is tried again while the lease can still be
// held; renewals that fail until it cannot abandon the load, and the term
// ends before it leads.
func TestRenewalsThatFailWhileLoadingAbandonTheLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &service{store: &fakeStore{delay: 10 * time.Second}, lease: &fakeLease{failRenewals: 1}}
		runService(t, s)
		s.waitLead(t) // the one failure was ridden out
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
		if len(s.store.abandoned) != 0 {
			t.Errorf("loads abandoned after one failed renewal: %v", s.store.abandoned)
		}

		s = &service{store: &fakeStore{delay: 10 * time.Second}, lease: &fakeLease{renewFails: true}}
		runService(t, s)
		time.Sleep(3 * time.Second) // three TTLs: the first load was abandoned after one
		synctest.Wait()
		select {
		case <-s.leads:
			t.Error("a term led whose lease could not be renewed while it loaded")
		default:
		}
		s.store.mu.Lock()
		abandoned := s.store.abandoned
		s.store.mu.Unlock()
		if len(abandoned) == 0 || !errors.Is(abandoned[0], errTimeout) {
			t.Errorf("loads abandoned: %v; want the first, for its failed renewals", abandoned)
		}
		if err := s.stop(); err != nil {
			t.Fatal(err)
		}
	})
}
