package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testKeep = 8 * 24 * time.Hour

func openTestLog(t *testing.T, path string) *startedLog {
	t.Helper()
	l, err := openStartedLog(path, testKeep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.close() }) // a second close is a no-op
	return l
}

// TestStartedLogSurvivesRestart: every attempt added is known to the log
// opened again on the same file (a restart), and to no log of another
// installation.
func TestStartedLogSurvivesRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "state", "started.jsonl")
	l := openTestLog(t, path)
	if _, err := l.bind("inst-1"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 10 {
		if err := l.add(Attempt{fmt.Sprintf("j%d", i), 1 + i%3}, now); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, path)
	if dropped, err := l.bind("inst-1"); err != nil || dropped != 0 {
		t.Fatalf("bind the same installation: dropped %d, %v", dropped, err)
	}
	for i := range 10 {
		if a := (Attempt{fmt.Sprintf("j%d", i), 1 + i%3}); !l.has(a) {
			t.Errorf("%s is not known after a restart", a)
		}
	}
	if a := (Attempt{"j0", 2}); l.has(a) {
		t.Errorf("%s, never added, is known", a)
	}
	// An append after the restart goes after the compacted lines.
	if err := l.add(Attempt{"late", 1}, now); err != nil {
		t.Fatal(err)
	}
	_ = l.close()
	l = openTestLog(t, path)
	if !l.has(Attempt{"late", 1}) || !l.has(Attempt{"j9", 1}) {
		t.Error("an attempt added after a restart is lost by the next")
	}
	if dropped, err := l.bind("inst-2"); err != nil || dropped != 11 {
		t.Fatalf("bind another installation: dropped %d, %v, want 11", dropped, err)
	}
	_ = l.close()
	l = openTestLog(t, path)
	if l.has(Attempt{"late", 1}) || l.installation != "inst-2" {
		t.Errorf("after a bind to another installation: installation %q, late known %v", l.installation, l.has(Attempt{"late", 1}))
	}
}

// TestStartedLogTornWrite cuts the file inside its last line, as a crash
// during an append leaves it (the append had not returned, so its attempt
// was never reported started): the log opens with every earlier attempt,
// without the torn one, and later appends read back whole. A line that
// cannot be read anywhere else is corruption, refused.
func TestStartedLogTornWrite(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "started.jsonl")
	l := openTestLog(t, path)
	if _, err := l.bind("inst"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, a := range []Attempt{{"a", 1}, {"b", 1}, {"torn", 1}} {
		if err := l.add(a, now); err != nil {
			t.Fatal(err)
		}
	}
	_ = l.close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	last := bytes.LastIndex(data[:len(data)-1], []byte{'\n'}) + 1
	// (Cut before its newline only, the line is whole and read: refusing
	// an attempt that was not reported started is safe.)
	for cut := last + 1; cut < len(data)-1; cut += 7 {
		torn := filepath.Join(t.TempDir(), "started.jsonl")
		if err := os.WriteFile(torn, data[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		l := openTestLog(t, torn)
		if !l.has(Attempt{"a", 1}) || !l.has(Attempt{"b", 1}) || l.has(Attempt{"torn", 1}) {
			t.Fatalf("cut at %d of %d: a %v, b %v, torn %v; want a and b only", cut, len(data),
				l.has(Attempt{"a", 1}), l.has(Attempt{"b", 1}), l.has(Attempt{"torn", 1}))
		}
		if err := l.add(Attempt{"next", 1}, now); err != nil {
			t.Fatal(err)
		}
		_ = l.close()
		l = openTestLog(t, torn)
		if !l.has(Attempt{"next", 1}) || !l.has(Attempt{"b", 1}) {
			t.Fatalf("cut at %d: the append after the torn line is lost", cut)
		}
		_ = l.close()
	}
	// Zeros past the end (a size written before the data) are torn too.
	zeros := filepath.Join(t.TempDir(), "started.jsonl")
	if err := os.WriteFile(zeros, append(data[:last:last], make([]byte, 40)...), 0o600); err != nil {
		t.Fatal(err)
	}
	if l := openTestLog(t, zeros); !l.has(Attempt{"b", 1}) {
		t.Error("a log ending in zeros lost its attempts")
	}
	// A bad line that is not the last one is corruption.
	bad := filepath.Join(t.TempDir(), "started.jsonl")
	lines := strings.SplitAfter(string(data), "\n")
	lines[1] = `{"job":"a","attem` + "\n"
	if err := os.WriteFile(bad, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := openStartedLog(bad, testKeep); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("open a log with a bad line in the middle: %v, want it refused as corrupt", err)
	}
}

// TestStartedLogTakesOverTheLegacyFile: the whole-file form of an older
// worker (started.json) is read, its attempts carried into the log, and
// it is removed.
func TestStartedLogTakesOverTheLegacyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	old, err := json.Marshal(legacyStartedFile{Installation: "inst",
		Started: map[string]time.Time{"j1/1": time.Now(), "with-dash/3": time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, legacyStartedName), old, 0o600); err != nil {
		t.Fatal(err)
	}
	l := openTestLog(t, filepath.Join(dir, "started.jsonl"))
	if !l.has(Attempt{"j1", 1}) || !l.has(Attempt{"with-dash", 3}) {
		t.Error("the legacy file's attempts are not known")
	}
	if dropped, err := l.bind("inst"); err != nil || dropped != 0 {
		t.Errorf("bind the legacy file's installation: dropped %d, %v", dropped, err)
	}
	if _, err := os.Stat(filepath.Join(dir, legacyStartedName)); !os.IsNotExist(err) {
		t.Errorf("the legacy file after the take-over: %v, want it gone", err)
	}
	_ = l.close()
	if l := openTestLog(t, filepath.Join(dir, "started.jsonl")); !l.has(Attempt{"with-dash", 3}) {
		t.Error("the legacy file's attempts are lost at the next restart")
	}
}

// TestStartedLogCompacts: expired attempts are dropped and the file is
// rewritten once they make up most of it, so it does not grow without
// bound; live attempts survive the compaction.
func TestStartedLogCompacts(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "started.jsonl")
	l, err := openStartedLog(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.close() }()
	if _, err := l.bind("inst"); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-2 * time.Hour)
	for i := range 3 * expiryEvery {
		// The first two thirds expire before the last third is added.
		at := start.Add(time.Duration(i) * 1500 * time.Millisecond)
		if err := l.add(Attempt{fmt.Sprintf("j%d", i), 1}, at); err != nil {
			t.Fatal(err)
		}
	}
	if l.lines >= 3*expiryEvery {
		t.Errorf("%d lines in the file after %d adds, most expired: not compacted", l.lines, 3*expiryEvery)
	}
	last := Attempt{fmt.Sprintf("j%d", 3*expiryEvery-1), 1}
	if !l.has(last) || l.has(Attempt{"j0", 1}) {
		t.Errorf("after compaction: newest known %v, oldest known %v", l.has(last), l.has(Attempt{"j0", 1}))
	}
	_ = l.close()
	l2 := openTestLog(t, path)
	if !l2.has(last) {
		t.Error("the newest attempt is lost after compaction and a restart")
	}
}

// TestStartedLogRecoversFromAFailedAppend: an append that fails (here its
// descriptor takes no writes; a full disk does the same) is refused, and
// while the log cannot be written anew (here a directory stands where its
// rewrite goes) every append is refused, never made to a file that may end
// in part of a line; once it can, the next append writes the whole log
// anew before it, and a restart reads back every attempt recorded.
func TestStartedLogRecoversFromAFailedAppend(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "started.jsonl")
	l := openTestLog(t, path)
	if _, err := l.bind("inst-1"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if err := l.add(Attempt{"before", 1}, now); err != nil {
		t.Fatal(err)
	}
	ro, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	good := l.f
	l.f = ro
	l.mu.Unlock()
	_ = good.Close() // test teardown of the descriptor replaced
	if err := os.Mkdir(path+".tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"failed", "refused"} {
		if err := l.add(Attempt{id, 1}, now); err == nil {
			t.Fatalf("append %s succeeded while the log could neither be appended to nor written anew", id)
		}
	}
	if err := os.Remove(path + ".tmp"); err != nil {
		t.Fatal(err)
	}
	if err := l.add(Attempt{"after", 1}, now); err != nil {
		t.Fatalf("the first append once the log can be written anew: %v", err)
	}
	_ = l.close()
	l = openTestLog(t, path)
	if !l.has(Attempt{"before", 1}) || !l.has(Attempt{"after", 1}) {
		t.Errorf("a restart lost an attempt recorded around a failed append: before %v, after %v", l.has(Attempt{"before", 1}), l.has(Attempt{"after", 1}))
	}
	if l.has(Attempt{"failed", 1}) || l.has(Attempt{"refused", 1}) {
		t.Error("a refused append is known after a restart")
	}
}

// TestStartedLogOpensWithoutARewrite: a log that is whole is opened for
// appending as it is, not written anew at every start of the worker (the
// file stays the same), and what is appended after reads back.
func TestStartedLogOpensWithoutARewrite(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "started.jsonl")
	l := openTestLog(t, path)
	if _, err := l.bind("inst"); err != nil {
		t.Fatal(err)
	}
	if err := l.add(Attempt{"a", 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	_ = l.close()
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	l = openTestLog(t, path)
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) {
		t.Error("opening a whole log wrote it anew")
	}
	if err := l.add(Attempt{"b", 1}, time.Now()); err != nil {
		t.Fatal(err)
	}
	_ = l.close()
	l = openTestLog(t, path)
	if !l.has(Attempt{"a", 1}) || !l.has(Attempt{"b", 1}) || l.installation != "inst" || l.lines != 2 {
		t.Errorf("after an append to the log as opened: a %v, b %v, installation %q, %d lines; want both, inst, 2",
			l.has(Attempt{"a", 1}), l.has(Attempt{"b", 1}), l.installation, l.lines)
	}
}

// TestStartedLogKeepsAnAttemptWhoseCompactionFailed: when the compaction
// that follows an append fails (here a directory stands where its rewrite
// goes), the attempt is recorded all the same, on disk before add
// returns, so add accepts it and the failure is only told.
func TestStartedLogKeepsAnAttemptWhoseCompactionFailed(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "started.jsonl")
	l, err := openStartedLog(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.close() }()
	var warned []error
	l.warn = func(err error) { warned = append(warned, err) }
	if _, err := l.bind("inst"); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour) // expired by the pass after the last add
	for i := range expiryEvery - 1 {
		if err := l.add(Attempt{fmt.Sprintf("old%d", i), 1}, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(path+".tmp", 0o700); err != nil {
		t.Fatal(err)
	}
	last := Attempt{"last", 1}
	if err := l.add(last, time.Now()); err != nil {
		t.Fatalf("add whose compaction failed = %v, want nil: the attempt is recorded", err)
	}
	if len(warned) != 1 {
		t.Errorf("the failed compaction was told %d times, want once", len(warned))
	}
	_ = l.close()
	l2 := openTestLog(t, path)
	if !l2.has(last) {
		t.Error("the attempt whose compaction failed is lost after a restart")
	}
}
