// Package natstest runs real nats-servers with JetStream inside a test
// process, on file storage in temporary directories: a single server
// ([Start]) or a 3-node cluster ([StartCluster]). Every server listens on a
// loopback port of its own that it keeps across [Server.Restart], with its
// store directory, so a test can take a server away for as long as it likes
// and bring it back where its clients reconnect to it.
//
// A cluster node can go two ways. [Server.Stop] is a clean shutdown: the
// node first hands the leadership of every stream and consumer it leads to
// another node. [Cluster.Kill] is a crash, as SIGKILL or a lost machine is:
// the other nodes hear nothing more from it, and elect new leaders only when
// their election timeouts (4 to 9 seconds) run out. It works because the
// nodes' routes pass through proxies of this package: Kill cuts every route
// before the node shuts down, so its hand-overs reach no one.
//
// [StartCluster] and a node's [Server.Restart] return only once the routes
// between the nodes have settled: while two nodes drop the duplicate routes
// they dialled to one another, a message can be lost, and a request whose
// reply is lost waits out its whole timeout.
//
// Ports are picked below the kernel's ephemeral range: a client that keeps
// dialling a stopped server's port from an ephemeral port can then never
// connect to itself and hold the port the server needs back.
package natstest

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
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
	// route is the proxy the other nodes of its cluster reach it through,
	// and cluster the cluster; both nil for a single server.
	route   *routeProxy
	cluster *Cluster
	// child and childIn are the process a server of [StartChild] runs in
	// and its standard input; nil for a server in this process.
	child    *exec.Cmd
	childIn  io.WriteCloser
	childErr error // how the child ended, once stopped
}

// Start runs a server with JetStream on file storage under a new temporary
// directory. It is shut down when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	store := t.TempDir()
	// Another test process may take the port between freePort's probe and
	// the server's listen (a server of its own coming back on its old
	// port): then try another port.
	for try := 1; ; try++ {
		port := freePort(t)
		s := &Server{opts: &server.Options{
			Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: store,
			NoLog: true, NoSigs: true,
		}, urls: []string{clientURL(port)}}
		err := s.tryStart(startTimeout)
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if try == 3 {
			t.Fatal(err)
		}
	}
}

// startTimeout bounds a first start on a fresh port, which is quick unless
// the port was taken meanwhile.
const startTimeout = 5 * time.Second

// start runs a new server with a copy of the server's options.
func (s *Server) start(t testing.TB) {
	t.Helper()
	if err := s.tryStart(readyTimeout); err != nil {
		t.Fatal(err)
	}
}

// tryStart runs a new server with a copy of the server's options and waits
// up to timeout for it to take connections.
func (s *Server) tryStart(timeout time.Duration) error {
	ns, err := server.NewServer(s.opts.Clone())
	if err != nil {
		return fmt.Errorf("start nats-server %s: %w", s.opts.ServerName, err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(timeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("nats-server %s not ready for connections on port %d after %v (is the port taken?)",
			s.opts.ServerName, s.opts.Port, timeout)
	}
	s.Server, s.up = ns, true
	return nil
}

// Stop shuts the server down and waits until it has. Its clients see it go
// and keep trying to reconnect. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if !s.up {
		return
	}
	if s.child != nil {
		_ = s.stopChild() // kept: the test's cleanup reports how the child ended
		return
	}
	s.Shutdown()
	s.WaitForShutdown()
	s.up = false
	if s.route != nil {
		// While the node is down its proxy refuses, as its port would:
		// a proxy that accepted and then hung up would make the other
		// nodes churn through routes that close at once.
		s.route.cut()
	}
}

// Restart stops the server if it is running and starts it again with the
// same name, ports and store directory: its streams come back from disk,
// and clients that kept reconnecting find it at the same URL. A cluster
// node's restart returns once the node is routed to the others again, the
// routes have settled and the meta leader counts it online; its streams
// may still be catching up (see [Cluster.WaitCurrent]).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.child != nil {
		t.Fatal("natstest: a child server cannot be restarted")
	}
	s.Stop()
	s.start(t)
	if s.cluster != nil {
		s.route.open(t)
		s.cluster.WaitMetaLeader(t)
		s.cluster.waitRoutesSettled(t)
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
// own store directory, routed to one another over loopback TCP through a
// proxy in front of each node's route port. Clients connect to every node's
// client URL.
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
	proxies := make([]*routeProxy, ClusterSize)
	var routes []*url.URL
	for i := range ClusterSize {
		clientPorts[i], routePorts[i] = freePort(t), freePort(t)
		proxies[i] = &routeProxy{port: freePort(t), target: routePorts[i]}
		proxies[i].open(t)
		t.Cleanup(proxies[i].cut)
		c.urls = append(c.urls, clientURL(clientPorts[i]))
		routes = append(routes, &url.URL{Scheme: "nats-route", Host: proxies[i].addr()})
	}
	for i := range ClusterSize {
		// Advertising the proxy, which is also a configured route, keeps
		// the nodes from dialling one another's route ports directly.
		c.Nodes = append(c.Nodes, &Server{opts: &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: clientPorts[i],
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "gpuq-test", Host: "127.0.0.1", Port: routePorts[i], Advertise: proxies[i].addr()},
			Routes:  routes,
		}, urls: c.urls, route: proxies[i], cluster: c})
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
	c.waitRoutesSettled(t)
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

// WaitMetaLeader waits until a running node is the JetStream meta leader,
// every running node is current with it, and the leader counts every
// running node online (else it refuses to place replicas on the missing
// ones), and returns the leader.
func (c *Cluster) WaitMetaLeader(t testing.TB) *Server {
	t.Helper()
	var leader *Server
	waitFor(t, "a JetStream meta leader that sees every running node", func() bool {
		leader = nil
		running := 0
		for _, n := range c.Nodes {
			if !n.up {
				continue
			}
			running++
			if !n.JetStreamIsCurrent() {
				return false
			}
			if n.JetStreamIsLeader() {
				leader = n
			}
		}
		return leader != nil && len(leader.JetStreamClusterPeers()) == running
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
// has a leader, every other running node follows it, and each holds at
// least every message the leader held when the check began. (A restarted
// node can call itself current before it has heard what it missed.)
func (c *Cluster) WaitCurrent(t testing.TB, streams ...string) {
	t.Helper()
	for _, stream := range streams {
		waitFor(t, "every running node to be current on "+stream, func() bool {
			leader := c.find(func(n *Server) bool { return n.JetStreamIsStreamLeader(Account, stream) })
			if leader == nil {
				return false
			}
			want, ok := lastSeq(leader, stream)
			if !ok {
				return false
			}
			for _, n := range c.Nodes {
				if !n.up || n == leader {
					continue
				}
				if !n.JetStreamIsStreamCurrent(Account, stream) {
					return false
				}
				if got, ok := lastSeq(n, stream); !ok || got < want {
					return false
				}
			}
			return true
		})
	}
}

// lastSeq is the last sequence of the node's own copy of stream.
func lastSeq(n *Server, stream string) (uint64, bool) {
	acc, err := n.JszAccount(&server.JSzOptions{Account: Account, Streams: true})
	if err != nil {
		return 0, false
	}
	for _, sd := range acc.Streams {
		if sd.Name == stream {
			return sd.State.LastSeq, true
		}
	}
	return 0, false
}

// Kill stops node as a crash would: first every route of the cluster is
// cut, so nothing the node sends from then on reaches another node, in
// particular not the hand-over of the leaderships it holds; then it shuts
// down; then the routes between the other nodes come back (they reconnect
// within a second or two). The other nodes elect new leaders for what the
// node led once their election timeouts run out. [Server.Restart] brings
// the node back.
func (c *Cluster) Kill(t testing.TB, node *Server) {
	t.Helper()
	if node.cluster != c {
		t.Fatalf("Kill: %s is not a node of this cluster", node.opts.ServerName)
	}
	for _, n := range c.Nodes {
		n.route.cut()
	}
	node.Stop()
	for _, n := range c.Nodes {
		if n.up {
			n.route.open(t)
		}
	}
	// The survivors redial one another: wait out the duplicate routes, as
	// StartCluster does, so no reply is lost while they are dropped.
	c.waitRoutesSettled(t)
}

// routesQuiet is how long the routes between the nodes must stay the same
// before the cluster counts as formed: longer than the second after which
// a node tries a route again, so the duplicates that two nodes dialling one
// another create have been dropped. A message crossing a route while it is
// dropped as a duplicate can be lost, and a request whose reply is lost
// waits out its whole timeout.
const routesQuiet = 1500 * time.Millisecond

// waitRoutesSettled waits until every running node has routes to every
// other and the set of routes has not changed for routesQuiet.
func (c *Cluster) waitRoutesSettled(t testing.TB) {
	t.Helper()
	var last string
	var since time.Time
	waitFor(t, "the routes between the nodes to settle", func() bool {
		var sig []string
		for _, n := range c.Nodes {
			if !n.up {
				continue
			}
			rz, err := n.Routez(nil)
			if err != nil {
				return false
			}
			peers := map[string]bool{}
			for _, r := range rz.Routes {
				peers[r.RemoteName] = true
				sig = append(sig, fmt.Sprintf("%s:%d", n.opts.ServerName, r.Rid))
			}
			for _, m := range c.Nodes {
				if m != n && m.up && !peers[m.opts.ServerName] {
					last = ""
					return false
				}
			}
		}
		slices.Sort(sig)
		now := strings.Join(sig, ",")
		if now != last {
			last, since = now, time.Now()
			return false
		}
		return time.Since(since) >= routesQuiet
	})
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

// routeProxy forwards TCP connections from its port to a node's route port,
// until cut.
type routeProxy struct {
	port, target int
	mu           sync.Mutex
	l            net.Listener      // nil while cut
	conns        map[net.Conn]bool // both ends of every forwarded connection
	wg           sync.WaitGroup
}

func (p *routeProxy) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// open starts accepting on the proxy's port; it does nothing if it already
// does.
func (p *routeProxy) open(t testing.TB) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		return
	}
	l, err := net.Listen("tcp", p.addr())
	if err != nil {
		t.Fatalf("route proxy on %s: %v", p.addr(), err)
	}
	p.l, p.conns = l, map[net.Conn]bool{}
	p.wg.Go(func() { p.accept(l) })
}

func (p *routeProxy) accept(l net.Listener) {
	for {
		in, err := l.Accept()
		if err != nil {
			return // cut
		}
		p.wg.Go(func() { p.forward(l, in) })
	}
}

// forward pipes in to a new connection to the target, both ways, until
// either side closes or the proxy is cut.
func (p *routeProxy) forward(l net.Listener, in net.Conn) {
	out, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.target)))
	if err != nil {
		_ = in.Close() // the node is down: the dialler sees the route refused
		return
	}
	p.mu.Lock()
	if p.l != l { // cut while dialling
		p.mu.Unlock()
		_, _ = in.Close(), out.Close()
		return
	}
	p.conns[in], p.conns[out] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		// Copy ends, with or without an error, when either side closes or
		// the proxy is cut: the end of a route is all it has to report.
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	_, _ = in.Close(), out.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}

// cut stops accepting and closes every forwarded connection, and waits
// until the proxy's goroutines have ended.
func (p *routeProxy) cut() {
	p.mu.Lock()
	if p.l == nil {
		p.mu.Unlock()
		return
	}
	_ = p.l.Close() // ends accept
	p.l = nil
	for c := range p.conns {
		_ = c.Close() // ends its forward
	}
	p.mu.Unlock()
	p.wg.Wait()
}
