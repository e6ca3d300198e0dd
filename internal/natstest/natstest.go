// Package natstest runs real nats-servers with JetStream inside a test
// process, on file storage in temporary directories: a single server
// ([Start]) or a 3-node cluster ([StartCluster]). Every server listens on a
// loopback port of its own that it keeps across [Server.Restart], with its
// store directory, so a test can take a server away for as long as it likes
// and bring it back where its clients reconnect to it.
//
// Ports are picked below the kernel's ephemeral range: a client that keeps
// dialling a stopped server's port from an ephemeral port can then never
// connect to itself and hold the port the server needs back.
package natstest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Account is the account every test server's clients use.
const Account = server.DEFAULT_GLOBAL_ACCOUNT

// readyTimeout bounds a server's start, and every wait of this package.
const readyTimeout = 20 * time.Second

// Server is an embedded nats-server. The embedded *server.Server is the one
// running now; [Server.Restart] replaces it, so only the test's goroutine
// should use a Server.
type Server struct {
	*server.Server
	opts *server.Options // what every start of this server is a copy of
	urls []string        // what Connect dials: this server, or every node of its cluster
	up   bool
}

// Start runs a server with JetStream on file storage under a new temporary
// directory. It is shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	port := freePort(t)
	s := &Server{opts: &server.Options{
		Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	}, urls: []string{clientURL(port)}}
	s.start(t)
	t.Cleanup(s.Stop)
	return s
}

// start runs a new server with a copy of the server's options.
func (s *Server) start(t testing.TB) {
	t.Helper()
	ns, err := server.NewServer(s.opts.Clone())
	if err != nil {
		t.Fatalf("start nats-server %s: %v", s.opts.ServerName, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		ns.Shutdown()
		t.Fatalf("nats-server %s not ready for connections on port %d after %v (is the port taken?)",
			s.opts.ServerName, s.opts.Port, readyTimeout)
	}
	s.Server, s.up = ns, true
}

// Stop shuts the server down and waits until it has. Its clients see it go
// and keep trying to reconnect. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if !s.up {
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
	s.up = false
}

// Restart stops the server if it is running and starts it again with the
// same name, ports and store directory: its streams come back from disk,
// and clients that kept reconnecting find it at the same URL. A cluster
// node's restart returns once the node has caught up with the cluster's
// metadata.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	s.start(t)
	if s.opts.Cluster.Port != 0 {
		waitFor(t, "node "+s.opts.ServerName+" to catch up with the cluster's metadata", func() bool {
			return s.JetStreamIsCurrent()
		})
	}
}

// Running reports whether the server is running: started and not stopped
// since.
func (s *Server) Running() bool { return s.up }

// URLs is what Connect dials, comma-separated: the server's client URL, or
// for a node of a cluster every node's, so its clients fail over as a real
// deployment's do.
func (s *Server) URLs() string { return strings.Join(s.urls, ",") }

// Connect returns a client connection that reconnects forever, closed when
// the test ends. A node of a cluster connects to any node of it.
func (s *Server) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	return connect(t, s.urls)
}

// JetStream returns a JetStream context on a new connection.
func (s *Server) JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return jetStream(t, s.urls)
}

// Cluster is a 3-node JetStream cluster, nodes n0, n1 and n2, each with its
// own store directory, routed to one another over loopback TCP. Clients
// connect to every node's client URL.
type Cluster struct {
	Nodes []*Server
	urls  []string
}

// ClusterSize is the number of nodes of a [Cluster].
const ClusterSize = 3

// StartCluster runs a 3-node cluster and waits until it has elected a
// JetStream meta leader. Its nodes are shut down when the test ends.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	c := &Cluster{}
	clientPorts, routePorts := make([]int, ClusterSize), make([]int, ClusterSize)
	var routes []*url.URL
	for i := range ClusterSize {
		clientPorts[i], routePorts[i] = freePort(t), freePort(t)
		c.urls = append(c.urls, clientURL(clientPorts[i]))
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(routePorts[i]))})
	}
	for i := range ClusterSize {
		c.Nodes = append(c.Nodes, &Server{opts: &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "gpuq-test", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
		}, urls: c.urls})
	}
	// Start all three before waiting on any: a node is ready only once its
	// route listener is, and JetStream needs a quorum of them.
	var wg sync.WaitGroup
	errs := make([]error, ClusterSize)
	for i, n := range c.Nodes {
		ns, err := server.NewServer(n.opts.Clone())
		if err != nil {
			t.Fatalf("start nats-server %s: %v", n.opts.ServerName, err)
		}
		n.Server, n.up = ns, true
		t.Cleanup(n.Stop)
		go ns.Start()
		wg.Go(func() {
			if !ns.ReadyForConnections(readyTimeout) {
				errs[i] = fmt.Errorf("nats-server %s not ready for connections after %v", n.opts.ServerName, readyTimeout)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c.WaitMetaLeader(t)
	return c
}

// URLs is every node's client URL, comma-separated, as a client of the
// cluster is given them.
func (c *Cluster) URLs() string { return strings.Join(c.urls, ",") }

// Connect returns a client connection to any node, reconnecting forever,
// closed when the test ends.
func (c *Cluster) Connect(t testing.TB) *nats.Conn {
	t.Helper()
	return connect(t, c.urls)
}

// JetStream returns a JetStream context on a new connection.
func (c *Cluster) JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return jetStream(t, c.urls)
}

// WaitMetaLeader waits until a running node is the JetStream meta leader
// and every running node is current with it, and returns the leader.
func (c *Cluster) WaitMetaLeader(t testing.TB) *Server {
	t.Helper()
	var leader *Server
	waitFor(t, "a JetStream meta leader", func() bool {
		leader = nil
		for _, n := range c.Nodes {
			if !n.up {
				continue
			}
			if !n.JetStreamIsCurrent() {
				return false
			}
			if n.JetStreamIsLeader() {
				leader = n
			}
		}
		return leader != nil
	})
	return leader
}

// StreamLeader waits until a running node leads stream and returns it. For
// a bucket, stream is "KV_" and the bucket's name.
func (c *Cluster) StreamLeader(t testing.TB, stream string) *Server {
	t.Helper()
	var leader *Server
	waitFor(t, "a leader of stream "+stream, func() bool {
		leader = c.find(func(n *Server) bool { return n.JetStreamIsStreamLeader(Account, stream) })
		return leader != nil
	})
	return leader
}

// ConsumerLeader waits until a running node leads the consumer of stream
// and returns it.
func (c *Cluster) ConsumerLeader(t testing.TB, stream, consumer string) *Server {
	t.Helper()
	var leader *Server
	waitFor(t, "a leader of consumer "+consumer+" of "+stream, func() bool {
		leader = c.find(func(n *Server) bool { return n.JetStreamIsConsumerLeader(Account, stream, consumer) })
		return leader != nil
	})
	return leader
}

// WaitCurrent waits until every running node is current on each stream: it
// has a leader and the node has caught up with it.
func (c *Cluster) WaitCurrent(t testing.TB, streams ...string) {
	t.Helper()
	for _, stream := range streams {
		c.StreamLeader(t, stream)
		waitFor(t, "every running node to be current on "+stream, func() bool {
			for _, n := range c.Nodes {
				if n.up && !n.JetStreamIsStreamCurrent(Account, stream) {
					return false
				}
			}
			return true
		})
	}
}

// Node returns the node named name (n0, n1 or n2).
func (c *Cluster) Node(name string) *Server {
	for _, n := range c.Nodes {
		if n.opts.ServerName == name {
			return n
		}
	}
	return nil
}

// find returns the first running node for which ok holds, or nil.
func (c *Cluster) find(ok func(*Server) bool) *Server {
	for _, n := range c.Nodes {
		if n.up && ok(n) {
			return n
		}
	}
	return nil
}

func connect(t testing.TB, urls []string) *nats.Conn {
	t.Helper()
	u := strings.Join(urls, ",")
	nc, err := nats.Connect(u, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("connect to %s: %v", u, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func jetStream(t testing.TB, urls []string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := connect(t, urls)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}

// waitFor polls cond until it holds, failing the test after readyTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", readyTimeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func clientURL(port int) string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

var ports struct {
	sync.Mutex
	given map[int]bool
}

// freePort returns a loopback port that nothing listens on, below the
// ephemeral range, and not given out before in this process.
func freePort(t testing.TB) int {
	t.Helper()
	lo, hi := portRange()
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = map[int]bool{}
	}
	for range 1000 {
		p := lo + rand.IntN(hi-lo)
		if ports.given[p] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		if err := l.Close(); err != nil {
			t.Fatalf("close the probe of port %d: %v", p, err)
		}
		ports.given[p] = true
		return p
	}
	t.Fatalf("no free loopback port in [%d, %d)", lo, hi)
	return 0
}

// portRange is the range freePort draws from: from 10000 up to the
// kernel's ephemeral range, or above it where that leaves too little room.
func portRange() (lo, hi int) {
	eLo, eHi := 32768, 60999 // Linux's default
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			a, errA := strconv.Atoi(f[0])
			z, errZ := strconv.Atoi(f[1])
			if errA == nil && errZ == nil {
				eLo, eHi = a, z
			}
		}
	}
	if eLo-10000 >= 2000 {
		return 10000, eLo
	}
	return eHi + 1, 65535
}
