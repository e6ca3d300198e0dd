// The dashboard, tested in a real headless Chromium driven by chromedp:
// gpuq dev serves it, the test opens it, submits a job through the CLI and
// watches the job appear and finish on the page without a reload (and a
// second one wait in the queue, saying why, then run), while a
// second tab shows the job's page and its output arriving live. The job's
// command and output are hostile markup, which must show as text and never
// run. Screenshots are kept in $GPUQ_WEB_ARTIFACTS (default a temporary
// directory; the test logs where).
//
// There is no skip: without a browser the test fails and says how to get
// one (Debian's chromium package; .ci/run installs it).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// dashboardURL is the dashboard address gpuq dev printed in its banner.
func (d *devServer) dashboardURL() string {
	d.t.Helper()
	m := regexp.MustCompile(`(?m)^  dashboard  (https?://\S+/)`).FindStringSubmatch(d.out.String())
	if m == nil {
		d.t.Fatalf("gpuq dev printed no dashboard line:\n%s", d.out.String())
	}
	return m[1]
}

// findChromium returns the browser to test with: $GPUQ_CHROMIUM, or the
// first of chromium, chromium-browser, google-chrome on the PATH.
func findChromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GPUQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found to test the dashboard in: install Debian's chromium package " +
		"(apt-get install -y chromium, as root; .ci/run does it when it is missing), " +
		"or set GPUQ_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// artifactDir is where the screenshots go.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GPUQ_WEB_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshots in %s", dir)
	return dir
}

const hostileOut = `<script>alert("gpuq-xss")</script>`

func TestDashboardInBrowser(t *testing.T) {
	start := time.Now()
	browser := findChromium(t)
	shots := artifactDir(t)
	d := startDev(t, "")
	url := d.dashboardURL()

	// The job waits for this file, so the test decides when it ends: the
	// page must see it running, not guess a sleep. Its directory is open
	// to the job's own uid (gpuq dev as root runs jobs as other users).
	gate, err := os.MkdirTemp("", "gpuq-web-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(gate) }) // a temporary directory
	if err := os.Chmod(gate, 0o777); err != nil {
		t.Fatal(err)
	}
	release := filepath.Join(gate, "go")

	var browserOut syncBuffer
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1100),
		chromedp.CombinedOutput(&browserOut))
	defer cancelAlloc()
	dash, cancelDash := chromedp.NewContext(alloc)
	defer cancelDash()

	// Anything a page's scripts get wrong, or an injected script does,
	// ends up here: a dialog, an uncaught exception.
	var mu sync.Mutex
	var problems []string
	watch := func(ctx context.Context, tab string) {
		if err := chromedp.Listen(ctx, func(ev any) {
			mu.Lock()
			defer mu.Unlock()
			switch ev := ev.(type) {
			case *page.EventJavascriptDialogOpening:
				problems = append(problems, fmt.Sprintf("%s: a %s dialog opened: %q", tab, ev.Type, ev.Message))
			case *runtime.EventExceptionThrown:
				msg := ev.ExceptionDetails.Text
				if ex := ev.ExceptionDetails.Exception; ex != nil {
					msg += " " + ex.Description
				}
				problems = append(problems, fmt.Sprintf("%s: uncaught: %s", tab, msg))
			}
		}); err != nil {
			t.Fatalf("start the browser (%s): %v\n%s", browser, err, browserOut.String())
		}
	}
	watch(dash, "dashboard")

	step := func(ctx context.Context, what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(sctx, a); err != nil {
			html, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.documentElement.outerHTML`))
			shot(t, ctx, shots, "failed")
			t.Fatalf("%s: %v\npage:\n%s\ngpuq dev:\n%s", what, err, html, d.out.String())
		}
	}
	waitFor := func(ctx context.Context, what, expr string) {
		t.Helper()
		step(ctx, what, chromedp.Steps(chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(50*time.Second))))
	}

	step(dash, "open the dashboard", chromedp.Navigate(url))
	waitFor(dash, "the dashboard connects to its event stream", `document.querySelector('#conn[data-state="live"]') !== null`)
	waitFor(dash, "the dashboard shows the simulated host, labelled simulated",
		`document.querySelector('#hosts [data-host="sim-1"] .tag.sim') !== null`)
	// A reload would lose this.
	step(dash, "mark the page", chromedp.Steps(chromedp.Evaluate[chromedp.Void](`window.gpuqSamePage = "yes"`)))
	shot(t, dash, shots, "dashboard-idle")

	cmd := fmt.Sprintf(`echo '%s'; while [ ! -e %s ]; do sleep 0.1; done; echo second-line-after-release`, hostileOut, release)
	d.ok("submit", "--account", "demo", "--id", "web-1", "--gpus", "2", "--cost", "20", "--env", "NOTE=<b>env</b>", "--", "sh", "-c", cmd)

	waitFor(dash, "the job appears on the dashboard as running, without a reload",
		`document.querySelector('#running tr[data-job="web-1"][data-state="running"]') !== null && window.gpuqSamePage === "yes"`)
	waitFor(dash, "its GPUs show it on the host", `document.querySelectorAll('#hosts tr[data-job="web-1"]').length === 2`)
	// A job that cannot start while web-1 holds two of the eight GPUs waits
	// in the queue, with the scheduler's reason.
	d.ok("submit", "--account", "demo", "--id", "web-2", "--gpus", "8", "--cost", "5", "--", "true")
	waitFor(dash, "the waiting job shows in the queue with why it waits",
		`Array.from(document.querySelectorAll('#queue tr[data-job="web-2"] .blocker')).some(b => b.textContent.includes("no_free_gpus")) && window.gpuqSamePage === "yes"`)
	shot(t, dash, shots, "dashboard-running")

	// The job's page, in a second tab, from the dashboard's link.
	link, err := chromedp.Run(dash, chromedp.Evaluate[string](`document.querySelector('#running a[href="/jobs/web-1"]').href`))
	if err != nil {
		t.Fatalf("the running job has no link to its page: %v", err)
	}
	jobTab, cancelJob := chromedp.NewContext(dash)
	defer cancelJob()
	watch(jobTab, "job page")
	step(jobTab, "open the job page", chromedp.Navigate(link))
	waitFor(jobTab, "the job page shows the output so far, as text",
		fmt.Sprintf(`document.getElementById("output").textContent.includes(%q)`, hostileOut))
	step(jobTab, "mark the job page", chromedp.Steps(chromedp.Evaluate[chromedp.Void](`window.gpuqSamePage = "yes"`)))

	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(jobTab, "the job page shows the output written after it opened, and the end",
		`document.getElementById("output").textContent.includes("second-line-after-release") && document.getElementById("output-end").textContent.includes("ended: exit 0")`)
	waitFor(jobTab, "the job page shows the job succeeded, without a reload",
		`document.querySelector('#job-state[data-state="succeeded"]') !== null && window.gpuqSamePage === "yes"`)
	waitFor(jobTab, "the job page lists its charge from the journal",
		`Array.from(document.querySelectorAll("td")).some(td => td.textContent === "settle")`)
	shot(t, jobTab, shots, "job-page")

	waitFor(dash, "the dashboard shows both jobs finished, without a reload",
		`document.querySelector('#recent tr[data-job="web-1"][data-state="succeeded"]') !== null && document.querySelector('#recent tr[data-job="web-2"][data-state="succeeded"]') !== null && window.gpuqSamePage === "yes"`)
	waitFor(dash, "the dashboard lists the job's events", `document.querySelectorAll('#events a[href="/jobs/web-1"]').length >= 4`)
	// Both jobs were charged (20 and 5) by now, so the day's bar holds 25:
	// a plot read between the two ends showed 20, which is stale here.
	waitFor(dash, "the usage plot shows both jobs' charges, without a reload",
		`Array.from(document.querySelectorAll("#usage svg rect title")).some(t => /^demo, .*: 25 credits$/.test(t.textContent)) && window.gpuqSamePage === "yes"`)
	shot(t, dash, shots, "dashboard-finished")

	// The hostile command and output are text on the page, and never ran.
	for _, tab := range []struct {
		name string
		ctx  context.Context
	}{{"dashboard", dash}, {"job page", jobTab}} {
		n, err := chromedp.Run(tab.ctx, chromedp.Evaluate[int](`document.scripts.length`))
		if err != nil || n != 1 {
			t.Errorf("%s: %d script elements (%v), want 1 (its own)", tab.name, n, err)
		}
	}
	text, err := chromedp.Run(jobTab, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || !strings.Contains(text, hostileOut) || !strings.Contains(text, "NOTE=<b>env</b>") {
		t.Errorf("the job page does not show the command, output and environment as text (%v):\n%s", err, text)
	}
	mu.Lock()
	for _, p := range problems {
		t.Error(p)
	}
	mu.Unlock()

	// Read-only: nothing but GET is served.
	resp, err := http.Post(url+"jobs/web-1", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body) // only the status matters
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST %sjobs/web-1 = %d, want 405", url, resp.StatusCode)
	}
	t.Logf("the browser test took %v", time.Since(start).Round(time.Millisecond))
}

// shot saves a full-page screenshot of tab as name.png in dir.
func shot(t *testing.T, ctx context.Context, dir, name string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("screenshot %s: %v", name, err)
	}
}

// TestSchedulerServesDashboard: a scheduler started with --http serves the
// dashboard with its own connection (here a standby's: it reads what the
// leader published), and gpuq dev with --http "" serves none.
func TestSchedulerServesDashboard(t *testing.T) {
	t.Parallel()
	d := startDev(t, "", "--http", "", "--job-retention", "1s")
	if strings.Contains(d.out.String(), "  dashboard  ") {
		t.Errorf("gpuq dev --http '' printed a dashboard line:\n%s", d.out.String())
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	s := d.daemon("gpuq scheduler --name standby-web --http " + addr)
	url := "http://" + addr + "/"
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close() // read whole
			if rerr == nil && resp.StatusCode == http.StatusOK {
				body = string(b)
				if strings.Contains(body, `data-account="demo"`) && strings.Contains(body, `data-host="sim-1"`) {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the scheduler's dashboard at %s never showed account demo and host sim-1 (last: %v)\n%s\nscheduler:\n%s", url, err, body, s.out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The page says who holds the lease and who stands by: the operator's
	// first question at night.
	if !strings.Contains(body, `id="health" data-healthy="yes"`) || !strings.Contains(body, "Lease held by <b>dev</b>") {
		t.Errorf("the dashboard does not show a healthy installation led by dev:\n%s", body)
	}
	for path, want := range map[string]int{"jobs/no-such-job": 404, "jobs/no-such-job/output": 404, "jobs/bad..id": 400, "jobs/bad..id/output": 400,
		"parts/live": 200, "parts/usage": 200, "static/app.js": 200, "nowhere": 404} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // only the status matters
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s%s = %d, want %d", url, path, resp.StatusCode, want)
		}
	}
	// A job archived from the ledger view still has its page, from the
	// history stream, with its output.
	d.ok("submit", "--account", "demo", "--id", "arch-1", "--cost", "1", "--wait", "--", "echo", "archived-output")
	for page := ""; !strings.Contains(page, "Archived: moved") || !strings.Contains(page, "archived-output"); {
		resp, err := http.Get(url + "jobs/arch-1")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close() // read whole
		if err != nil {
			t.Fatal(err)
		}
		page = string(b)
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatalf("the page of archived job arch-1 never said it was archived, with its output:\n%s", page)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.Contains(body, "<b>dev</b> leads") {
		t.Errorf("the standby's dashboard does not name dev as the leader:\n%s", body)
	}
	if !strings.Contains(s.out.String(), "serving the dashboard") {
		t.Errorf("the scheduler did not log its dashboard:\n%s", s.out.String())
	}
	if code := s.term(t); code != 0 {
		t.Errorf("scheduler exited %d on SIGTERM:\n%s", code, s.out.String())
	}
}

// TestCIRunsTheReadmeTestCommand: .ci/run installs the browser when it is
// missing, then runs exactly the test command README.md gives, and the
// README says the browser test needs it.
func TestCIRunsTheReadmeTestCommand(t *testing.T) {
	t.Parallel()
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The README's test command is .ci/run itself, which installs what the
	// tests need and then runs the go command README also gives.
	if !strings.Contains(string(readme), "```sh\n.ci/run\n```") {
		t.Error("README.md does not give .ci/run as the command that runs the tests")
	}
	lines := strings.Split(strings.TrimSpace(string(ci)), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(string(readme), "```sh\n"+last+"\n```") {
		t.Errorf(".ci/run ends with %q, which README.md does not give as a command", last)
	}
	install := "command -v chromium || (apt-get update && apt-get install -y chromium)"
	if i := slices.Index(lines, install); i < 0 || i > len(lines)-2 {
		t.Errorf(".ci/run does not install chromium (%q) before the tests:\n%s", install, ci)
	}
	if !strings.Contains(string(readme), "apt-get install -y\nchromium") && !strings.Contains(string(readme), "apt-get install -y chromium") {
		t.Error("README.md does not say how to install the browser the dashboard test needs")
	}
}
