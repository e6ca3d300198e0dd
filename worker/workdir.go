package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A job may name its working directory ([ledger.Submit.Workdir]): an
// absolute path on the host, which must exist and which the job's user can
// enter. The attempt still gets its own directory as HOME and TMPDIR; only
// the working directory changes. The worker checks the workdir before it
// starts the attempt and refuses the attempt, with a rejected report that
// says why, when the check fails: the ledger charges nothing for it.

// checkWorkdir reports why j's process could not start in dir, or nil. With
// a pool, j's uid (which is also its gid, with no supplementary groups) must
// be able to search every directory from / down to dir; without one, the
// worker's own user must, as the job runs as it.
func (s *sandbox) checkWorkdir(j *jail, dir string) error {
	if dir == "" {
		return nil
	}
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("workdir %s does not exist on this host", dir)
	case err != nil:
		return fmt.Errorf("workdir %s: %v", dir, err)
	case !fi.IsDir():
		return fmt.Errorf("workdir %s is not a directory", dir)
	}
	uid, gids := os.Geteuid(), []int{os.Getegid()}
	if j.pooled {
		uid, gids = int(j.uid), []int{int(j.uid)}
	} else if more, err := os.Getgroups(); err == nil {
		gids = append(gids, more...)
	}
	if uid == 0 {
		return nil // root enters any directory
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("workdir %s: %v", dir, err)
		}
		if !searchableBy(fi, uid, gids) {
			return fmt.Errorf("workdir %s: the job's user (uid %d) cannot enter %s (mode %04o)", dir, uid, d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// searchableBy reports whether a user uid with groups gids may search the
// directory fi, by its mode bits alone (as the kernel decides without ACLs).
func searchableBy(fi fs.FileInfo, uid int, gids []int) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi.Mode().Perm()&0o001 != 0
	}
	perm := fi.Mode().Perm()
	if int(st.Uid) == uid {
		return perm&0o100 != 0
	}
	for _, g := range gids {
		if int(st.Gid) == g {
			return perm&0o010 != 0
		}
	}
	return perm&0o001 != 0
}
