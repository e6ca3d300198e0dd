package client_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// A page of the newest jobs read from the events' tail is the page the
// whole view gives, for every filter and page size, page after page; and
// the tail tells the first pages itself rather than falling back.
func TestJobPagesFromTheTailAreTheViewsPages(t *testing.T) {
	f := newFixture(t)
	// Events of no job, before and between the jobs, so the tail's windows
	// do not reach the start of the stream at once: the pages are told by
	// the rule that the last job was submitted after the largest command
	// sequence among the first events of the window: 4,096 of them in
	// production, 256 here. Each carries the sequence of the last command
	// folded before it, as the scheduler's events do.
	client.SetTailReorder(f.c, 256)
	noise := func(n int, seq uint64) {
		t.Helper()
		for i := range n {
			body := fmt.Sprintf(`{"v":1,"type":"noise","seq":%d}`, seq)
			if _, err := f.in.js.PublishAsync(fmt.Sprintf("gpuq.event.nlp.job.noise-%d", i%7), []byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-f.in.js.PublishAsyncComplete():
		case <-f.ctx.Done():
			t.Fatal(f.ctx.Err())
		}
	}
	noise(2000, 1)
	var lastSeq uint64
	for i := range 24 {
		if i == 12 {
			noise(600, lastSeq)
		}
		cmd := "true"
		if i%5 == 0 {
			cmd = "false"
		}
		account := "vision"
		if i%3 == 0 {
			account = "nlp"
		}
		lastSeq = f.run(t, account, fmt.Sprintf("j-%02d", i), 1, cmd).Seq
	}
	ids := func(page client.JobPage) []string {
		var out []string
		for _, j := range page.Jobs {
			out = append(out, j.ID)
		}
		return out
	}
	for _, filter := range []client.JobFilter{{}, {Account: "vision"}, {Account: "nlp"}, {State: ledger.StateFailed}, {Account: "vision", State: ledger.StateSucceeded}} {
		all, err := f.c.Jobs(f.ctx, filter) // no limit: the whole view
		if err != nil {
			t.Fatal(err)
		}
		want := ids(all)
		for _, limit := range []int{1, 3, 7, 100} {
			lf := filter
			lf.Limit = limit
			first, ok, err := f.c.TailPage(f.ctx, lf)
			if err != nil {
				t.Fatal(err)
			}
			if !ok && limit < len(want) {
				t.Errorf("filter %+v: the tail did not tell the first page", lf)
			} else if n := min(limit, len(want)); ok && (!slices.Equal(ids(first), want[:n]) || (first.Next != "") != (limit < len(want))) {
				t.Errorf("filter %+v: first page from the tail %v (next %q), want %v", lf, ids(first), first.Next, want[:n])
			}
			var got []string
			for pages := 0; ; pages++ {
				page, err := f.c.Jobs(f.ctx, lf)
				if err != nil {
					t.Fatal(err)
				}
				if len(page.Jobs) > limit || pages > len(want)+1 {
					t.Fatalf("filter %+v: page %d has %d jobs", lf, pages, len(page.Jobs))
				}
				got = append(got, ids(page)...)
				if page.Next == "" {
					break
				}
				lf.After = page.Next
			}
			if !slices.Equal(got, want) {
				t.Errorf("filter %+v: pages of %d: %v, want %v", filter, limit, got, want)
			}
		}
	}
}

// TestJobPagesFromTheTailAcrossEventsStoredLate: an event stored after
// events the scheduler folded later (a publish retried, alone, while later
// ones went ahead; a takeover publishing again what its predecessor had
// sent) puts a small command sequence in the tail's window. The tail took
// the smallest sequence in the window as the bound below which every
// submission was already read, so the newest job, whose submission event
// lay before the window, was left out of the page.
func TestJobPagesFromTheTailAcrossEventsStoredLate(t *testing.T) {
	f := newFixture(t)
	for _, id := range []string{"y", "z", "a", "b"} {
		f.run(t, "vision", id, 1, "true")
	}
	js, err := jetstream.New(f.in.nc)
	if err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(f.ctx, subjects.Default.EventsStream())
	if err != nil {
		t.Fatal(err)
	}
	// y's last event, and z's and a's accepted events, as the stream holds
	// them.
	y, err := str.GetLastMsgForSubject(f.ctx, subjects.Default.JobEvent("vision", "y"))
	if err != nil {
		t.Fatal(err)
	}
	late := []*nats.Msg{{Subject: y.Subject, Data: y.Data}}
	for _, id := range []string{"z", "a"} {
		cons, err := js.OrderedConsumer(f.ctx, subjects.Default.EventsStream(), jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subjects.Default.JobEvent("vision", id)}})
		if err != nil {
			t.Fatal(err)
		}
		for found := false; !found; {
			m, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
			if err != nil {
				t.Fatal(err)
			}
			var ev struct {
				Type ledger.EventType `json:"type"`
			}
			if err := json.Unmarshal(m.Data(), &ev); err != nil {
				t.Fatal(err)
			}
			if found = ev.Type == ledger.EventAccepted; found {
				late = append(late, &nats.Msg{Subject: m.Subject(), Data: m.Data()})
			}
		}
	}
	// Messages that are no events push b's submission out of the first
	// window; then the three events again, stored late.
	for i := range 400 {
		if _, err := js.PublishAsync(fmt.Sprintf("gpuq.event.vision.job.noise-%d", i%7), []byte(`{"v":1}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range late {
		if _, err := js.PublishMsgAsync(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-f.ctx.Done():
		t.Fatal(f.ctx.Err())
	}
	for _, filter := range []client.JobFilter{{Limit: 1}, {Account: "vision", Limit: 1}, {Account: "vision", Limit: 2}} {
		want := []string{"b", "a"}[:filter.Limit]
		ids := func(page client.JobPage) []string {
			var out []string
			for _, j := range page.Jobs {
				out = append(out, j.ID)
			}
			return out
		}
		// The bound as in production, and one as small as the three late
		// events, which the tail then uses before it reaches the stream's
		// start.
		for _, reorder := range []int{4096, 3} {
			client.SetTailReorder(f.c, reorder)
			page, ok, err := f.c.TailPage(f.ctx, filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(page); ok && !slices.Equal(got, want) {
				t.Errorf("filter %+v, reorder bound %d: the tail's page is %v, want %v", filter, reorder, got, want)
			}
		}
		page, err := f.c.Jobs(f.ctx, filter)
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(page); !slices.Equal(got, want) {
			t.Errorf("filter %+v: Jobs gives %v, want %v", filter, got, want)
		}
	}
}
