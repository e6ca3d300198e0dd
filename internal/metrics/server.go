package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Check is one condition of readiness. Func returns a short description of
// what it found when the condition holds, or an error saying, in a few
// words, why it does not.
type Check struct {
	Name string
	Func func() (string, error)
}

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves /metrics from g, /healthz, and /readyz from checks. /readyz
// answers 200 when every check holds and 503 when any does not, with one
// line per check, "name: what it found" or "name: not ready: why".
func Handler(g prometheus.Gatherer, checks ...Check) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{EnableOpenMetrics: true}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		body, ready := readiness(checks)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, body)
	})
	return mux
}

// readiness runs every check and describes them, one line each.
func readiness(checks []Check) (string, bool) {
	var b strings.Builder
	ready := true
	for _, c := range checks {
		what, err := c.Func()
		if err != nil {
			ready = false
			fmt.Fprintf(&b, "%s: not ready: %v\n", c.Name, err)
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", c.Name, what)
	}
	if len(checks) == 0 {
		b.WriteString("ready\n")
	}
	return b.String(), ready
}

// Serve serves h on l until ctx ends, then shuts the server down, giving
// requests in flight up to 2s. It returns nil when stopped by ctx, and the
// server's error otherwise.
func Serve(ctx context.Context, l net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve metrics on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}
