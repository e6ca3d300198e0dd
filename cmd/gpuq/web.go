package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/web"
)

// webServer is the --http listener of the read-only dashboard.
type webServer struct {
	l        net.Listener
	password string        // asked of every request; empty on loopback only
	certs    *certReloader // nil: plain HTTP
}

// The flags that name the dashboard's password file and its TLS pair.
const (
	httpPasswordFlag = "http-password-file"
	httpCertFlag     = "http-tls-cert"
	httpKeyFlag      = "http-tls-key"
)

// webFlags are the dashboard's flags, the same for gpuq dev and gpuq
// scheduler.
type webFlags struct {
	addr, passwordFile, certFile, keyFile string
}

// addWebFlags defines the dashboard's flags on fs, --http defaulting to
// addr with usage httpUsage.
func addWebFlags(fs *flag.FlagSet, addr, httpUsage string) *webFlags {
	f := &webFlags{}
	fs.StringVar(&f.addr, "http", addr, httpUsage)
	fs.StringVar(&f.passwordFile, httpPasswordFlag, "", "ask every dashboard request for the password on this file's first line (HTTP Basic, any user name); needed to serve beyond loopback")
	fs.StringVar(&f.certFile, httpCertFlag, "", "serve the dashboard over HTTPS with this PEM certificate (chain) file, read again when it changes; with --"+httpKeyFlag)
	fs.StringVar(&f.keyFile, httpKeyFlag, "", "the PEM private key of --"+httpCertFlag)
	return f
}

// listenWeb listens on f.addr for --http, so a port in use fails at start;
// it returns nil for an empty addr (no dashboard). The pages show every
// job's command, environment and output the server may read, so they are
// served beyond loopback only with a password, read from f.passwordFile
// (its first line; a file of its own, e.g. `openssl rand -hex 16 > FILE`).
// With a certificate and key they are served over TLS; a password sent
// beyond loopback without it crosses the network in clear, which log is
// told once.
func listenWeb(f *webFlags, log *slog.Logger) (*webServer, error) {
	if f.addr == "" {
		for _, set := range []struct{ flag, value string }{{httpPasswordFlag, f.passwordFile}, {httpCertFlag, f.certFile}, {httpKeyFlag, f.keyFile}} {
			if set.value != "" {
				return nil, usagef("--%s without --http: there is no dashboard to serve", set.flag)
			}
		}
		return nil, nil
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return nil, usagef("--%s and --%s go together: give both, or neither for plain HTTP", httpCertFlag, httpKeyFlag)
	}
	password, err := readWebPassword(f.passwordFile)
	if err != nil {
		return nil, err
	}
	host, _, err := net.SplitHostPort(f.addr)
	if err != nil {
		return nil, usagef("--http %s: %v (want HOST:PORT)", f.addr, err)
	}
	if password == "" && !loopbackHost(host) {
		return nil, usagef("--http %s serves beyond this machine, and the dashboard shows every job's command, environment and output: "+
			"give it a password with --%s FILE, or serve it on 127.0.0.1 (behind a proxy that logs users in)", f.addr, httpPasswordFlag)
	}
	var certs *certReloader
	if f.certFile != "" {
		if certs, err = newCertReloader(f.certFile, f.keyFile, log); err != nil {
			return nil, err
		}
	} else if !loopbackHost(host) {
		log.Warn("the dashboard is served over plain HTTP beyond this machine: its password and pages cross the network in clear; "+
			"give it a certificate with --"+httpCertFlag+" and --"+httpKeyFlag+", or put it behind a proxy that speaks TLS",
			slog.String("addr", f.addr))
	}
	l, err := net.Listen("tcp", f.addr)
	if err != nil {
		return nil, fmt.Errorf("--http %s: %w", f.addr, err)
	}
	if certs != nil {
		l = tls.NewListener(l, &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.get})
	}
	return &webServer{l: l, password: password, certs: certs}, nil
}

// certReloader holds the dashboard's certificate, read again from its
// files when either changes (a renewal by certbot or cert-manager needs no
// restart). A pair that no longer loads is logged, and the last good one is
// served until it is mended.
type certReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   []byte    // the files' sizes and times when cert was read
	checked time.Time // when the files were last looked at
	failing bool      // the files changed into a pair that does not load
}

// certCheckEvery is how often a handshake looks at the files again.
const certCheckEvery = time.Second

func newCertReloader(certFile, keyFile string, log *slog.Logger) (*certReloader, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile, log: log}
	stamp, err := r.stampFiles()
	if err == nil {
		err = r.load(stamp)
	}
	if err != nil {
		return nil, fmt.Errorf("--%s %s, --%s %s: %w", httpCertFlag, certFile, httpKeyFlag, keyFile, err)
	}
	r.checked = time.Now()
	return r, nil
}

// stampFiles says what the files are now: their sizes and modification
// times, which change when a file is rewritten or replaced by a rename.
func (r *certReloader) stampFiles() ([]byte, error) {
	var b bytes.Buffer
	for _, name := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(name)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%d %d;", fi.Size(), fi.ModTime().UnixNano())
	}
	return b.Bytes(), nil
}

func (r *certReloader) load(stamp []byte) error {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert, r.stamp = &cert, stamp
	return nil
}

// get is the listener's GetCertificate.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= certCheckEvery {
		r.checked = now
		stamp, err := r.stampFiles()
		if err == nil && bytes.Equal(stamp, r.stamp) {
			return r.cert, nil
		}
		if err == nil {
			err = r.load(stamp)
		}
		switch {
		case err != nil && !r.failing:
			r.failing = true
			r.log.Error("the dashboard's certificate files changed and no longer load; serving the certificate read before until they are mended",
				slog.String("cert", r.certFile), slog.String("key", r.keyFile), slog.Any("err", err))
		case err == nil:
			r.failing = false
			r.log.Info("the dashboard's certificate was read again", slog.String("cert", r.certFile), slog.Any("expires", r.cert.Leaf.NotAfter))
		}
	}
	return r.cert, nil
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
func (w *webServer) url() string {
	if w.certs != nil {
		return "https://" + w.l.Addr().String() + "/"
	}
	return "http://" + w.l.Addr().String() + "/"
}

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
