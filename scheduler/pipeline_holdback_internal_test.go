package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"
)

// keyStore records the keys of each write ("-key" for a removal).
type keyStore struct {
	Store
	writes [][]string
}

func (s *keyStore) Write(_ context.Context, recs []Record) error {
	s.writes = append(s.writes, recKeys(recs))
	return nil
}

func recKeys(recs []Record) []string {
	keys := make([]string, 0, len(recs))
	for _, r := range recs {
		if r.Delete {
			keys = append(keys, "-"+r.Key)
		} else {
			keys = append(keys, r.Key)
		}
	}
	return keys
}

// TestPersistHoldsBackOnlyWhatMeetsARemoval: stage 1 writes a batch's
// records though the batch in stage 2 also wrote their keys (a key may hold
// a version of each past the checkpoint), but holds back to stage 2 a
// record where either write is a removal: a load walks a key's history back
// only as far as its last removal.
func TestPersistHoldsBackOnlyWhatMeetsARemoval(t *testing.T) {
	put := func(key string, seq uint64) Record { return Record{Key: key, Seq: seq, Value: []byte("{}")} }
	del := func(key string, seq uint64) Record { return Record{Key: key, Seq: seq, Delete: true} }
	for _, tc := range []struct {
		name              string
		prev, recs        []Record
		wantNow, wantLate []string
	}{{
		name:    "puts of the keys prev put",
		prev:    []Record{put("account.a", 1), put("job.j1", 1)},
		recs:    []Record{put("account.a", 2), put("job.j1", 2), put("job.j2", 2)},
		wantNow: []string{"account.a", "job.j1", "job.j2"},
	}, {
		name:     "a put of a key prev removed",
		prev:     []Record{put("account.a", 1), del("job.j1", 1)},
		recs:     []Record{put("account.a", 2), put("job.j1", 2)},
		wantNow:  []string{"account.a"},
		wantLate: []string{"job.j1"},
	}, {
		name:     "a removal of a key prev put",
		prev:     []Record{put("job.j1", 1)},
		recs:     []Record{del("job.j1", 2), del("job.j2", 2)},
		wantNow:  []string{"-job.j2"},
		wantLate: []string{"-job.j1"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			st := &keyStore{}
			s := &Service{cfg: Config{Store: st, NowFunc: time.Now}}
			until := time.Now().Add(time.Hour)
			s.heldUntil.Store(&until)
			w := leased{s: s}
			ctx := context.Background()
			prev := &batch{applied: 1, recs: tc.prev}
			if err := s.persist(ctx, w, prev, nil); err != nil {
				t.Fatal(err)
			}
			b := &batch{applied: 2, recs: tc.recs}
			if err := s.persist(ctx, w, b, prev); err != nil {
				t.Fatal(err)
			}
			var now []string
			if len(st.writes) > 1 {
				now = st.writes[1]
			}
			if !slices.Equal(now, tc.wantNow) || !slices.Equal(recKeys(b.later), tc.wantLate) {
				t.Errorf("stage 1 wrote %q and held back %q; want %q and %q", now, recKeys(b.later), tc.wantNow, tc.wantLate)
			}
		})
	}
}
