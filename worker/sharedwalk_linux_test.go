package worker

import (
	"errors"
	"os"
	"path/filepath"
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
	if err := walk.remove([]uint32{w}, pool, []string{root}, ""); err != nil {
		t.Fatal(err)
	}
	if !gone(filepath.Join(root, "e", "of-w")) || gone(filepath.Join(root, "d", "of-x")) {
		t.Fatal("the walk for w did not remove just w's file")
	}
	// d has not changed since; g has not either, but g/sub has.
	mk(filepath.Join(root, "g", "sub", "of-y"), y, false)
	if err := walk.remove([]uint32{x, y}, pool, []string{root}, ""); err != nil {
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
