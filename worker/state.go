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
type startedLog struct {
	path string
	keep time.Duration

	mu   sync.Mutex
	file startedFile
}

// startedFile is the log's form on disk.
type startedFile struct {
	// Installation is the orders stream the attempts came from. Attempts
	// of another installation say nothing about this one's: job ids are
	// chosen by users and come back when the streams are set up anew.
	Installation string               `json:"installation"`
	Started      map[string]time.Time `json:"started"` // "job/attempt" → when it started
}

func startedKey(a Attempt) string { return fmt.Sprintf("%s/%d", a.Job, a.N) }

// openStartedLog reads the log at path, creating its directory. The
// directory is the worker's own, mode 0700, so no job can read, replace or
// fill it (one that is not the worker's is refused). Entries are kept for
// keep (see add).
func openStartedLog(path string, keep time.Duration) (*startedLog, error) {
	l := &startedLog{path: path, keep: keep, file: startedFile{Started: map[string]time.Time{}}}
	if err := ownDir(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("worker state directory: %w", err)
	}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return l, nil
	case err != nil:
		return nil, fmt.Errorf("read worker state %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l.file); err != nil {
		return nil, fmt.Errorf("worker state %s is corrupt (%v); move it away to start afresh", path, err)
	}
	if l.file.Started == nil {
		l.file.Started = map[string]time.Time{}
	}
	return l, nil
}

// bind ties the log to installation. A log of another installation is
// emptied, and bind returns how many entries it dropped.
func (l *startedLog) bind(installation string) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.file.Installation == installation {
		return 0, nil
	}
	dropped := len(l.file.Started)
	l.file = startedFile{Installation: installation, Started: map[string]time.Time{}}
	return dropped, l.write()
}

// has reports whether a was started here before.
func (l *startedLog) has(a Attempt) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.file.Started[startedKey(a)]
	return ok
}

// add records that a starts now, on disk, before it is reported started.
// Entries older than keep are dropped: no dispatch is redelivered that late.
func (l *startedLog) add(a Attempt, now time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.file.Started[startedKey(a)] = now
	for k, at := range l.file.Started {
		if now.Sub(at) > l.keep {
			delete(l.file.Started, k)
		}
	}
	return l.write()
}

// write replaces the file with the log, atomically and durably: the data
// reaches the disk before the rename, and the rename before write returns,
// so a power loss after the started report is stored cannot lose the
// record. l.mu is held.
func (l *startedLog) write() error {
	data, err := json.Marshal(l.file)
	if err != nil {
		return err
	}
	tmp := l.path + ".tmp"
	if err := writeSynced(tmp, data); err != nil {
		return fmt.Errorf("write worker state: %w", err)
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return fmt.Errorf("write worker state: %w", err)
	}
	if err := syncDir(filepath.Dir(l.path)); err != nil {
		return fmt.Errorf("write worker state: %w", err)
	}
	return nil
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
