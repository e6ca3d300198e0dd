// Package natstest runs a real nats-server with JetStream inside a test
// process, on file storage in a temporary directory, listening on a random
// loopback port.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server is an embedded nats-server.
type Server struct {
	*server.Server
}

// Start runs a server with JetStream on file storage under a new temporary
// directory. It is shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatalf("start nats-server: %v", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready for connections after 10s")
	}
	s := &Server{Server: ns}
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the server down and waits until it has.
func (s *Server) Stop() {
	s.Shutdown()
	s.WaitForShutdown()
}

// Connect returns a client connection, closed when the test ends.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a new connection.
func (s *Server) JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := s.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
