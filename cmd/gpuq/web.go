package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/web"
)

// webServer is the --http listener of the read-only dashboard.
type webServer struct {
	l net.Listener
}

// listenWeb listens on addr for --http, so a port in use fails at start; it
// returns nil for an empty addr (no dashboard).
func listenWeb(addr string) (*webServer, error) {
	if addr == "" {
		return nil, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return &webServer{l: l}, nil
}

// url is where the dashboard is served.
func (w *webServer) url() string { return "http://" + w.l.Addr().String() + "/" }

// serve serves the dashboard over cl until the returned stop is called,
// which waits for it to end. A server that fails is logged; the daemon goes
// on without.
func (w *webServer) serve(ctx context.Context, cl *client.Client, log *slog.Logger) (stop func(), err error) {
	s, err := web.New(web.Config{Client: cl, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = s.Run(ctx) // returns nil when ctx ends; failures are logged and retried inside
	}()
	go func() {
		defer wg.Done()
		if err := web.Serve(ctx, w.l, s.Handler()); err != nil {
			log.Error("the dashboard server stopped; the dashboard is no longer served", slog.Any("err", err))
		}
	}()
	return func() {
		cancel()
		wg.Wait()
	}, nil
}

// start serves the dashboard over cl until the returned stop is called; on
// a nil w (no --http) it serves nothing and stop does nothing.
func (w *webServer) start(ctx context.Context, cl *client.Client, log *slog.Logger) (stop func(), err error) {
	if w == nil {
		return func() {}, nil
	}
	if stop, err = w.serve(ctx, cl, log); err != nil {
		_ = w.l.Close() // never served; the error says why
		return nil, err
	}
	return stop, nil
}
