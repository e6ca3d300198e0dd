package worker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A job is the attacker: it must not reach the worker's credentials, the
// worker's state, or another attempt. Each attempt gets
//
//   - an environment built from [allowedEnv] only, plus the job's own
//     variables and gpuq's (which win): never the worker's NATS_* settings;
//   - a fresh directory <JobRoot>/<job>.<attempt>, mode 0700, its HOME,
//     TMPDIR and working directory, gone once the attempt ends (emptied,
//     made as a new one is, and kept under a spare name for a later
//     attempt to take: see recycle);
//   - when the worker runs as root with [Config.JobUIDs], a user and group
//     of its own from that pool, with no supplementary groups, so it cannot
//     read the worker's files (the state directory is 0700) nor another
//     attempt's, nor signal or trace the worker;
//   - a sweep that ends every process of the attempt before its GPUs are
//     freed and its done report is sent (see sandbox_linux.go for how a
//     process is known to belong to it).
//
// The worker process itself is made non-dumpable, so a process of the same
// user cannot read its /proc/<pid>/environ, mem or fds, nor ptrace it.

// IDRange is an inclusive range of user ids, each used as both the uid and
// the gid of one attempt at a time. The zero value is no range.
type IDRange struct{ First, Last uint32 }

// ParseIDRange parses "FIRST-LAST" (inclusive); "" and "none" are the zero
// range.
func ParseIDRange(s string) (IDRange, error) {
	if s == "" || s == "none" {
		return IDRange{}, nil
	}
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseUint(a, 10, 32)
	last, err2 := strconv.ParseUint(b, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return IDRange{}, fmt.Errorf("id range %q: want FIRST-LAST, e.g. 61000-61099", s)
	}
	r := IDRange{uint32(first), uint32(last)}
	return r, r.check()
}

func (r IDRange) String() string {
	if r.IsZero() {
		return "none"
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

// IsZero reports whether r is no range.
func (r IDRange) IsZero() bool { return r == IDRange{} }

func (r IDRange) contains(id uint32) bool { return !r.IsZero() && id >= r.First && id <= r.Last }

func (r IDRange) overlaps(o IDRange) bool {
	return !r.IsZero() && !o.IsZero() && r.First <= o.Last && o.First <= r.Last
}

func (r IDRange) check() error {
	switch {
	case r.IsZero():
		return nil
	case r.First == 0 || r.First > r.Last:
		return fmt.Errorf("id range %s: want 0 < FIRST <= LAST", r)
	case r.Last >= 1<<31-1:
		return fmt.Errorf("id range %s: ids must be below %d", r, uint32(1<<31-1))
	}
	return nil
}

// allowedEnv are the variables of the worker's environment a job inherits:
// where to find programs and libraries, and how to print text and times.
// Nothing else passes, so no secret the worker is given (NATS_URL with its
// password, NATS_CREDS, a cloud token) reaches a job. A job that needs more
// names it in its own env.
var allowedEnv = []string{"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"}

// defaultPath is a job's PATH when the worker has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// allowed reports whether a variable of the worker's environment passes
// to jobs: one of allowedEnv, or LC_*.
func allowed(name string) bool {
	return slices.Contains(allowedEnv, name) || strings.HasPrefix(name, "LC_")
}

// markerVar names the variable that marks an attempt's processes with the
// attempt's directory, so that a sweep without a uid per attempt finds
// processes that left the attempt's process group and tree.
const markerVar = "GPUQ_SANDBOX"

// jobEnv builds an attempt's environment: the allowed variables of base
// (the worker's), then the job's own, then gpuq's, which win (with
// GPUQ_ARRAY_ID and GPUQ_ARRAY_INDEX for a task of a job array). It is
// sorted and has one entry per name. It is built for every attempt, so it
// makes one slice and its strings, and no map: the entries are put in the
// order of who wins, sorted by name with the order kept among equal
// names, and the first of each name is kept.
func jobEnv(base []string, s Spec) []string {
	devs := strings.Join(s.Devices, ",")
	env := make([]string, 0, 12+len(s.Env)+len(base))
	env = append(env,
		"CUDA_VISIBLE_DEVICES="+devs,
		"NVIDIA_VISIBLE_DEVICES="+devs,
		"GPUQ_JOB_ID="+s.Attempt.Job,
		"GPUQ_ACCOUNT="+s.Account,
		"GPUQ_ATTEMPT="+strconv.Itoa(s.Attempt.N),
		"HOME="+s.Dir,
		"TMPDIR="+s.Dir,
		markerVar+"="+s.Dir)
	if s.ArrayID != "" {
		env = append(env, "GPUQ_ARRAY_ID="+s.ArrayID, "GPUQ_ARRAY_INDEX="+strconv.Itoa(s.ArrayIndex))
	}
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	for _, kv := range base {
		if k, _, ok := strings.Cut(kv, "="); ok && allowed(k) {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+defaultPath) // when the worker has none
	slices.SortStableFunc(env, func(a, b string) int { return strings.Compare(envName(a), envName(b)) })
	return slices.CompactFunc(env, func(a, b string) bool { return envName(a) == envName(b) })
}

// envName is the name of an environment entry NAME=value.
func envName(kv string) string {
	k, _, _ := strings.Cut(kv, "=")
	return k
}

// sandbox makes, hands out and takes back the attempts' directories and
// users. It is safe for concurrent use.
type sandbox struct {
	root string  // JobRoot
	uids IDRange // zero: jobs run as the worker's user
	keep bool    // KeepAttemptDirs
	self int     // the worker's effective uid
	// cg holds the attempts' cgroups with Config.Cgroup; nil without,
	// and then the sweep finds an attempt's processes through /proc.
	cg *cgroupTree

	mu   sync.Mutex
	free []uint32            // pool ids not in use, least recently used first
	used map[uint32]struct{} // pool ids in use
	// spare are empty directories in the root, left by attempts that
	// ended, for the next attempts to take (see recycle); spareN names
	// the next.
	spare  []string
	spareN int

	// dirty are pool ids whose attempts have ended, waiting for the walk
	// of the shared directories (see removeOwned) before they go back to
	// free: one walk takes every id released meanwhile, instead of a walk
	// per attempt. cleaning says a cleaner goroutine runs; freed is
	// signalled, on mu, when ids go back to free.
	dirty    []uint32
	cleaning bool
	freed    *sync.Cond
	hurry    chan struct{} // a prepare waits for an id: walk now
	walk     sharedWalk    // the cleaner's, which alone uses it
	shared   []string      // the directories walked: sharedDirs, unless a test sets others
	// walkErr is the last walk's failure, nil once one succeeds: the ids
	// it could not clean stay dirty, out of the pool, and are walked for
	// again.
	walkErr  error
	stopping bool // the worker stops: a walk that fails is not retried
	// walked is told of each walk's result, nil for a success; set by
	// the worker, whose outage log it feeds.
	walked func(error)
}

// maxSpare bounds the spare directories kept: more than the attempts that
// end at once are never needed.
const maxSpare = 64

// jail is one attempt's place: its directory and, with a pool, its user.
type jail struct {
	dir    string
	pooled bool
	uid    uint32  // with pooled: the attempt's uid and gid
	cg     *cgroup // with Config.Cgroup: the attempt's own, its processes' only place
}

// processes ever registered with a pool in this process, so two workers
// in one process cannot share ids (each would kill the other's jobs).
var (
	poolsMu sync.Mutex
	pools   = map[*sandbox]string{}
)

// newSandbox checks cfg's JobRoot and JobUIDs and makes the job root:
// owned by the worker, mode 0711 with a pool (the attempts' users must
// reach their own directories but list nothing), 0700 without.
func newSandbox(cfg *Config) (*sandbox, error) {
	s := &sandbox{root: filepath.Clean(cfg.JobRoot), uids: cfg.JobUIDs, keep: cfg.KeepAttemptDirs,
		self: os.Geteuid(), used: map[uint32]struct{}{}, shared: sharedDirs}
	s.freed, s.hurry = sync.NewCond(&s.mu), make(chan struct{}, 1)
	if err := s.uids.check(); err != nil {
		return nil, fmt.Errorf("worker: Config.JobUIDs: %w", err)
	}
	if cfg.JobRoot == "" {
		s.root = filepath.Clean(cfg.StateDir) + "-jobs"
		if s.pooled() && searchable(filepath.Dir(s.root)) != nil {
			// The attempts' users could not reach it; the state
			// directory names the place, so a restart finds it again.
			abs, err := filepath.Abs(cfg.StateDir)
			if err != nil {
				return nil, fmt.Errorf("worker: Config.StateDir: %w", err)
			}
			h := fnv.New32a()
			h.Write([]byte(abs))
			s.root = filepath.Join("/tmp", fmt.Sprintf("gpuq-jobs-%s-%08x", cfg.Host, h.Sum32()))
		}
	}
	if !s.uids.IsZero() {
		if !poolSupported {
			return nil, fmt.Errorf("worker: Config.JobUIDs is supported on Linux only")
		}
		if s.self != 0 {
			return nil, fmt.Errorf("worker: Config.JobUIDs %s needs the worker to run as root (it runs as uid %d); leave it out to run jobs as the worker's user", s.uids, s.self)
		}
		if err := idsUnused(s.uids); err != nil {
			return nil, fmt.Errorf("worker: Config.JobUIDs: %w", err)
		}
		for id := s.uids.First; ; id++ {
			s.free = append(s.free, id)
			if id == s.uids.Last {
				break
			}
		}
	}
	mode := fs.FileMode(0o700)
	if s.pooled() {
		mode = 0o711
	}
	if err := ownDir(s.root, mode); err != nil {
		return nil, fmt.Errorf("worker: job root: %w", err)
	}
	if s.pooled() {
		if err := searchable(s.root); err != nil {
			return nil, fmt.Errorf("worker: job root %s cannot be reached by the jobs' users: %w; choose a job root under a directory every user may search", s.root, err)
		}
	}
	if cfg.Cgroup != "" {
		cg, err := openCgroups(cfg.Cgroup)
		if err != nil {
			return nil, fmt.Errorf("worker: Config.Cgroup: %w", err)
		}
		s.cg = cg
	}
	return s, nil
}

func (s *sandbox) pooled() bool { return !s.uids.IsZero() }

// register claims the pool for this process while the worker runs.
func (s *sandbox) register(host string) error {
	if !s.pooled() {
		return nil
	}
	poolsMu.Lock()
	defer poolsMu.Unlock()
	for o, h := range pools {
		if o != s && o.uids.overlaps(s.uids) {
			return fmt.Errorf("worker %s: JobUIDs %s overlap %s of worker %s in this process; give each worker its own ids", host, s.uids, o.uids, h)
		}
	}
	pools[s] = host
	return nil
}

func (s *sandbox) unregister() {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	s.settle()
	poolsMu.Lock()
	delete(pools, s)
	poolsMu.Unlock()
}

// describe says, for the log at start, what a job can and cannot reach.
func (s *sandbox) describe(log *slog.Logger) {
	if s.cg != nil {
		log.Info("each attempt runs in a cgroup of its own, which every process it starts is born in; the sweep at its end kills them all",
			slog.String("cgroup", s.cg.root))
	}
	switch {
	case s.pooled():
		log.Info("each attempt runs as its own user and group from the pool, in its own directory",
			slog.String("job_uids", s.uids.String()), slog.String("job_root", s.root))
	case s.self == 0:
		log.Warn("jobs run as root, the worker's user (no job uid pool is set): a job can read the worker's credentials file "+
			"and state, signal it and every other job, and leave processes the worker cannot find; set a job uid pool (--job-uids)",
			slog.String("job_root", s.root))
	default:
		escape := "a process that leaves the job's process group, session and tree and clears its environment"
		if s.cg != nil {
			escape = "a process that moves itself to another cgroup"
		}
		log.Warn("jobs run as the worker's own user: a job can read whatever this user can (a credentials file included), "+
			"signal the worker and other jobs, and "+escape+" outlives the attempt; the worker's environment and memory are "+
			"hidden from jobs (it is non-dumpable). Run the worker as root with a job uid pool (--job-uids) to give each attempt its own user",
			slog.Int("uid", s.self), slog.String("job_root", s.root))
	}
}

// dirOf is attempt a's directory. Job ids are subject tokens, which are
// safe file names.
func (s *sandbox) dirOf(a Attempt) string {
	return filepath.Join(s.root, fmt.Sprintf("%s.%d", a.Job, a.N))
}

// prepare makes attempt a's directory, afresh, and with a pool gives the
// attempt a user of its own. release undoes it.
func (s *sandbox) prepare(a Attempt) (*jail, error) {
	j := &jail{dir: s.dirOf(a), pooled: s.pooled()}
	if j.pooled {
		s.mu.Lock()
		for len(s.free) == 0 {
			if s.walkErr != nil {
				err := s.walkErr
				s.mu.Unlock()
				return nil, fmt.Errorf("every job uid of %s is in use or held until what its last user left in the shared directories is removed: %w", s.uids, err)
			}
			if len(s.dirty) == 0 && !s.cleaning {
				s.mu.Unlock()
				return nil, fmt.Errorf("every job uid of %s is in use", s.uids)
			}
			s.hurryCleaner()
			s.freed.Wait() // the cleaner's walk ends
		}
		j.uid = s.free[0]
		s.free = s.free[1:]
		s.used[j.uid] = struct{}{}
		s.mu.Unlock()
	}
	// A directory left in its place (by an earlier life of this worker,
	// or kept with KeepAttemptDirs) goes first; the job root is the
	// worker's, so nobody else can put one back. It is looked for only
	// when making the directory finds one there.
	if !s.takeSpare(j.dir) {
		err := os.Mkdir(j.dir, 0o700)
		if errors.Is(err, fs.ErrExist) {
			if err = os.RemoveAll(j.dir); err == nil {
				err = os.Mkdir(j.dir, 0o700)
			}
		}
		if err != nil {
			s.giveBack(j)
			return nil, fmt.Errorf("make the attempt directory: %w", err)
		}
	}
	if j.pooled {
		if err := os.Lchown(j.dir, int(j.uid), int(j.uid)); err != nil {
			s.giveBack(j)
			return nil, errors.Join(fmt.Errorf("give the attempt directory to uid %d: %w", j.uid, err), os.Remove(j.dir))
		}
	}
	if s.cg != nil {
		cg, err := s.cg.take()
		if err != nil {
			return nil, errors.Join(err, s.release(j)) // nothing ran in it
		}
		j.cg = cg
	}
	return j, nil
}

// release takes back j once no process of it is left: its directory is
// removed (or, with KeepAttemptDirs, handed back to the worker, so no later
// user of the same uid can read it) and its uid goes back to the pool.
func (s *sandbox) release(j *jail) error {
	var err error
	if s.keep {
		if j.pooled {
			// chown keeps the mode the job gave its directory: close it too.
			err = errors.Join(os.Lchown(j.dir, s.self, os.Getegid()), os.Chmod(j.dir, 0o700))
		}
	} else if !s.recycle(j) {
		err = os.RemoveAll(j.dir)
	}
	if err != nil {
		err = fmt.Errorf("clean up the attempt directory: %w", err)
	}
	if j.cg != nil {
		err = errors.Join(err, s.cg.give(j.cg))
		j.cg = nil
	}
	if j.pooled {
		s.clean(j.uid)
	}
	return err
}

// clean hands uid, whose attempt has ended, to the cleaner: it goes back
// to the pool once what it left in the shared directories is removed.
func (s *sandbox) clean(uid uint32) {
	s.mu.Lock()
	delete(s.used, uid)
	s.dirty = append(s.dirty, uid)
	s.startCleaner()
	s.mu.Unlock()
}

// cleaner walks the shared directories for every dirty id at once, gives
// them back, and goes on while more are dirty. The ids a walk could not
// clean stay dirty, out of the pool (what their attempts left may still
// be there for the next holder to read), and are walked for again after a
// backoff, until a walk succeeds or the worker stops; the others of the
// walk go back to the pool.
func (s *sandbox) cleaner() {
	bo := retryBackoff(cleanEvery, 5*time.Second)
	for {
		s.mu.Lock()
		batch := s.dirty
		s.dirty = nil
		if len(batch) == 0 {
			s.cleaning = false
			s.freed.Broadcast()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		failed, err := batch, s.sweepPoolUIDs(batch)
		if err != nil {
			err = fmt.Errorf("kill what ended attempts left under their uids: %w", err)
		} else {
			failed, err = s.walk.remove(batch, s.uids, s.shared, s.root)
		}
		s.mu.Lock()
		for _, id := range batch {
			if !slices.Contains(failed, id) {
				s.free = append(s.free, id)
			}
		}
		s.dirty = append(failed, s.dirty...)
		s.walkErr = err
		stop := err != nil && s.stopping
		if stop {
			s.cleaning = false // the next life walks for them (see cleanAll)
		}
		s.freed.Broadcast()
		s.mu.Unlock()
		if s.walked != nil {
			s.walked(err)
		}
		if stop {
			return
		}
		// Let releases gather, unless a prepare waits for an id: a walk
		// costs what is in the shared directories (milliseconds on a
		// busy host), the same for one id as for many. After a failure
		// the next walk waits longer each time.
		wait := cleanEvery
		if err != nil {
			wait = bo.NextBackOff()
		} else {
			bo.Reset()
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.hurry:
		}
		t.Stop()
	}
}

// cleanEvery is the least time between two walks of the shared
// directories while ids are free.
const cleanEvery = 50 * time.Millisecond

// hurryCleaner asks the cleaner for its next walk now.
func (s *sandbox) hurryCleaner() {
	select {
	case s.hurry <- struct{}{}:
	default:
	}
}

// cleanAll hands every free pool id to the cleaner, as if each had just
// ended an attempt.
func (s *sandbox) cleanAll() {
	s.mu.Lock()
	s.dirty = append(s.dirty, s.free...)
	s.free = nil
	s.startCleaner()
	s.mu.Unlock()
}

// startCleaner starts the cleaner unless it runs or nothing is dirty.
// Called with s.mu held.
func (s *sandbox) startCleaner() {
	if s.cleaning || len(s.dirty) == 0 {
		return
	}
	s.cleaning = true
	go s.cleaner()
}

// settle waits until the ids of every ended attempt are back in the pool,
// or, once the worker stops, until a walk for them has failed.
func (s *sandbox) settle() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.cleaning {
		s.hurryCleaner()
		s.freed.Wait()
	}
}

// takeSpare renames a spare directory to dir, and reports whether it did.
// A spare is as a directory just made is: empty, the worker's, mode 0700.
// What is at dir goes first: an empty directory is replaced by the
// rename, anything else is removed when the rename finds it.
func (s *sandbox) takeSpare(dir string) bool {
	s.mu.Lock()
	if len(s.spare) == 0 {
		s.mu.Unlock()
		return false
	}
	sp := s.spare[len(s.spare)-1]
	s.spare = s.spare[:len(s.spare)-1]
	s.mu.Unlock()
	// syscall.Rename, not os.Rename, which looks at dir first.
	err := syscall.Rename(sp, dir)
	if err != nil && (err == syscall.EEXIST || err == syscall.ENOTEMPTY || err == syscall.ENOTDIR || err == syscall.EISDIR) {
		if os.RemoveAll(dir) == nil {
			err = syscall.Rename(sp, dir)
		}
	}
	if err != nil {
		_ = os.RemoveAll(sp) // what is left goes at the next start (see clearRoot)
		return false
	}
	return true
}

// recycle makes j's directory, once no process of its attempt is left,
// what a directory just made is (the worker's, mode 0700, empty, with no
// extended attributes or ACLs but the system's security labels), and
// keeps it as a spare for a later attempt to take in place of making one:
// on a disk file system, making and removing a directory costs many times
// what renaming one does. Spare names start with a dot, which no job id
// has. recycle reports false, having left the directory for the caller to
// remove, when a step fails, when the directory is not one it can make
// fresh (see clearXattrs), or when there are spares enough.
//
// With a pool it never recycles: a directory is the same inode to every
// attempt that gets it, and a process of another pool uid that opened it
// while an earlier attempt had opened it to all keeps listing (getdents)
// or watching (inotify) the names a later attempt, maybe another
// tenant's, makes in it; a new directory is a new inode.
func (s *sandbox) recycle(j *jail) bool {
	if j.pooled {
		return false
	}
	s.mu.Lock()
	full := len(s.spare) >= maxSpare
	name := filepath.Join(s.root, fmt.Sprintf(".spare-%d", s.spareN))
	s.spareN++
	s.mu.Unlock()
	if full {
		return false
	}
	// The job cannot replace its directory (the root is the worker's),
	// but it may have changed its owner's bits. Opened without following
	// a link, so it is the directory itself that is made fresh.
	const flags = syscall.O_RDONLY | syscall.O_DIRECTORY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	fd, err := syscall.Open(j.dir, flags, 0)
	if err == syscall.EACCES {
		// The job closed it to its owner: open it again.
		if fi, lerr := os.Lstat(j.dir); lerr != nil || !fi.IsDir() || os.Chmod(j.dir, 0o700) != nil {
			return false
		}
		fd, err = syscall.Open(j.dir, flags, 0)
	}
	if err != nil {
		return false
	}
	names, err := freshen(fd)
	_ = syscall.Close(fd) // read only
	if err != nil {
		return false
	}
	for _, n := range names {
		if os.RemoveAll(filepath.Join(j.dir, n)) != nil {
			return false
		}
	}
	if !clearXattrs(j.dir) || syscall.Rename(j.dir, name) != nil {
		return false
	}
	s.mu.Lock()
	s.spare = append(s.spare, name)
	s.mu.Unlock()
	return true
}

// giveBack returns j's uid to the end of the free list: ids are reused as
// late as possible.
func (s *sandbox) giveBack(j *jail) {
	if !j.pooled {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.used[j.uid]; ok {
		delete(s.used, j.uid)
		s.free = append(s.free, j.uid)
	}
}

// clearRoot removes what attempts of an earlier life left in the job root,
// unless KeepAttemptDirs. No process of theirs may be left (see reclaim).
func (s *sandbox) clearRoot() error {
	if s.keep {
		return nil
	}
	ents, err := os.ReadDir(s.root)
	if err != nil {
		return fmt.Errorf("read the job root: %w", err)
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, os.RemoveAll(filepath.Join(s.root, e.Name())))
	}
	return errors.Join(errs...)
}

// close removes the spare directories and then the job root when the
// worker stops, if nothing else is left in it.
func (s *sandbox) close() error {
	s.mu.Lock()
	spare := s.spare
	s.spare = nil
	s.mu.Unlock()
	var errs []error
	for _, sp := range spare {
		errs = append(errs, os.RemoveAll(sp))
	}
	if s.cg != nil {
		errs = append(errs, s.cg.close())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	err := os.Remove(s.root)
	if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
		return nil
	}
	return err
}

// untilGone runs sweep until it reports nothing left, retrying with
// backoff and logging once while processes survive, until ctx ends.
func untilGone(ctx context.Context, o *outage, sweep func() error) error {
	return retry(ctx, o, func(context.Context) error { return sweep() })
}

// ownDir makes dir (and its parents) if needed and checks that it is a
// directory of the worker's own, not a link, that nobody else can write;
// it then sets its mode to mode. Someone else's directory, planted where
// the worker would put its own, is refused.
func ownDir(dir string, mode fs.FileMode) error {
	if err := os.MkdirAll(dir, mode); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("%s belongs to uid %d, not to the worker's uid %d: move it away or choose another directory", dir, uid, os.Geteuid())
	}
	if fi.Mode().Perm() != mode {
		if err := os.Chmod(dir, mode); err != nil {
			return err
		}
	}
	return nil
}

// searchable reports an error naming the first directory above and
// including dir that other users cannot search.
func searchable(dir string) error {
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s has mode %04o", d, fi.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// idsUnused reports an error if any id of r belongs to a user or group of
// /etc/passwd or /etc/group: the sweep kills every process of a pool uid,
// so a pool must be ids nobody else uses.
func idsUnused(r IDRange) error {
	for _, f := range []struct{ path, kind string }{{"/etc/passwd", "user"}, {"/etc/group", "group"}} {
		file, err := os.Open(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(file)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) < 3 {
				continue
			}
			id, err := strconv.ParseUint(fields[2], 10, 32)
			if err == nil && r.contains(uint32(id)) {
				_ = file.Close() // read only
				return fmt.Errorf("id %d of %s is %s %q of %s; choose ids no user or group has", id, r, f.kind, fields[0], f.path)
			}
		}
		err = sc.Err()
		_ = file.Close() // read only
		if err != nil {
			return fmt.Errorf("read %s: %w", f.path, err)
		}
	}
	return nil
}

// fileOwner is fi's owning uid, if the system says.
func fileOwner(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
