package client_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
)

// A page of the newest jobs read from the events' tail is the page the
// whole view gives, for every filter and page size, page after page; and
// the tail tells the first pages itself rather than falling back.
func TestJobPagesFromTheTailAreTheViewsPages(t *testing.T) {
	f := newFixture(t)
	// Messages on job event subjects that name no command, before and
	// between the jobs, so the tail's windows do not reach the start of
	// the stream at once: the pages are told by the rule that the last
	// job was submitted after the oldest event read.
	noise := func(n int) {
		t.Helper()
		for i := range n {
			if _, err := f.in.js.PublishAsync(fmt.Sprintf("gpuq.event.nlp.job.noise-%d", i%7), []byte(`{"v":1}`)); err != nil {
				t.Fatal(err)
			}
		}
		select {
		case <-f.in.js.PublishAsyncComplete():
		case <-f.ctx.Done():
			t.Fatal(f.ctx.Err())
		}
	}
	noise(2000)
	for i := range 24 {
		if i == 12 {
			noise(600)
		}
		cmd := "true"
		if i%5 == 0 {
			cmd = "false"
		}
		account := "vision"
		if i%3 == 0 {
			account = "nlp"
		}
		f.run(t, account, fmt.Sprintf("j-%02d", i), 1, cmd)
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
