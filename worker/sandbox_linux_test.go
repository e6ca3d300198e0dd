//go:build linux

package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuq/gpuq/ledger"
)

// TestSandboxRecycledDirectoryIsFresh: an attempt's directory is kept as a
// spare for the next attempt once it is emptied and made as a new one is
// (see recycle). Whatever the first attempt did to it (files, a hidden
// subdirectory, its mode opened to all, an extended attribute) the next
// attempt gets the same directory empty, mode 0700, without the attribute.
// With a pool it gets a new directory of its own instead (see recycle):
// one inode handed from uid to uid would let a descriptor opened by one
// attempt's uid list what a later one makes.
func TestSandboxRecycledDirectoryIsFresh(t *testing.T) {
	t.Parallel()
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			bus := newFakeBus()
			f, cfg := startSandboxed(t, m, bus, 1, nil)
			// Each attempt waits for the test to look at its directory
			// and drop a file named go in it.
			wait := `while [ ! -e go ]; do sleep 0.02; done; rm go`
			look := func(job string) (os.FileInfo, string) {
				t.Helper()
				dir := filepath.Join(cfg.JobRoot, job+".1")
				deadline := time.Now().Add(20 * time.Second)
				for {
					if ents, err := os.ReadDir(dir); err == nil && slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == "ready" }) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s never became ready", job)
					}
					time.Sleep(10 * time.Millisecond)
				}
				fi, err := os.Stat(dir)
				if err != nil {
					t.Fatal(err)
				}
				return fi, dir
			}
			bus.sendOrder(t, dispatchOrder("first", 1, 1, "sh", "-c",
				`mkdir -p .hide/deep && echo secret > .hide/deep/f && echo secret > notes && chmod 0777 . && touch ready && `+wait))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("report %+v, want started", r)
			}
			fi1, dir1 := look("first")
			xattr := syscall.Setxattr(dir1, "user.gpuq-test", []byte("secret"), 0)
			if err := os.WriteFile(filepath.Join(dir1, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if r := bus.nextReport(t); r.Type != ledger.ReportDone || r.ExitCode != 0 {
				t.Fatalf("report %+v, want done with exit 0", r)
			}
			bus.sendOrder(t, dispatchOrder("second", 1, 1, "sh", "-c", `ls -A; touch ready && `+wait))
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("report %+v, want started", r)
			}
			fi2, dir2 := look("second")
			f.w.jobs.mu.Lock()
			spares := f.w.jobs.spareN // spares ever kept
			f.w.jobs.mu.Unlock()
			switch {
			case m.uids.IsZero() && !os.SameFile(fi1, fi2):
				t.Errorf("the second attempt got a new directory, not the first's recycled: the test shows nothing")
			case !m.uids.IsZero() && spares > 0:
				// (A new directory may get the old one's inode number, so
				// SameFile cannot tell.)
				t.Errorf("with a pool, %d attempt directories were recycled; want none", spares)
			}
			if fi2.Mode().Perm() != 0o700 {
				t.Errorf("the recycled directory has mode %04o, want 0700", fi2.Mode().Perm())
			}
			st := fi2.Sys().(*syscall.Stat_t)
			wantUID := uint32(os.Geteuid())
			if !m.uids.IsZero() {
				wantUID = st.Uid // checked below: a pool uid, not the first attempt's
				if !m.uids.contains(st.Uid) || st.Uid == fi1.Sys().(*syscall.Stat_t).Uid {
					t.Errorf("the recycled directory belongs to uid %d; want a pool uid other than the first attempt's %d", st.Uid, fi1.Sys().(*syscall.Stat_t).Uid)
				}
			}
			if st.Uid != wantUID {
				t.Errorf("the recycled directory belongs to uid %d, want %d", st.Uid, wantUID)
			}
			if xattr == nil {
				if n, err := syscall.Getxattr(dir2, "user.gpuq-test", make([]byte, 64)); err == nil {
					t.Errorf("the recycled directory keeps the first attempt's extended attribute (%d bytes)", n)
				}
			}
			if err := os.WriteFile(filepath.Join(dir2, "go"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			r := bus.nextReport(t)
			if r.Type != ledger.ReportDone || r.ExitCode != 0 {
				t.Fatalf("report %+v, want done with exit 0", r)
			}
			if out := bus.output("second", 1); strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(out), lastLine(out))) != "" {
				t.Errorf("the second attempt found in its directory:\n%s", out)
			}
		})
	}
}

// TestSandboxFailedWalkKeepsTheUIDsOut: the uid of an ended attempt whose
// walk of the shared directories fails stays out of the pool, so no
// attempt gets it while what it left may still be there; the walk is
// retried, and the uid comes back once one succeeds.
func TestSandboxFailedWalkKeepsTheUIDsOut(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a uid pool takes root")
	}
	first := poolBase + poolNext.Add(1)*8
	state, jobs := sandboxDirs(t, mode{uids: IDRange{first, first}})
	sb, err := newSandbox(&Config{Host: "h", StateDir: state, JobRoot: jobs, JobUIDs: IDRange{first, first}})
	if err != nil {
		t.Fatal(err)
	}
	// A shared directory under a file cannot be looked at: every walk
	// fails until the file is a directory.
	blocker := filepath.Join(t.TempDir(), "blocker")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sb.shared = []string{filepath.Join(blocker, "tmp")}
	walked := make(chan error, 100)
	sb.walked = func(err error) { walked <- err }
	next := func() error {
		t.Helper()
		select {
		case err := <-walked:
			return err
		case <-time.After(20 * time.Second):
			t.Fatal("no walk within 20s")
			return nil
		}
	}
	j, err := sb.prepare(Attempt{Job: "a", N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.release(j); err != nil {
		t.Fatal(err)
	}
	if err := next(); err == nil {
		t.Fatal("the walk under a file succeeded")
	}
	if j, err := sb.prepare(Attempt{Job: "b", N: 1}); err == nil {
		t.Fatalf("an attempt got uid %d, whose walk failed", j.uid)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(blocker, 0o700); err != nil {
		t.Fatal(err)
	}
	for next() != nil { // the retries meanwhile
	}
	j, err = sb.prepare(Attempt{Job: "c", N: 1})
	if err != nil {
		t.Fatalf("after a walk that succeeded: %v", err)
	}
	if j.uid != first {
		t.Fatalf("attempt got uid %d, want %d", j.uid, first)
	}
	if err := sb.release(j); err != nil {
		t.Fatal(err)
	}
	sb.settle()
}

// TestSandboxWalkFailureKeepsOutOnlyItsUIDs: when the walk for the uids of
// several ended attempts cannot remove what one of them left, only that
// uid stays out of the pool; the others, whose files are gone, come back
// to it (one stuck file must not drain the pool).
func TestSandboxWalkFailureKeepsOutOnlyItsUIDs(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a uid pool takes root")
	}
	first := poolBase + poolNext.Add(1)*8
	pool := IDRange{first, first + 2}
	state, jobs := sandboxDirs(t, mode{uids: pool})
	sb, err := newSandbox(&Config{Host: "h", StateDir: state, JobRoot: jobs, JobUIDs: pool})
	if err != nil {
		t.Fatal(err)
	}
	shared := t.TempDir()
	sb.shared = []string{shared}
	walked := make(chan error, 100)
	sb.walked = func(err error) { walked <- err }
	var js []*jail
	for _, job := range []string{"a", "b", "c"} {
		j, err := sb.prepare(Attempt{Job: job, N: 1})
		if err != nil {
			t.Fatal(err)
		}
		js = append(js, j)
	}
	// The first attempt's uid leaves a file no walk can remove.
	stuck := filepath.Join(shared, "stuck")
	if err := os.WriteFile(stuck, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(stuck, int(js[0].uid), int(js[0].uid)); err != nil {
		t.Fatal(err)
	}
	immutable(t, stuck)
	// All three end before the cleaner looks: one walk for all of them.
	sb.mu.Lock()
	for _, j := range js {
		if err := os.RemoveAll(j.dir); err != nil {
			t.Fatal(err)
		}
		delete(sb.used, j.uid)
		sb.dirty = append(sb.dirty, j.uid)
	}
	sb.startCleaner()
	sb.mu.Unlock()
	select {
	case err := <-walked:
		if err == nil {
			t.Fatal("the walk removed an immutable file")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no walk within 20s")
	}
	var again []*jail
	for _, job := range []string{"d", "e"} {
		j, err := sb.prepare(Attempt{Job: job, N: 1})
		if err != nil {
			t.Fatalf("attempt %s: %v (the uids whose files were removed did not come back)", job, err)
		}
		if j.uid == js[0].uid {
			t.Fatalf("attempt %s got uid %d, whose file the walk could not remove", job, j.uid)
		}
		again = append(again, j)
	}
	if j, err := sb.prepare(Attempt{Job: "f", N: 1}); err == nil {
		t.Fatalf("attempt f got uid %d while the walk for it fails", j.uid)
	}
	// Once the file can go, a walk removes it and the uid comes back.
	if out, err := exec.Command("chattr", "-i", stuck).CombinedOutput(); err != nil {
		t.Fatalf("chattr -i: %v: %s", err, out)
	}
	for _, j := range again {
		if err := sb.release(j); err != nil {
			t.Fatal(err)
		}
	}
	sb.settle()
}
