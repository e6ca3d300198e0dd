package natsstore_test

// The lease's record of who leads since when, and the standbys'
// announcements, against a real server: a renewal keeps the holder's
// since; a contender that finds the lease taken announces itself at most
// once per lease TTL, under its key (hashed for a name that is not a
// token), and its announcement lapses by itself once it stops contending.

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/internal/natsbus"
	"github.com/gpuq/gpuq/internal/natsstore"
	"github.com/gpuq/gpuq/subjects"
)

func TestLeaseSinceAndStandbys(t *testing.T) {
	t.Parallel()
	js, kv := setup(t, natsbus.SetupConfig{})
	ctx := context.Background()
	leader, err := natsstore.NewLease(js, kv, "one", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := leader.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	since := func() (time.Time, uint64) {
		t.Helper()
		e, err := kv.Get(ctx, subjects.LeaderKey)
		if err != nil {
			t.Fatal(err)
		}
		var v struct{ Since time.Time }
		if err := json.Unmarshal(e.Value(), &v); err != nil {
			t.Fatal(err)
		}
		return v.Since, e.Revision()
	}
	took, rev := since()
	if took.IsZero() || time.Since(took) > 10*time.Second {
		t.Fatalf("lease since %v", took)
	}
	time.Sleep(10 * time.Millisecond)
	if err := leader.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if again, rev2 := since(); !again.Equal(took) || rev2 <= rev {
		t.Errorf("after a renewal: since %v (rev %d), want %v (rev above %d)", again, rev2, took, rev)
	}

	// Two standbys; each announcement is written once per lease TTL.
	names := []string{"two", "three.example.com"}
	for _, name := range names {
		l, err := natsstore.NewLease(js, kv, name, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if held, err := l.TryAcquire(ctx); err != nil || held {
				t.Fatalf("%s: TryAcquire = %v, %v", name, held, err)
			}
		}
		e, err := kv.Get(ctx, subjects.StandbyKey(name))
		if err != nil {
			t.Fatalf("%s's announcement: %v", name, err)
		}
		var v natsstore.StandbyValue
		if err := json.Unmarshal(e.Value(), &v); err != nil || v.V != 1 || v.Name != name || v.TTL != "3s" {
			t.Errorf("%s's announcement: %s, %v", name, e.Value(), err)
		}
		if hist, err := kv.History(ctx, subjects.StandbyKey(name)); err != nil || len(hist) != 1 {
			t.Errorf("%s announced itself %d times in one TTL: %v", name, len(hist), err)
		}
	}
	if subjects.StandbyKey(names[1]) == "sched.standby."+names[1] {
		t.Errorf("a name that is not a token is its own key: %s", subjects.StandbyKey(names[1]))
	}
	// They stop contending: the announcements lapse within their TTL
	// (and the server's second to remove them), while the leader renews.
	deadline := time.Now().Add(10 * time.Second)
	for _, name := range names {
		for {
			_, err := kv.Get(ctx, subjects.StandbyKey(name))
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's announcement did not lapse", name)
			}
			if err := leader.Renew(ctx); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}
