package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/web"
)

// webServer is the --http listener of the read-only dashboard.
type webServer struct {
	l        net.Listener
	password string // asked of every request; empty on loopback only
}

// httpPasswordFlag is the flag that names the dashboard's password file.
const httpPasswordFlag = "http-password-file"

// listenWeb listens on addr for --http, so a port in use fails at start; it
// returns nil for an empty addr (no dashboard). The pages show every job's
// command, environment and output the server may read, so they are served
// beyond loopback only with a password, read from passwordFile (its first
// line; a file of its own, e.g. `openssl rand -hex 16 > FILE`).
func listenWeb(addr, passwordFile string) (*webServer, error) {
	if addr == "" {
		if passwordFile != "" {
			return nil, usagef("--%s without --http: there is no dashboard to guard", httpPasswordFlag)
		}
		return nil, nil
	}
	password, err := readWebPassword(passwordFile)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usagef("--http %s: %v (want HOST:PORT)", addr, err)
	}
	if password == "" && !loopbackHost(host) {
		return nil, usagef("--http %s serves beyond this machine, and the dashboard shows every job's command, environment and output: "+
			"give it a password with --%s FILE, or serve it on 127.0.0.1 (behind a proxy that logs users in)", addr, httpPasswordFlag)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", addr, err)
	}
	return &webServer{l: l, password: password}, nil
}

// readWebPassword reads the first line of file, "" for no file.
func readWebPassword(file string) (string, error) {
	if file == "" {
		return "", nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--%s: %w", httpPasswordFlag, err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	password := strings.TrimSpace(line)
	if len(password) < 12 {
		return "", usagef("--%s %s: the password on its first line has %d characters; give it at least 12", httpPasswordFlag, file, len(password))
	}
	return password, nil
}

// loopbackHost reports whether host (of HOST:PORT) names only this
// machine: localhost or a loopback address. An empty host is every
// interface.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// url is where the dashboard is served.
func (w *webServer) url() string { return "http://" + w.l.Addr().String() + "/" }

// serve serves the dashboard over cl until the returned stop is called,
// which waits for it to end. A server that fails is logged; the daemon goes
// on without.
func (w *webServer) serve(ctx context.Context, cl *client.Client, log *slog.Logger) (stop func(), err error) {
	s, err := web.New(web.Config{Client: cl, Logger: log, Password: w.password})
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
