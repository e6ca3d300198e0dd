package worker

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestSharedWalkRereadsWhatChangedOrHeldTheUids: a walk reads again a
// directory it read before only when its entries changed or it held an
// entry of a uid being cleaned; a file of a uid left in a directory that
// has not changed since an earlier walk (for another uid) is still found,
// and so is a file new in a subdirectory of a directory that did not
// change.
func TestSharedWalkRereadsWhatChangedOrHeldTheUids(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("making files of other uids takes root")
	}
	pool := IDRange{First: 3_100_000, Last: 3_100_009}
	w, x, y := pool.First, pool.First+1, pool.First+2
	root := t.TempDir()
	mk := func(path string, uid uint32, dir bool) {
		t.Helper()
		var err error
		if dir {
			err = os.Mkdir(path, 0o777)
		} else {
			err = os.WriteFile(path, []byte("x"), 0o644)
		}
		if err == nil {
			err = errors.Join(os.Chmod(path, 0o777), os.Lchown(path, int(uid), int(uid)))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	gone := func(path string) bool {
		_, err := os.Lstat(path)
		return errors.Is(err, os.ErrNotExist)
	}
	for _, d := range []string{"d", "e", "g", "g/sub"} {
		mk(filepath.Join(root, d), 0, true)
	}
	mk(filepath.Join(root, "d", "of-x"), x, false)
	mk(filepath.Join(root, "e", "of-w"), w, false)
	walk := sharedWalk{window: time.Nanosecond} // no directory here is too new to vouch for itself
	if _, err := walk.remove([]uint32{w}, pool, []string{root}, ""); err != nil {
		t.Fatal(err)
	}
	if !gone(filepath.Join(root, "e", "of-w")) || gone(filepath.Join(root, "d", "of-x")) {
		t.Fatal("the walk for w did not remove just w's file")
	}
	// d has not changed since; g has not either, but g/sub has.
	mk(filepath.Join(root, "g", "sub", "of-y"), y, false)
	if _, err := walk.remove([]uint32{x, y}, pool, []string{root}, ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d/of-x", "g/sub/of-y"} {
		if !gone(filepath.Join(root, p)) {
			t.Errorf("%s outlived the walk for its uid", p)
		}
	}
	if walk.seen[filepath.Join(root, "g")] == nil || walk.seen[filepath.Join(root, "g", "sub")] == nil {
		t.Error("the walk forgot directories it read")
	}
}

// TestSharedWalkNamesTheUIDsItCouldNotClean: a walk whose removal of one
// uid's file fails names that uid, and the uid whose file is left inside
// that uid's directory, as not cleaned, and no other: the uid whose files
// were all removed is clean. A failure that says nothing of whose files
// are where (a shared directory that cannot be looked at) names every uid.
func TestSharedWalkNamesTheUIDsItCouldNotClean(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("making files of other uids takes root")
	}
	pool := IDRange{First: 3_100_100, Last: 3_100_109}
	x, y, z := pool.First, pool.First+1, pool.First+2
	root := t.TempDir()
	own := func(path string, uid uint32) {
		t.Helper()
		if err := os.Lchown(path, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
	}
	// x's directory, opened to all, holds a file of y that cannot be
	// removed; z's file can.
	xdir := filepath.Join(root, "of-x")
	if err := os.Mkdir(xdir, 0o777); err != nil {
		t.Fatal(err)
	}
	own(xdir, x)
	stuck := filepath.Join(xdir, "of-y")
	if err := os.WriteFile(stuck, []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	own(stuck, y)
	immutable(t, stuck)
	zfile := filepath.Join(root, "of-z")
	if err := os.WriteFile(zfile, []byte("z"), 0o644); err != nil {
		t.Fatal(err)
	}
	own(zfile, z)

	var walk sharedWalk
	failed, err := walk.remove([]uint32{x, y, z}, pool, []string{root}, "")
	if err == nil {
		t.Fatal("the walk removed an immutable file")
	}
	if !slices.Equal(failed, []uint32{x, y}) {
		t.Errorf("the walk could not clean %v, want [%d %d] (x, whose directory is left, and y, whose file is in it): %v", failed, x, y, err)
	}
	if _, err := os.Lstat(zfile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("z's file outlived the walk: %v", err)
	}

	// A shared directory under a file cannot be looked at.
	blocker := filepath.Join(t.TempDir(), "blocker")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	failed, err = walk.remove([]uint32{z}, pool, []string{filepath.Join(blocker, "tmp")}, "")
	if err == nil || !slices.Equal(failed, []uint32{z}) {
		t.Errorf("a walk that could not look at its shared directory could not clean %v (%v), want [%d]", failed, err, z)
	}
}

// immutable makes path immutable (chattr +i: not even root may remove it)
// until the test ends, or skips the test where the file system cannot.
func immutable(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("chattr", "+i", path).CombinedOutput(); err != nil {
		t.Skipf("chattr +i: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return // removed once it could be
		}
		if out, err := exec.Command("chattr", "-i", path).CombinedOutput(); err != nil {
			t.Errorf("chattr -i %s: %v: %s", path, err, out)
		}
	})
}
