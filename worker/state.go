package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// startedLog remembers, on local disk, every attempt this host has started,
// so that after a restart a redelivered dispatch of an attempt that already
// ran here is not run a second time. (That attempt shows up missing from the
// new heartbeat, and the scheduler declares it lost and retries it.)
//
// On disk it is a file of JSON lines: a header naming the installation,
// then one line per started attempt, appended and flushed to disk (one
// small write and one fdatasync, shared by the attempts of orders that
// arrived together) before the attempt is reported started.
// The file is rewritten whole only to compact it: when it is opened and
// must be (it drops a torn last line, see openStartedLog), when it is
// bound to another installation, and when expired lines make up most of
// it.
type startedLog struct {
	path string
	keep time.Duration

	mu           sync.Mutex
	installation string                // the header's; "" before the first bind of a new log
	started      map[Attempt]time.Time // attempt → when it started
	f            *os.File              // the file, open for appending
	closed       bool                  // close was called: adds fail
	// stale says the file may not take an append as it is (an append
	// failed and may have left part of a line, or a compaction failed
	// after its rename, leaving f on the old file): the next add compacts
	// first, writing the whole log anew.
	stale bool
	lines int // attempt lines in the file, live or expired
	adds  int // attempts added since the last expiry pass
	syncs int // appends flushed to disk, for tests
	// warn is told of a compaction that failed after the attempt it
	// followed was recorded (add still succeeds); nil: not told.
	warn func(error)
}

// startedHeader is the log's first line.
type startedHeader struct {
	// Installation is the orders stream the attempts came from. Attempts
	// of another installation say nothing about this one's: job ids are
	// chosen by users and come back when the streams are set up anew.
	Installation string `json:"installation"`
}

// startedLine is one started attempt.
type startedLine struct {
	Job     string    `json:"job"`
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
}

// legacyStartedFile is the form the log had before it was appended to: one
// JSON object, rewritten whole on each start, in started.json beside the
// log. openStartedLog takes its entries over and removes it.
type legacyStartedFile struct {
	Installation string               `json:"installation"`
	Started      map[string]time.Time `json:"started"` // "job/attempt" → when it started
}

// legacyStartedName is the old file's name in the state directory.
const legacyStartedName = "started.json"

// Expired lines are looked for every expiryEvery adds, and the file is
// compacted when it holds more than twice its live lines and at least
// compactMin lines.
const (
	expiryEvery = 4096
	compactMin  = 4096
)

// openStartedLog reads the log at path, creating its directory, and
// opens it for appending. It rewrites the file (see compact) only when it
// must or should: when there is none, or none with a header yet, when a
// torn last line was dropped (an append must not run into it), when it
// takes over the old form of the log, and when expired lines make up most
// of it. The directory is the worker's own, mode 0700, so no job
// can read, replace or fill it (one that is not the worker's is refused).
// Entries are kept for keep (see add).
//
// A last line that cannot be read is dropped: it is a write that a crash
// cut short, and add had not returned, so its attempt was never reported
// started nor run. Any other line that cannot be read makes the log
// corrupt, and it is refused.
func openStartedLog(path string, keep time.Duration) (*startedLog, error) {
	l := &startedLog{path: path, keep: keep, started: map[Attempt]time.Time{}}
	dir := filepath.Dir(path)
	if err := ownDir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("worker state directory: %w", err)
	}
	legacy := filepath.Join(dir, legacyStartedName)
	hadLegacy, err := l.readLegacy(legacy)
	if err != nil {
		return nil, err
	}
	whole, err := l.read()
	if err != nil {
		return nil, err
	}
	l.expire(time.Now())
	if !whole || hadLegacy || (l.lines >= compactMin && l.lines > 2*len(l.started)) {
		if err := l.compact(); err != nil {
			return nil, err
		}
	} else {
		f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open worker state: %w", err)
		}
		l.f = f
	}
	if hadLegacy {
		// Its entries are in the compacted log, on disk, by now.
		if err := os.Remove(legacy); err != nil {
			return nil, errors.Join(fmt.Errorf("remove the old worker state %s: %w", legacy, err), l.close())
		}
	}
	return l, nil
}

// readLegacy adds the entries of the old form of the log at path, if
// there is one, and reports whether there was.
func (l *startedLog) readLegacy(path string) (bool, error) {
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read worker state %s: %w", path, err)
	}
	var old legacyStartedFile
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&old); err != nil {
		return false, fmt.Errorf("worker state %s is corrupt (%v); move it away to start afresh", path, err)
	}
	l.installation = old.Installation
	for k, at := range old.Started {
		var a Attempt
		i := bytes.LastIndexByte([]byte(k), '/')
		if _, err := fmt.Sscanf(k[i+1:], "%d", &a.N); i < 0 || err != nil {
			return false, fmt.Errorf("worker state %s is corrupt (entry %q); move it away to start afresh", path, k)
		}
		a.Job = k[:i]
		l.started[a] = at
	}
	return true, nil
}

// read adds the log file's entries, counts its attempt lines in l.lines,
// and reports whether the file is whole: there is one, with its header,
// and no torn last line. A log whose installation differs from the legacy
// file's read before it (a crash between the two) is the newer and wins,
// with the legacy entries kept: refusing an attempt that could have run
// is always safe.
func (l *startedLog) read() (bool, error) {
	data, err := os.ReadFile(l.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read worker state %s: %w", l.path, err)
	}
	corrupt := func(line int, err error) error {
		return fmt.Errorf("worker state %s is corrupt (line %d: %v); move it away to start afresh", l.path, line, err)
	}
	lines := bytes.Split(data, []byte{'\n'})
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1] // the newline that ends the last line
	}
	header, n := false, 0
	for i, line := range lines {
		last := i == len(lines)-1
		var err error
		if i == 0 {
			var h startedHeader
			if err = decodeStrict(line, &h); err == nil {
				l.installation = h.Installation
				header = true
				continue
			}
		} else {
			var s startedLine
			if err = decodeStrict(line, &s); err == nil && (s.Job == "" || s.Attempt < 1) {
				err = fmt.Errorf("no job or attempt in %q", line)
			}
			if err == nil {
				a := Attempt{s.Job, s.Attempt}
				if at, ok := l.started[a]; !ok || s.At.After(at) {
					l.started[a] = s.At
				}
				n++
				continue
			}
		}
		if last && i > 0 {
			l.lines = n
			return false, nil // torn by a crash: see openStartedLog
		}
		return false, corrupt(i+1, err)
	}
	l.lines = n
	return header && len(data) > 0 && data[len(data)-1] == '\n', nil
}

func decodeStrict(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one value on the line")
	}
	return nil
}

// bind ties the log to installation. A log of another installation is
// emptied, and bind returns how many entries it dropped.
func (l *startedLog) bind(installation string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.installation == installation {
		return 0, nil
	}
	dropped := len(l.started)
	l.installation, l.started = installation, map[Attempt]time.Time{}
	return dropped, l.compact()
}

// has reports whether a was started here before.
func (l *startedLog) has(a Attempt) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.started[a]
	return ok
}

// add records that a starts now, on disk, before it is reported started:
// one line appended and flushed to disk. Entries older than keep are
// dropped now and then: no dispatch is redelivered that late.
func (l *startedLog) add(a Attempt, now time.Time) error { return l.addAll([]Attempt{a}, now) }

// addAll records that every attempt of as starts now, as add does, with
// one append of their lines and one flush to disk (a group commit: orders
// that arrive together wait on the disk once). When it returns nil every
// one is on disk; when it fails none may start, though some of the lines
// may have reached the disk (a crash leaves whole lines of attempts that
// then never ran, which a restart refuses to run: always safe).
func (l *startedLog) addAll(as []Attempt, now time.Time) error {
	var line []byte
	for _, a := range as {
		b, err := json.Marshal(startedLine{Job: a.Job, Attempt: a.N, At: now.UTC()})
		if err != nil {
			return err
		}
		line = append(append(line, b...), '\n')
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return errors.New("write worker state: the record of started attempts is closed")
	}
	if l.stale || l.f == nil {
		if err := l.compact(); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(line); err != nil {
		// What reached the file may be part of a line, which the next
		// append would run into: write the whole log anew before any.
		l.stale = true
		return errors.Join(fmt.Errorf("write worker state: %w", err), l.compact())
	}
	l.syncs++
	if err := datasync(l.f); err != nil {
		l.stale = true
		return errors.Join(fmt.Errorf("write worker state: %w", err), l.compact())
	}
	for _, a := range as {
		l.started[a] = now
	}
	l.lines += len(as)
	l.adds += len(as)
	if l.adds >= expiryEvery {
		l.adds = 0
		l.expire(now)
		if l.lines >= compactMin && l.lines > 2*len(l.started) {
			// The record is on disk already, and the attempt may
			// start: a failed compaction leaves the longer file,
			// which is still right (or, failed after its rename,
			// leaves the log stale, and the next add compacts first).
			if err := l.compact(); err != nil && l.warn != nil {
				l.warn(fmt.Errorf("compact worker state: %w", err))
			}
		}
	}
	return nil
}

// expire drops the entries older than keep. l.mu is held, or l is not
// shared yet.
func (l *startedLog) expire(now time.Time) {
	for a, at := range l.started {
		if now.Sub(at) > l.keep {
			delete(l.started, a)
		}
	}
}

// compact replaces the file with the log's live entries, atomically and
// durably: the data reaches the disk before the rename, and the rename
// before compact returns, so a power loss cannot lose a record; then it
// opens the new file for appending. l.mu is held, or l is not shared yet.
func (l *startedLog) compact() error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if err := enc.Encode(startedHeader{Installation: l.installation}); err != nil {
		return err
	}
	for a, at := range l.started {
		if err := enc.Encode(startedLine{Job: a.Job, Attempt: a.N, At: at.UTC()}); err != nil {
			return err
		}
	}
	tmp := l.path + ".tmp"
	if err := writeSynced(tmp, buf.Bytes()); err != nil {
		return fmt.Errorf("write worker state: %w", err)
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return fmt.Errorf("write worker state: %w", err)
	}
	// From here f is on a file that no longer has the name: until the new
	// one is open, nothing may be appended to it.
	l.stale = true
	if err := syncDir(filepath.Dir(l.path)); err != nil {
		return fmt.Errorf("write worker state: %w", err)
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open worker state: %w", err)
	}
	if l.f != nil {
		_ = l.f.Close() // replaced: every write to it was synced
	}
	l.f, l.lines, l.stale = f, len(l.started), false
	return nil
}

// close closes the file; adds fail after it.
func (l *startedLog) close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.f == nil {
		l.closed = true
		return nil
	}
	err := l.f.Close()
	l.f, l.closed = nil, true
	return err
}

// writeSynced writes data to a file at path and flushes it to disk.
func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return errors.Join(err, f.Close())
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// syncDir flushes dir's entries, a rename among them, to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		return errors.Join(err, d.Close())
	}
	return d.Close()
}
