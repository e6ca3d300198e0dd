// Tests of what the pages render, without a server: every value gpuq did
// not choose (a job's command, environment, output, messages) comes out
// escaped, and the plots put each bar where its value says. The dashboard
// against a running gpuq, in a real browser, is tested in cmd/gpuq
// (TestDashboardInBrowser).
package web

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/wire"
)

const hostile = `<script>alert("x")</script><img src=x onerror=alert(1)>`

func newTestServer(t *testing.T) *Server {
	t.Helper()
	s, err := New(Config{Client: &client.Client{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func render(t *testing.T, s *Server, name string, data any) string {
	t.Helper()
	var b bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&b, name, data); err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	return b.String()
}

// checkEscaped fails if page holds the hostile markup as markup anywhere.
func checkEscaped(t *testing.T, page string) {
	t.Helper()
	for _, bad := range []string{"<script>alert", "<img"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q unescaped:\n%s", bad, page)
		}
	}
	if !strings.Contains(page, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;") {
		t.Errorf("the page does not show the hostile text escaped:\n%s", page)
	}
}

func TestJobPageEscapesHostileInput(t *testing.T) {
	s := newTestServer(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	j := &ledger.Job{ID: "evil-1", Account: "demo", GPUs: 1, Cost: 10, State: ledger.StateFailed, Attempt: 1,
		Command: []string{"sh", "-c", hostile}, SubmittedAt: now, JobOptions: &ledger.JobOptions{Env: map[string]string{"X": hostile}}, JobOutcome: &ledger.JobOutcome{Reason: "exit", Message: hostile, Attempts: []ledger.Attempt{{N: 1, Host: "sim-1", GPUs: 1, Outcome: ledger.StateFailed, Message: hostile}}}}
	v := jobView{Now: now, Job: j, Env: [][2]string{{"X", hostile}},
		Charges: []ledger.Entry{{Kind: ledger.EntryReserve, Account: "demo", Job: "evil-1", Amount: 10}},
		Output: outputView{Attempt: 1, Count: 2, End: hostile,
			Chunks: []outputChunk{{Stream: "stdout", Text: hostile}, {Stream: hostile, Text: "x"}}}}
	page := render(t, s, "jobpage", v)
	checkEscaped(t, page)
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("the job page has %d script elements, want 1 (its own):\n%s", n, page)
	}
	if !strings.Contains(page, `data-skip="2"`) {
		t.Errorf("the job page does not tell its script to skip the 2 chunks it shows:\n%s", page)
	}
}

func TestDashboardEscapesHostileInput(t *testing.T) {
	s := newTestServer(t)
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	waiting := &ledger.Job{ID: "w1", Account: "demo", State: ledger.StatePending, Command: []string{hostile}}
	running := &ledger.Job{ID: "r1", Account: "demo", State: ledger.StateRunning, Command: []string{hostile}, Reserved: 5, JobOutcome: &ledger.JobOutcome{Host: "sim-1"}}
	v := dashboardView{Live: liveView{Now: now,
		Queue: []queueRow{{Job: waiting, Why: client.Explanation{Status: client.Explained,
			Blockers: []wire.Blocker{{Kind: "no_capacity", Message: hostile}}}}},
		Running:  []*ledger.Job{running},
		Reserved: []*ledger.Job{running},
		Recent:   []*ledger.Job{{ID: "done-1", Account: "demo", State: ledger.StateSucceeded, JobOutcome: &ledger.JobOutcome{Message: hostile}}},
		Hosts: []client.HostStatus{{Host: "sim-1", Simulated: true, GPUs: 1, Claimed: 1,
			Devices: []wire.Device{{UUID: "GPU-1", Model: hostile, Healthy: true, Job: "r1", Attempt: 1}}}},
		Accounts:  accountRows([]*ledger.Account{{ID: "demo", Balance: 100, Reserved: 5, Weight: 1, RunningGPUs: 1}}, nil),
		Events:    []eventRow{{Kind: client.EventJob, Account: "demo", Job: "r1", Type: "started", Detail: hostile}},
		Following: true, LeaderErr: hostile},
		Usage: usageView{Since: now, Charts: []barChart{stackedBars("GPU hours", hostile, []string{"01-01", "01-02"},
			map[string][]float64{hostile: {1, 2}})}}}
	page := render(t, s, "dashboard", v)
	checkEscaped(t, page)
	if n := strings.Count(page, "<script"); n != 1 {
		t.Errorf("the dashboard has %d script elements, want 1 (its own)", n)
	}
	if !strings.Contains(page, "go-nvml mock devices, not real hardware") || !strings.Contains(page, ">simulated<") {
		t.Errorf("the simulated host is not labelled simulated:\n%s", page)
	}
}

func TestStackedBars(t *testing.T) {
	c := stackedBars("t", "u", []string{"a", "b"}, map[string][]float64{"x": {1, 0}, "y": {3, 2}})
	// Two bars on day a (x, then y on top), one on day b; the scale is 5.
	if len(c.Bars) != 3 {
		t.Fatalf("stackedBars made %d bars, want 3: %+v", len(c.Bars), c.Bars)
	}
	plotH := float64(chartH - padT - padB)
	for i, want := range []float64{1, 3, 2} {
		if got := c.Bars[i].H; got != plotH*want/5 {
			t.Errorf("bar %d height = %v, want %v (value %v of a scale of 5)", i, got, plotH*want/5, want)
		}
	}
	if c.Bars[1].Y+c.Bars[1].H != c.Bars[0].Y {
		t.Errorf("y's bar on day a starts at %v, not on top of x's at %v", c.Bars[1].Y+c.Bars[1].H, c.Bars[0].Y)
	}
	if c.Empty || !stackedBars("t", "u", []string{"a"}, nil).Empty {
		t.Errorf("Empty is wrong: %v for data, want false; want true for none", c.Empty)
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tc := range []struct{ in, want float64 }{{0, 0}, {0.3, 0.5}, {1, 1}, {1.2, 2}, {4, 5}, {7, 10}, {120, 200}} {
		if got := niceCeil(tc.in); got != tc.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestNewNeedsAClient(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("New(Config{}) = nil error, want one naming Client")
	}
}

func TestArgv(t *testing.T) {
	got := argv([]string{"sh", "-c", "echo 'hi' there", "", "a=b"})
	want := `sh -c 'echo '\''hi'\'' there' '' a=b`
	if got != want {
		t.Errorf("argv = %s, want %s", got, want)
	}
}

func TestRowOf(t *testing.T) {
	for _, tc := range []struct {
		ev         client.Event
		typ, about string
	}{
		{client.Event{Kind: client.EventJob, Account: "demo", Job: "j1",
			Body: []byte(`{"v":1,"type":"succeeded","seq":5,"job":"j1","account":"demo","attempt":1,"host":"sim-1","reason":"","message":"exited 0","charged":20,"balance":980,"available":980}`)},
			"succeeded", "attempt 1, on sim-1, charged 20, exited 0"},
		{client.Event{Kind: client.EventAccount, Account: "demo",
			Body: []byte(`{"v":1,"type":"granted","seq":6,"account":"demo","op_id":"g1","op":"grant","reason":"","message":"","balance":1100,"reserved":20,"available":1080}`)},
			"granted", "op grant; balance 1100, reserved 20, available 1080"},
		{client.Event{Kind: client.EventInvalid, Account: "demo",
			Body: []byte(`{"v":1,"type":"rejected","seq":7,"reason":"invalid","message":"bad json"}`)},
			"rejected", "invalid: bad json"},
		{client.Event{Kind: client.EventJob, Account: "demo", Job: "j1", Body: []byte(`{"v":2}`)}, "?", ""},
	} {
		r := rowOf(tc.ev)
		if r.Type != tc.typ || tc.about != "" && r.Detail != tc.about || tc.typ == "?" && r.Detail == "" {
			t.Errorf("rowOf(%s) = type %q, detail %q; want %q, %q", tc.ev.Body, r.Type, r.Detail, tc.typ, tc.about)
		}
	}
}

// The recent events keep the last RecentEvents, newest first; a page that
// falls behind by more than its buffer is dropped, not waited for; a job's
// end makes the next usage report a fresh read.
func TestPublish(t *testing.T) {
	s, err := New(Config{Client: &client.Client{}, RecentEvents: 3})
	if err != nil {
		t.Fatal(err)
	}
	slow := s.subscribe()
	for i := range subscriberBuffer + 1 {
		typ := "started"
		if i == 4 {
			typ = "succeeded"
		}
		s.publish(eventRow{StreamSeq: uint64(i + 1), Kind: client.EventJob, Type: typ})
		if stale := s.usageStale; stale != (i >= 4) {
			t.Errorf("after event %d (%s), the usage report is stale = %v", i+1, typ, stale)
		}
	}
	recent, _, _ := s.recentEvents()
	if len(recent) != 3 || recent[0].StreamSeq != subscriberBuffer+1 || recent[2].StreamSeq != subscriberBuffer-1 {
		t.Errorf("recent events = %+v, want the last 3, newest first", recent)
	}
	n := 0
	for range slow {
		n++
	}
	if n != subscriberBuffer {
		t.Errorf("the slow subscriber got %d events before its channel closed, want %d", n, subscriberBuffer)
	}
	s.unsubscribe(slow) // already dropped: no double close
}
