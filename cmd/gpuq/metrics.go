package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuq/gpuq/internal/metrics"
)

// metricsServer is the --metrics-listen listener: /metrics of its registry,
// /healthz, and /readyz of its checks.
type metricsServer struct {
	reg    *prometheus.Registry
	l      net.Listener
	checks []metrics.Check
}

// listenMetrics listens on addr for --metrics-listen, so a port in use fails
// at start; it returns nil for an empty addr (metrics off).
func listenMetrics(addr string) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %s: %w", addr, err)
	}
	return &metricsServer{reg: metrics.NewRegistry(), l: l}, nil
}

// url is where /metrics is served.
func (m *metricsServer) url() string { return "http://" + m.l.Addr().String() + "/metrics" }

// check adds a condition of readiness.
func (m *metricsServer) check(name string, f func() (string, error)) {
	m.checks = append(m.checks, metrics.Check{Name: name, Func: f})
}

// serve serves until the returned stop is called, which waits for the
// server to end. A server that fails is logged; the daemon goes on without.
// Checks must all be added before.
func (m *metricsServer) serve(ctx context.Context, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := metrics.Serve(ctx, m.l, metrics.Handler(m.reg, m.checks...)); err != nil {
			log.Error("the metrics server stopped; metrics and health are no longer served", slog.Any("err", err))
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// natsReady is the readiness check of a connection to NATS.
func natsReady(nc *nats.Conn) func() (string, error) {
	return func() (string, error) {
		if !nc.IsConnected() {
			return "", errors.New("not connected to NATS (" + nc.Status().String() + ")")
		}
		return "connected to " + nc.ConnectedUrlRedacted(), nil
	}
}
