// Tests for the v1 subject contract: tokens that would break routing are
// refused, every subject a component publishes lands in exactly the stream
// meant to hold it, and parsing inverts building.
package subjects

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckToken(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want bool
	}{
		{"vision", true},
		{"train-42", true},
		{"A_b-9", true},
		{strings.Repeat("x", MaxTokenLen), true},
		{"", false},
		{strings.Repeat("x", MaxTokenLen+1), false},
		{"a.b", false},
		{"a*", false},
		{">", false},
		{"a b", false},
		{"a\tb", false},
		{"a\n", false},
		{"é", false},
		{"a/b", false},
		{"$JS", false},
	}
	for _, tt := range tests {
		err := CheckToken("account", tt.in)
		if got := err == nil; got != tt.want {
			t.Errorf("CheckToken(%q) = %v, want ok=%v", tt.in, err, tt.want)
		}
		if err != nil && !errors.Is(err, ErrBadToken) {
			t.Errorf("CheckToken(%q) = %v, want it to wrap ErrBadToken", tt.in, err)
		}
	}
}

func TestKVSubject(t *testing.T) {
	t.Parallel()
	if got, want := KVSubject(Default.LedgerBucket(), AccountKey("a")), "$KV.gpuq_ledger.account.a"; got != want {
		t.Errorf("KVSubject = %q, want %q", got, want)
	}
}

func TestNewRejectsBadPrefix(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a.b", "gpu q", "x>"} {
		if _, err := New(p); err == nil {
			t.Errorf("New(%q) = nil error, want an error", p)
		}
	}
}

func TestBuildersPanicOnBadToken(t *testing.T) {
	t.Parallel()
	builders := map[string]func(){
		"Submit":   func() { Default.Submit("a.b") },
		"Report":   func() { Default.Report("h*") },
		"Dispatch": func() { Default.Dispatch(">") },
		"JobEvent": func() { Default.JobEvent("ok", "bad job") },
		"Log":      func() { Default.Log("a", "", "h") },
		"LogHost":  func() { Default.Log("a", "j", "h.1") },
		"JobLogs":  func() { Default.JobLogs("a*", "j") },
		"JobKey":   func() { JobKey("j.1") },
	}
	for name, build := range builders {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a bad token did not panic", name)
				}
			}()
			build()
		}()
	}
}

// TestEverySubjectLandsInItsStream checks, for every subject each component
// publishes, that it matches the filters of the stream meant to store it and
// of no other stream. A subject outside every filter would be dropped by
// JetStream (no stream, no ack); one inside two would be stored twice.
func TestEverySubjectLandsInItsStream(t *testing.T) {
	t.Parallel()
	for _, prefix := range []string{"gpuq", "team-b"} {
		n := MustNew(prefix)
		type pub struct {
			component, subject, stream string
		}
		pubs := []pub{
			{"pipeline", n.Submit("vision"), n.CmdStream()},
			{"pipeline", n.Cancel("vision"), n.CmdStream()},
			{"pipeline", n.Modify("vision"), n.CmdStream()},
			{"admin", n.Admin("vision"), n.CmdStream()},
			{"worker", n.Report("gpu-host-1"), n.CmdStream()},
			{"worker", n.Log("vision", "train-42", "gpu-host-1"), n.LogsStream()},
			{"scheduler", n.Sched(SchedDispatch), n.CmdStream()},
			{"scheduler", n.Sched(SchedLost), n.CmdStream()},
			{"scheduler", n.Sched(SchedUnplaceable), n.CmdStream()},
			{"scheduler", n.Sched(SchedAdmit), n.CmdStream()},
			{"scheduler", n.Sched(SchedArchive), n.CmdStream()},
			{"scheduler", n.History("vision", "train-42"), n.HistoryStream()},
			{"scheduler", n.History("history", "job"), n.HistoryStream()},
			{"admin", n.Config(ConfigPricing), n.CmdStream()},
			{"scheduler", n.ConfigEvent(), n.EventsStream()},
			{"scheduler", n.Dispatch("gpu-host-1"), n.DispatchStream()},
			{"scheduler", n.JobEvent("vision", "train-42"), n.EventsStream()},
			{"scheduler", n.AccountEvent("vision"), n.EventsStream()},
			{"scheduler", n.InvalidEvent("vision"), n.EventsStream()},
			{"scheduler", n.UnaddressedEvent(), n.EventsStream()},
			{"scheduler", n.Journal("vision"), n.JournalStream()},
			// An account named like a subject keyword still routes correctly.
			{"scheduler", n.JobEvent("invalid", "job"), n.EventsStream()},
			{"scheduler", n.AccountEvent("account"), n.EventsStream()},
		}
		for _, p := range pubs {
			var in []string
			for _, s := range n.Streams() {
				for _, f := range s.Subjects {
					if Match(f, p.subject) {
						in = append(in, s.Name)
						break
					}
				}
			}
			if len(in) != 1 || in[0] != p.stream {
				t.Errorf("%s publishes %q: stored in streams %v, want exactly [%s]", p.component, p.subject, in, p.stream)
			}
		}
	}
}

// TestEventSubjectsDoNotCollide checks that the per-account event subjects of
// one account are never matched by another account's filters.
func TestEventSubjectsDoNotCollide(t *testing.T) {
	t.Parallel()
	n := Default
	subs := []string{n.JobEvent("a", "j"), n.AccountEvent("a"), n.InvalidEvent("a"), n.UnaddressedEvent(), n.ConfigEvent(), n.Journal("a")}
	if Match(n.JobEvents("b"), subs[0]) {
		t.Errorf("JobEvents(b) matches %q", subs[0])
	}
	if !Match(n.JobEvents("a"), subs[0]) {
		t.Errorf("JobEvents(a) does not match %q", subs[0])
	}
	for _, s := range subs[1:] {
		if Match(n.JobEvents("a"), s) {
			t.Errorf("JobEvents(a) matches non-job subject %q", s)
		}
	}
}

// TestLogSubjects checks that one account's or one job's log filter never
// matches another's output, that a job's filter matches every host's chunks,
// and that parsing inverts building.
func TestLogSubjects(t *testing.T) {
	t.Parallel()
	n := Default
	subj := n.Log("vision", "train-42", "gpu-host-1")
	if subj != "gpuq.log.vision.train-42.gpu-host-1" {
		t.Errorf("Log = %q", subj)
	}
	for filter, want := range map[string]bool{
		n.JobLogs("vision", "train-42"): true,
		n.AccountLogs("vision"):         true,
		n.LogFilter():                   true,
		n.JobLogs("nlp", "train-42"):    false,
		n.JobLogs("vision", "train-4"):  false,
		n.AccountLogs("nlp"):            false,
		n.AccountLogs("vision-2"):       false,
	} {
		if Match(filter, subj) != want {
			t.Errorf("Match(%q, %q) = %v, want %v", filter, subj, !want, want)
		}
	}
	// An account named like another's job still gets only its own output.
	if Match(n.AccountLogs("train-42"), n.Log("vision", "train-42", "h")) {
		t.Error("an account's log filter matched another account's job named like it")
	}
	got, err := n.ParseLog(subj)
	if err != nil || got != (LogSubject{Account: "vision", Job: "train-42", Host: "gpu-host-1"}) {
		t.Errorf("ParseLog(%q) = %+v, %v", subj, got, err)
	}
	for subject, want := range map[string]error{
		"gpuq.log.train-42":  ErrBadSubject,
		"gpuq.log.a.j":       ErrBadSubject,
		"gpuq.log.a.j.h.x":   ErrBadSubject,
		"other.log.a.j.h":    ErrBadSubject,
		"gpuq.log.a.j\xe9.h": ErrBadToken,
		"gpuq.log.a.j.h:1":   ErrBadToken,
		"gpuq.log.a.j." + "": ErrBadToken,
	} {
		if _, err := n.ParseLog(subject); !errors.Is(err, want) {
			t.Errorf("ParseLog(%q) = %v, want %v", subject, err, want)
		}
	}
}

func TestParseCmd(t *testing.T) {
	t.Parallel()
	n := Default
	good := map[string]Cmd{
		n.Submit("vision"):        {KindSubmit, "vision"},
		n.Cancel("vision"):        {KindCancel, "vision"},
		n.Modify("vision"):        {KindModify, "vision"},
		n.Admin("ops"):            {KindAdmin, "ops"},
		n.Report("h1"):            {KindReport, "h1"},
		n.Sched(SchedDispatch):    {KindSched, SchedDispatch},
		n.Sched(SchedLost):        {KindSched, SchedLost},
		n.Sched(SchedUnplaceable): {KindSched, SchedUnplaceable},
		n.Sched(SchedAdmit):       {KindSched, SchedAdmit},
		n.Config(ConfigPricing):   {KindConfig, ConfigPricing},
	}
	for subject, want := range good {
		got, err := n.ParseCmd(subject)
		if err != nil || got != want {
			t.Errorf("ParseCmd(%q) = %+v, %v, want %+v", subject, got, err, want)
		}
	}
	bad := map[string]error{
		"gpuq.cmd.submit":         ErrBadSubject,
		"gpuq.cmd.submit.a.b":     ErrBadSubject,
		"gpuq.cmd.frobnicate.a":   ErrBadSubject,
		"gpuq.cmd.sched.reboot":   ErrBadSubject,
		"other.cmd.submit.a":      ErrBadSubject,
		"gpuq.cmd.submit.caf\xe9": ErrBadToken,
		"gpuq.cmd.report.h:1":     ErrBadToken,
	}
	for subject, want := range bad {
		if _, err := n.ParseCmd(subject); !errors.Is(err, want) {
			t.Errorf("ParseCmd(%q) = %v, want %v", subject, err, want)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{AccountKey("a"), JobKey("j-1"), CheckpointKey, LeaderKey} {
		kind, id, err := ParseKey(key)
		if err != nil || kind+"."+id != key {
			t.Errorf("ParseKey(%q) = %q, %q, %v", key, kind, id, err)
		}
	}
	for _, key := range []string{"account", "job.", "host.h1", "sched.other", "account.a.b"} {
		if _, _, err := ParseKey(key); err == nil {
			t.Errorf("ParseKey(%q) = nil error, want one", key)
		}
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filter, subject string
		want            bool
	}{
		{"a.>", "a.b", true},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*.c", "a.b.c", true},
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.b", "a.b.c", false},
	}
	for _, tt := range tests {
		if got := Match(tt.filter, tt.subject); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.filter, tt.subject, got, tt.want)
		}
	}
}

// TestHistorySubjects checks that a job's history subject parses back, lies
// under its account's filter and the by-id filter, and under no other
// account's.
func TestHistorySubjects(t *testing.T) {
	t.Parallel()
	n := Default
	s := n.History("vision", "train-42")
	if a, j, err := n.ParseHistory(s); err != nil || a != "vision" || j != "train-42" {
		t.Errorf("ParseHistory(%q) = %q, %q, %v", s, a, j, err)
	}
	for _, f := range []string{n.AccountHistory("vision"), n.JobHistory("train-42"), n.HistoryFilter(), n.AllHistory()} {
		if !Match(f, s) {
			t.Errorf("%q does not match filter %q", s, f)
		}
	}
	if Match(n.AccountHistory("nlp"), s) || Match(n.JobHistory("train-4"), s) {
		t.Errorf("%q matches another account's or job's filter", s)
	}
	for _, bad := range []string{"gpuq.history.vision", "gpuq.history.vision.a.b", "gpuq.event.vision.j"} {
		if _, _, err := n.ParseHistory(bad); !errors.Is(err, ErrBadSubject) {
			t.Errorf("ParseHistory(%q) = %v, want ErrBadSubject", bad, err)
		}
	}
}
