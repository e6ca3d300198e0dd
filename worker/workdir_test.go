package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuq/gpuq/ledger"
)

// TestWorkdir: a job that names a workdir runs there (a real child process
// prints its working directory), with its own attempt directory still its
// HOME; one whose workdir does not exist, is a file, or (with a uid pool)
// cannot be entered by the job's user is refused with a rejected report
// saying so, and runs nothing.
func TestWorkdir(t *testing.T) {
	t.Parallel()
	for _, m := range modes(t) {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			// Under the shared temporary directory, mode 0755: any user
			// can enter it (t.TempDir's parent is 0700).
			open, err := os.MkdirTemp("", "gpuq-workdir-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := os.RemoveAll(open); err != nil {
					t.Error(err)
				}
			})
			if err := os.Chmod(open, 0o755); err != nil {
				t.Fatal(err)
			}
			bus := newFakeBus()
			startSandboxed(t, m, bus, 1, nil)

			o := dispatchOrder("here", 1, 1, "sh", "-c", `pwd; echo "HOME=$HOME"`)
			o.Workdir = open
			bus.sendOrder(t, o)
			if r := bus.nextReport(t); r.Type != ledger.ReportStarted {
				t.Fatalf("report %+v, want started", r)
			}
			if r := bus.nextReport(t); r.Type != ledger.ReportDone || r.ExitCode != 0 {
				t.Fatalf("report %+v, want done with exit 0", r)
			}
			out := bus.output("here", 1)
			if lines := strings.Split(out, "\n"); lines[0] != open || !strings.HasPrefix(lines[1], "HOME=") || lines[1] == "HOME="+open {
				t.Errorf("the job printed %q; want its workdir %s first, then its own HOME", out, open)
			}

			file := filepath.Join(open, "file")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			closed := filepath.Join(t.TempDir(), "closed") // under a 0700 directory of the test's user
			if err := os.Mkdir(closed, 0o755); err != nil {
				t.Fatal(err)
			}
			refused := map[string]string{
				"/nonexistent/gpuq-workdir": "workdir /nonexistent/gpuq-workdir does not exist on this host",
				file:                        "is not a directory",
			}
			if !m.uids.IsZero() {
				refused[closed] = "cannot enter"
			}
			n := 0
			for dir, want := range refused {
				n++
				job := "refused-" + string(rune('a'+n))
				o := dispatchOrder(job, 1, 1, "sh", "-c", "echo RAN")
				o.Workdir = dir
				bus.sendOrder(t, o)
				r := bus.nextReport(t)
				if r.Type != ledger.ReportRejected || r.Job != job || r.Busy || !strings.Contains(r.Reason, want) {
					t.Errorf("workdir %s: report %+v; want rejected, not busy, saying %q", dir, r, want)
				}
				if out := bus.output(job, 1); out != "" {
					t.Errorf("workdir %s: the job ran and printed %q", dir, out)
				}
			}
		})
	}
}

// TestArrayTaskEnv: a task of a job array sees its array's id and its
// index in GPUQ_ARRAY_ID and GPUQ_ARRAY_INDEX (a real child prints them);
// a job of no array sees neither.
func TestArrayTaskEnv(t *testing.T) {
	t.Parallel()
	bus := newFakeBus()
	startSandboxed(t, mode{name: "worker-user"}, bus, 1, nil)
	o := dispatchOrder("sweep-7", 1, 1, "sh", "-c", `echo "id=${GPUQ_ARRAY_ID-unset} index=${GPUQ_ARRAY_INDEX-unset}"`)
	o.ArrayID, o.ArrayIndex = "sweep", 7
	bus.sendOrder(t, o)
	for _, want := range []ledger.ReportType{ledger.ReportStarted, ledger.ReportDone} {
		if r := bus.nextReport(t); r.Type != want {
			t.Fatalf("report %+v, want %s", r, want)
		}
	}
	if out := bus.output("sweep-7", 1); !strings.HasPrefix(out, "id=sweep index=7\n") {
		t.Errorf("the array task printed %q", out)
	}
	_, out := runJob(t, bus, "alone", "sh", "-c", `echo "id=${GPUQ_ARRAY_ID-unset} index=${GPUQ_ARRAY_INDEX-unset}"`)
	if !strings.HasPrefix(out, "id=unset index=unset\n") {
		t.Errorf("a job of no array printed %q", out)
	}
}
