package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/gpuq/gpuq/internal/metrics"
	"github.com/gpuq/gpuq/scheduler"
)

// A scheduler's metrics and readiness, served as gpuq scheduler
// --metrics-listen serves them. The service makes the calls to sm itself
// when it is given sm as its Config.Metrics; here they are made by hand.
func Example() {
	reg := metrics.NewRegistry()
	sm, err := metrics.NewScheduler(reg)
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(metrics.Handler(reg, metrics.Check{Name: "scheduler", Func: sm.Ready}))
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			panic(err)
		}
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}

	sm.Standing(scheduler.StandingLeading)
	sm.Progress(scheduler.Progress{Applied: 40, Stored: 42})
	fmt.Print(get("/readyz"))
	sm.Folded("submit", scheduler.FoldApplied, 20*time.Microsecond)
	sm.Progress(scheduler.Progress{Applied: 42, Stored: 42, Caught: true})
	fmt.Print(get("/readyz"))
	for line := range strings.SplitSeq(get("/metrics"), "\n") {
		if strings.HasPrefix(line, "gpuq_scheduler_commands_folded_total{") || strings.HasPrefix(line, "gpuq_scheduler_leader ") {
			fmt.Println(line)
		}
	}
	// Output:
	// 503 scheduler: not ready: leading, catching up: 2 entries behind the command log
	// 200 scheduler: leading, caught up at 42
	// gpuq_scheduler_commands_folded_total{kind="submit",outcome="applied"} 1
	// gpuq_scheduler_leader 1
}
