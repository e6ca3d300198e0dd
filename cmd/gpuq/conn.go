package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/ledger"
	"github.com/gpuq/gpuq/subjects"
)

// connFlags are the connection settings every command shares.
type connFlags struct {
	url     string
	creds   string
	nkey    string
	inbox   string
	tlsCA   string
	tlsCert string
	tlsKey  string
	prefix  string
	timeout time.Duration
	context string // --context: a context of the config file (config.go)
}

func (f *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "nats", envOr("NATS_URL", nats.DefaultURL), "NATS server URL, or $NATS_URL")
	fs.StringVar(&f.creds, "creds", os.Getenv("NATS_CREDS"), "NATS credentials file, or $NATS_CREDS")
	fs.StringVar(&f.nkey, "nkey", os.Getenv("NATS_NKEY"), "NATS nkey seed file of an nkey user, or $NATS_NKEY")
	fs.StringVar(&f.inbox, "inbox-prefix", envOr("NATS_INBOX_PREFIX", defaultInbox),
		"subject prefix of this connection's replies, the one its user may subscribe to (deploy/: _INBOX_<user>), or $NATS_INBOX_PREFIX")
	fs.StringVar(&f.tlsCA, "tls-ca", "", "CA certificate file to verify the server with")
	fs.StringVar(&f.tlsCert, "tls-cert", "", "client certificate file (with --tls-key)")
	fs.StringVar(&f.tlsKey, "tls-key", "", "client key file")
	fs.StringVar(&f.prefix, "prefix", subjects.DefaultPrefix, "subject prefix of the gpuq installation")
	fs.DurationVar(&f.timeout, "timeout", 30*time.Second, "how long to wait for the scheduler's answer")
	fs.StringVar(&f.context, "context", "", "the config file's context to connect with (~/.config/gpuq/config), or $GPUQ_CONTEXT")
}

// defaultInbox is nats.go's own inbox prefix, kept when --inbox-prefix is
// left out: a single-account server (gpuq dev) lets every user read it.
const defaultInbox = "_INBOX"

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// names returns the installation's subject names.
func (f *connFlags) names() (subjects.Names, error) {
	n, err := subjects.New(f.prefix)
	if err != nil {
		return subjects.Names{}, usagef("--prefix: %v", err)
	}
	return n, nil
}

// options returns the NATS connection options for the flags.
func (f *connFlags) options(name string) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(time.Second)}
	if f.creds != "" && f.nkey != "" {
		return nil, usagef("--creds and --nkey both given: a connection authenticates one way; give the one its user has")
	}
	if f.creds != "" {
		opts = append(opts, nats.UserCredentials(f.creds))
	}
	if f.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(f.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nkey %s: %w", f.nkey, err)
		}
		opts = append(opts, o)
	}
	if f.inbox != defaultInbox {
		opts = append(opts, nats.CustomInboxPrefix(f.inbox))
	}
	if f.tlsCA != "" || f.tlsCert != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.tlsCA != "" {
			pem, err := os.ReadFile(f.tlsCA)
			if err != nil {
				return nil, fmt.Errorf("--tls-ca: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", f.tlsCA)
			}
			cfg.RootCAs = pool
		}
		if f.tlsCert != "" || f.tlsKey != "" {
			cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
			if err != nil {
				return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(cfg))
	}
	return opts, nil
}

// connect opens a connection for a short-lived command.
func (f *connFlags) connect(name string) (*nats.Conn, error) {
	opts, err := f.options(name)
	if err != nil {
		return nil, err
	}
	opts = append(opts, nats.RetryOnFailedConnect(false), nats.Timeout(5*time.Second))
	nc, err := nats.Connect(f.url, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			return nil, fmt.Errorf("cannot reach NATS at %s: %w; start one with gpuq dev, or set --nats or $NATS_URL", f.url, err)
		}
		return nil, fmt.Errorf("connect to %s: %w", f.url, err)
	}
	return nc, nil
}

// dial opens a connection for a daemon: it keeps trying while the server is
// unreachable, at start and later.
func (f *connFlags) dial(name string) (*nats.Conn, error) {
	opts, err := f.options(name)
	if err != nil {
		return nil, err
	}
	// Pings every 3s notice a server that vanished without closing the
	// connection (a lost machine) within 6-9s, inside a worker's 10s
	// heartbeat TTL, not the default 4-6m.
	nc, err := nats.Connect(f.url, append(opts, nats.RetryOnFailedConnect(true),
		nats.PingInterval(3*time.Second), nats.MaxPingsOutstanding(2))...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", f.url, err)
	}
	return nc, nil
}

// session is an open connection with its client: every read and command
// of the CLI goes through the client.
type session struct {
	nc *nats.Conn
	c  *client.Client
	n  subjects.Names
}

func (e *env) session() (*session, error) {
	n, err := e.conn.names()
	if err != nil {
		return nil, err
	}
	nc, err := e.conn.connect("gpuq cli")
	if err != nil {
		return nil, err
	}
	c, err := client.New(nc, client.WithPrefix(n.Prefix()), client.WithTimeout(e.conn.timeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &session{nc: nc, c: c, n: n}, nil
}

func (s *session) close() { s.nc.Close() }

// job reads job id's record, saying so when there is none.
func (s *session) job(ctx context.Context, id string) (*ledger.Job, error) {
	j, err := s.c.Job(ctx, id)
	if errors.Is(err, client.ErrNotFound) {
		return nil, fmt.Errorf("no job %s", id)
	}
	return j, bucketHint(err)
}

// bucketHint adds what to do to an error of a read of a bucket that is not
// there yet.
func bucketHint(err error) error {
	if errors.Is(err, client.ErrNoBucket) {
		return fmt.Errorf("%w: no scheduler or worker has run against this server yet (start one with gpuq scheduler, or gpuq dev)", err)
	}
	return err
}

// warnForeign says on stderr which stored values a read left out.
func warnForeign(e *env, foreign []*client.ForeignValueError) {
	for _, f := range foreign {
		fmt.Fprintf(e.stderr, "gpuq: leaving out %v\n", f)
	}
}
