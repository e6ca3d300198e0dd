package worker

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// switchUIDs runs as uid a (keeping root as its saved uid), says "a" on
// stdout, waits for a line on stdin, then becomes uid b, as a process of a
// pool uid does that execs a setuid copy of a shell another attempt's uid
// left, says "b", and waits to be killed.
func switchUIDs(ids string) {
	var a, b int
	if _, err := fmt.Sscanf(ids, "%d,%d", &a, &b); err != nil {
		os.Exit(2)
	}
	if err := syscall.Setresuid(a, a, 0); err != nil {
		os.Exit(3)
	}
	fmt.Println("a")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // the test's go-ahead
	if err := syscall.Setresuid(0, 0, 0); err != nil {
		os.Exit(4)
	}
	if err := syscall.Setresuid(b, b, b); err != nil {
		os.Exit(5)
	}
	fmt.Println("b")
	select {}
}

// TestSweepRereadsAProcessThatChangedItsPoolUID: a process seen running as
// one pool uid that then runs as another (its /proc entry the same) is
// found by a sweep for the second: the sweep reads afresh every process
// seen as a pool uid.
func TestSweepRereadsAProcessThatChangedItsPoolUID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("changing uids takes root")
	}
	pool := IDRange{First: 3_200_000, Last: 3_200_009}
	a, b := pool.First, pool.First+1
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "GPUQ_TEST_SWITCH_UIDS="+fmt.Sprintf("%d,%d", a, b))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	out := bufio.NewReader(stdout)
	said := func(want string) {
		t.Helper()
		line, err := out.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("helper said %q, %v; want %q", line, err, want)
		}
	}
	pid := cmd.Process.Pid
	runsAs := func(uid uint32) matcher {
		return func(p *procInfo, _ map[int]procInfo) bool { return p.pid == pid && p.uids[1] == uid }
	}
	said("a")
	if got, err := findSeen(pool, 0)(runsAs(a)); err != nil || len(got) != 1 {
		t.Fatalf("sweep for uid %d: %v, %v; want the helper %d", a, got, err, pid)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	said("b")
	if got, err := findSeen(pool, 0)(runsAs(b)); err != nil || len(got) != 1 {
		t.Fatalf("sweep for uid %d after the helper became it: %v, %v; want the helper %d", b, got, err, pid)
	}
}

// TestSweepRereadsADeniedEnvironmentWhenTheProcessChanged: a process
// whose environment the worker was denied is kept as having no marker
// only while it is the same process with the same uids: one that changed
// its uids (a setuid program that gave up its privileges), or a later
// process of the same pid (another /proc entry), is read again, and found
// by its marker.
func TestSweepRereadsADeniedEnvironmentWhenTheProcessChanged(t *testing.T) {
	// Not parallel: it sets what the sweeps of this process remember.
	const marker = "/jobs/denied.1"
	cmd := exec.Command("sleep", "60")
	cmd.Env = []string{markerVar + "=" + marker}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	marked := func(p *procInfo, _ map[int]procInfo) bool { return p.pid == pid && p.env() == marker }
	find := findSeen(IDRange{}, 0)
	if got, err := find(marked); err != nil || len(got) != 1 {
		t.Fatalf("sweep for the marker: %v, %v; want the process %d", got, err, pid)
	}
	// deny makes what the sweeps remember of the process a denial made
	// when it had uids, at the /proc entry ino moves it by.
	deny := func(uids [3]uint32, ino uint64) {
		seen.Lock()
		defer seen.Unlock()
		c := seen.procs[pid]
		if c == nil {
			t.Fatalf("the sweep kept nothing of process %d", pid)
		}
		c.ino += ino
		c.info.uids, c.info.marker, c.info.markerRead, c.info.denied = uids, "", true, true
	}
	p, err := readStatus(pid)
	if err != nil {
		t.Fatal(err)
	}
	deny(p.uids, 0)
	if got, err := find(marked); err != nil || len(got) != 0 {
		t.Fatalf("sweep after a denial of the unchanged process: %v, %v; want the denial kept", got, err)
	}
	for _, c := range []struct {
		what string
		uids [3]uint32
		ino  uint64
	}{
		{"other uids", [3]uint32{p.uids[0] + 1, p.uids[1] + 1, p.uids[2] + 1}, 0},
		{"another /proc entry (an earlier process of its pid)", p.uids, 1},
	} {
		deny(c.uids, c.ino)
		if got, err := find(marked); err != nil || len(got) != 1 {
			t.Errorf("sweep after a denial of the process when it had %s: %v, %v; want the process %d found by its marker", c.what, got, err, pid)
		}
	}
}

// TestSweepSkipsAnExitedLeaderUnread: an attempt's leader that has exited
// and is not reaped yet (a zombie that keeps its pid) is skipped unread by
// the sweeps of every other attempt; once it is about to be reaped, its pid
// is read again like any other.
func TestSweepSkipsAnExitedLeaderUnread(t *testing.T) {
	// Not parallel: it sets what the sweeps of this process remember.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	reaped := false
	t.Cleanup(func() {
		if !reaped {
			noteReaped(pid)
			_ = cmd.Wait() // the test failed before its reap
		}
	})
	if _, exited := waitExit(pid); !exited {
		t.Fatal("waitExit did not see the child exit")
	}
	noteExited(pid)
	forget := func() {
		seen.Lock()
		defer seen.Unlock()
		delete(seen.procs, pid)
	}
	read := func() bool {
		seen.Lock()
		defer seen.Unlock()
		return seen.procs[pid] != nil
	}
	none := func(*procInfo, map[int]procInfo) bool { return false }
	forget()
	if _, err := findSeen(IDRange{}, 0)(none); err != nil {
		t.Fatal(err)
	}
	if read() {
		t.Errorf("a sweep read the exited, unreaped leader %d", pid)
	}
	noteReaped(pid)
	if _, err := findSeen(IDRange{}, 0)(none); err != nil {
		t.Fatal(err)
	}
	if !read() {
		t.Errorf("a sweep after noteReaped did not read process %d (a zombie still)", pid)
	}
	reaped = true
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}
