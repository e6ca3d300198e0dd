package web

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
	"github.com/gpuq/gpuq/wire"
)

// readTimeout bounds the reads of one page.
const readTimeout = 10 * time.Second

// maxExplained is the most waiting jobs the dashboard asks why of (three
// key reads each); maxRecentJobs the most finished jobs it lists.
const (
	maxExplained  = 50
	maxRecentJobs = 20
)

// maxOutputBytes is the most output a job page shows; past it, the page
// says so and points at gpuq logs.
const maxOutputBytes = 1 << 20

// funcs are the templates' helpers. Each returns text, which the template
// escapes; none returns template.HTML.
var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("15:04:05")
	},
	"ago": func(now, t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return now.Sub(t).Round(time.Second).String() + " ago"
	},
	"pct": func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"cap": func(n int) string {
		if n == 0 {
			return "no cap"
		}
		return fmt.Sprint(n)
	},
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
	"argv": argv,
	"stateClass": func(st ledger.JobState) string {
		switch st {
		case ledger.StateSucceeded:
			return "ok"
		case ledger.StateFailed, ledger.StateRejected:
			return "bad"
		case ledger.StateRunning, ledger.StateDispatched:
			return "run"
		}
		return "wait"
	},
}

// argv writes a command line as a shell would read it back: an argument
// with anything but letters, digits and -_./=:,+@% is single-quoted.
func argv(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		plain := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)) {
				plain = false
				break
			}
		}
		if plain {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// eventRow is one event as the dashboard lists it and /events sends it.
type eventRow struct {
	StreamSeq uint64           `json:"stream_seq"`
	Time      time.Time        `json:"time"`
	Kind      client.EventKind `json:"kind"`
	Account   string           `json:"account"`
	Job       string           `json:"job"`
	Type      string           `json:"type"`
	Detail    string           `json:"detail"`
}

// rowOf describes ev in one line.
func rowOf(ev client.Event) eventRow {
	r := eventRow{StreamSeq: ev.StreamSeq, Time: ev.Time, Kind: ev.Kind, Account: ev.Account, Job: ev.Job}
	switch ev.Kind {
	case client.EventJob:
		e, err := wire.DecodeJobEvent(ev.Body)
		if err != nil {
			r.Type, r.Detail = "?", err.Error()
			break
		}
		r.Type = string(e.Type)
		var parts []string
		if e.Attempt > 0 {
			parts = append(parts, fmt.Sprintf("attempt %d", e.Attempt))
		}
		if e.Host != "" {
			parts = append(parts, "on "+e.Host)
		}
		if e.Charged != 0 {
			parts = append(parts, fmt.Sprintf("charged %d", e.Charged))
		}
		if e.Reason != "" {
			parts = append(parts, string(e.Reason))
		}
		if e.Message != "" {
			parts = append(parts, e.Message)
		}
		r.Detail = strings.Join(parts, ", ")
	case client.EventAccount:
		e, err := wire.DecodeAccountEvent(ev.Body)
		if err != nil {
			r.Type, r.Detail = "?", err.Error()
			break
		}
		r.Type = string(e.Type)
		parts := []string{fmt.Sprintf("balance %d, reserved %d, available %d", e.Balance, e.Reserved, e.Available)}
		if e.Op != "" {
			parts = append([]string{"op " + string(e.Op)}, parts...)
		}
		if e.Reason != "" {
			parts = append(parts, string(e.Reason))
		}
		if e.Message != "" {
			parts = append(parts, e.Message)
		}
		r.Detail = strings.Join(parts, "; ")
	case client.EventInvalid:
		e, err := wire.DecodeInvalidEvent(ev.Body)
		if err != nil {
			r.Type, r.Detail = "?", err.Error()
			break
		}
		r.Type, r.Detail = string(e.Type), string(e.Reason)+": "+e.Message
	case client.EventConfig:
		e, err := wire.DecodeConfigEvent(ev.Body)
		if err != nil {
			r.Type, r.Detail = "?", err.Error()
			break
		}
		r.Type, r.Detail = string(e.Type), strings.TrimSpace(e.OpID+" "+e.Message)
	}
	return r
}

// dashboardView is the whole dashboard.
type dashboardView struct {
	Live  liveView
	Usage usageView
}

// liveView is the part of the dashboard that is fetched again on every
// event.
type liveView struct {
	Now       time.Time
	Leader    *wire.SchedulerFact
	LeaderErr string
	// Status is the installation at a glance (client.Status): the lease,
	// the standbys, the checkpoint's lag and what could not be read.
	Status    *client.Status
	StatusErr string

	JobsErr    string
	Queue      []queueRow
	QueueMore  int // waiting jobs past maxExplained, not asked why
	Unseen     int // waiting jobs no published pass has looked at yet
	Running    []*ledger.Job
	Recent     []*ledger.Job
	Reserved   []*ledger.Job // jobs holding credits
	JobsTotal  int
	Foreign    int // ledger values gpuq did not write, left out
	HostsErr   string
	Hosts      []client.HostStatus
	Accounts   []accountRow
	AccountErr string
	FairNote   string

	Events    []eventRow
	Following bool
	FollowErr string
}

// queueRow is a waiting job and why it waits.
type queueRow struct {
	Job    *ledger.Job
	Why    client.Explanation
	WhyErr string
}

// accountRow is an account with its fair-share standing as far as the
// ledger shows it.
type accountRow struct {
	*ledger.Account
	WeightShare float64 // its weight over the sum of weights
	GPUShare    float64 // its running GPUs over all running GPUs
	Waiting     int
}

func (s *Server) dashboard(r *http.Request) (any, error) {
	live, err := s.live(r)
	if err != nil {
		return nil, err
	}
	usage, err := s.usagePart(r)
	if err != nil {
		return nil, err
	}
	return dashboardView{Live: live.(liveView), Usage: usage.(usageView)}, nil
}

// live reads what the live part shows. A read that fails is said on the
// page, in its section; the rest is still shown.
func (s *Server) live(r *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	v := liveView{Now: s.cfg.NowFunc()}
	v.Events, v.Following, v.FollowErr = s.recentEvents()

	if st, err := s.cfg.Client.Status(ctx); err == nil {
		v.Status = &st
	} else {
		v.StatusErr = err.Error()
	}
	if f, err := s.cfg.Client.SchedulerConfig(ctx); err == nil {
		v.Leader = &f
	} else if errors.Is(err, client.ErrNotFound) {
		v.LeaderErr = "no scheduler has published its configuration (none leads yet)"
	} else {
		v.LeaderErr = err.Error()
	}

	waiting := map[string]int{}
	if page, err := s.cfg.Client.Jobs(ctx, client.JobFilter{}); err != nil {
		v.JobsErr = err.Error()
	} else {
		v.JobsTotal, v.Foreign = len(page.Jobs), len(page.Foreign)
		var queue []*ledger.Job
		for _, l := range page.Jobs {
			j := l.Job
			switch j.State {
			case ledger.StatePending, ledger.StateHeld:
				queue = append(queue, j)
				waiting[j.Account]++
			case ledger.StateDispatched, ledger.StateRunning:
				v.Running = append(v.Running, j)
			default:
				if len(v.Recent) < maxRecentJobs {
					v.Recent = append(v.Recent, j)
				}
			}
			if j.Reserved > 0 {
				v.Reserved = append(v.Reserved, j)
			}
		}
		// The scheduler's order is its own (fair share, backfill); this is
		// priority, then age, which is how it breaks ties.
		slices.SortStableFunc(queue, func(a, b *ledger.Job) int {
			return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.SubmitSeq, b.SubmitSeq))
		})
		if len(queue) > maxExplained {
			v.QueueMore = len(queue) - maxExplained
			queue = queue[:maxExplained]
		}
		for _, j := range queue {
			row := queueRow{Job: j}
			ex, err := s.cfg.Client.Explain(ctx, j.Account, j.ID)
			if err != nil {
				row.WhyErr = err.Error()
			}
			row.Why = ex
			if ex.Status == client.NotSeen && v.Leader != nil { // with none leading, none will look soon
				v.Unseen++
			}
			v.Queue = append(v.Queue, row)
		}
	}

	if hosts, err := s.cfg.Client.Hosts(ctx); err != nil {
		v.HostsErr = err.Error()
	} else {
		v.Hosts = hosts.Hosts
	}

	if accts, err := s.cfg.Client.Accounts(ctx); err != nil {
		v.AccountErr = err.Error()
	} else {
		v.Accounts = accountRows(accts.Accounts, waiting)
	}
	v.FairNote = "The scheduler publishes no per-account fair-share usage; standing here is each account's weight share against its share of the GPUs running now."
	if v.Leader != nil {
		v.FairNote += " Past use fades with a half-life of " + v.Leader.HalfLife + "."
	}
	return v, nil
}

// accountRows adds each account's weight share and running-GPU share.
func accountRows(accts []*ledger.Account, waiting map[string]int) []accountRow {
	weights, gpus := 0, 0
	for _, a := range accts {
		weights += max(a.Weight, 1)
		gpus += a.RunningGPUs
	}
	rows := make([]accountRow, 0, len(accts))
	for _, a := range accts {
		row := accountRow{Account: a, Waiting: waiting[a.ID]}
		if weights > 0 {
			row.WeightShare = float64(max(a.Weight, 1)) / float64(weights)
		}
		if gpus > 0 {
			row.GPUShare = float64(a.RunningGPUs) / float64(gpus)
		}
		rows = append(rows, row)
	}
	return rows
}

// usageView is the usage plots.
type usageView struct {
	Since  time.Time
	Err    string
	Charts []barChart
}

func (s *Server) usagePart(r *http.Request) (any, error) {
	s.mu.Lock()
	age := time.Since(s.usageAt)
	if s.usage != nil && age < usageTTL && (!s.usageStale || age < usageMinAge) {
		v := *s.usage
		s.mu.Unlock()
		return v, nil
	}
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	now := s.cfg.NowFunc().UTC()
	today := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	since := today.AddDate(0, 0, 1-s.cfg.UsageDays)
	v := usageView{Since: since}
	rep, err := s.cfg.Client.Usage(ctx, client.UsageQuery{Since: since, By: "day"})
	if err != nil {
		v.Err = err.Error()
		return v, nil // not kept: the next page tries again
	}
	v.Charts = usageCharts(rep, since, s.cfg.UsageDays)
	s.mu.Lock()
	s.usage, s.usageAt, s.usageStale = &v, time.Now(), false
	s.mu.Unlock()
	return v, nil
}

// usageCharts plots GPU hours and credits charged by day and account.
func usageCharts(rep client.UsageReport, since time.Time, days int) []barChart {
	labels := make([]string, days)
	index := map[string]int{}
	for i := range days {
		d := since.AddDate(0, 0, i)
		labels[i] = d.Format("01-02")
		index[d.Format(time.DateOnly)] = i
	}
	hours, credits := map[string][]float64{}, map[string][]float64{}
	for _, row := range rep.Rows {
		i, ok := index[row.Group]
		if !ok {
			continue
		}
		if hours[row.Account] == nil {
			hours[row.Account], credits[row.Account] = make([]float64, days), make([]float64, days)
		}
		hours[row.Account][i] += row.GPUHours
		credits[row.Account][i] += float64(row.Charged)
	}
	return []barChart{
		stackedBars("GPU hours by day", "GPU h", labels, hours),
		stackedBars("Credits charged by day", "credits", labels, credits),
	}
}

// jobView is a job's page.
type jobView struct {
	Now       time.Time
	Job       *ledger.Job
	Archived  *wire.History // set when the job was read from the history stream
	Env       [][2]string   // sorted by name
	Why       *queueRow     // nil unless the job waits
	WhyErr    string
	Charges   []ledger.Entry
	ChargeErr string
	Output    outputView
}

// outputView is the output of the attempt the page shows, as stored when
// the page was read.
type outputView struct {
	Attempt   int
	Chunks    []outputChunk
	Count     int // chunks read, for the live stream to skip
	End       string
	Truncated bool   // the worker dropped output past its cap
	Cut       bool   // the page shows only the first maxOutputBytes
	Err       string // why there is none
}

func (s *Server) jobPage(r *http.Request) (any, error) { return s.job(r, true) }

func (s *Server) jobPart(r *http.Request) (any, error) { return s.job(r, false) }

// job reads a job's page; the output only for the whole page (the part the
// page fetches again on events leaves the output to its live stream).
func (s *Server) job(r *http.Request, output bool) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	id := r.PathValue("id")
	if err := subjects.CheckToken("job id", id); err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	j, archived, err := s.cfg.Client.Lookup(ctx, "", id)
	if errors.Is(err, client.ErrNotFound) {
		return nil, fmt.Errorf("job %s is neither in the ledger nor in its history: %w", id, errNotFound)
	}
	if err != nil {
		return nil, err
	}
	v := jobView{Now: s.cfg.NowFunc(), Job: j, Archived: archived}
	for _, k := range slices.Sorted(maps.Keys(j.Env())) {
		v.Env = append(v.Env, [2]string{k, j.Env()[k]})
	}
	if archived == nil {
		if ex, err := s.cfg.Client.Explain(ctx, j.Account, j.ID); err != nil {
			v.WhyErr = err.Error()
		} else if ex.Status != client.NotWaiting {
			v.Why = &queueRow{Job: j, Why: ex}
		}
	}
	if journal, err := s.cfg.Client.Journal(ctx, j.SubmittedAt.Add(-client.SealMargin)); err != nil {
		v.ChargeErr = err.Error()
	} else {
		for _, e := range slices.Concat(journal.Legacy, journal.Chained) {
			if e.Job == j.ID && e.Account == j.Account && !e.Time.Before(j.SubmittedAt.Add(-client.SealMargin)) {
				v.Charges = append(v.Charges, e.Entry)
			}
		}
	}
	if output {
		v.Output = s.storedOutput(ctx, j)
	}
	return v, nil
}

// storedOutput reads the output of j's latest attempt stored so far.
func (s *Server) storedOutput(ctx context.Context, j *ledger.Job) outputView {
	o := outputView{Attempt: j.Attempt}
	if j.Attempt == 0 {
		o.Err = "the job has not run yet"
		return o
	}
	size := 0
	for ch, err := range s.cfg.Client.Logs(ctx, j, client.LogOptions{}) {
		if errors.Is(err, client.ErrBadChunk) {
			continue
		}
		if err != nil {
			o.Err = err.Error()
			break
		}
		if ch.End != "" {
			o.End, o.Truncated = ch.End, ch.Truncated
			break
		}
		o.Count++
		if size += len(ch.Data); size > maxOutputBytes {
			o.Cut = true
			break
		}
		o.Chunks = append(o.Chunks, outputChunk{Stream: ch.Stream, Text: string(ch.Data)})
	}
	return o
}
