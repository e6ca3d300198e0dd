package natstest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ChildEnv names, in a child process of a test binary, the store directory
// of the nats-server the process is to run instead of its tests.
const ChildEnv = "GPUQ_TEST_CHILD_NATS_SERVER"

// ServeChild serves the nats-server of a child process [StartChild]
// started, and reports whether this process is one: the TestMain of a
// package that starts children calls it first and returns when it is true.
// The server runs with JetStream on file storage in $GPUQ_TEST_CHILD_NATS_SERVER,
// prints its client URL on a line of its own, and shuts down when its
// standard input closes.
func ServeChild() bool {
	dir := os.Getenv(ChildEnv)
	if dir == "" {
		return false
	}
	if err := serveChild(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return true
}

func serveChild(dir string) error {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: dir, NoLog: true, NoSigs: true})
	if err != nil {
		return err
	}
	ns.Start()
	if !ns.ReadyForConnections(readyTimeout) {
		return fmt.Errorf("nats-server in %s: not ready after %v", dir, readyTimeout)
	}
	fmt.Println(ns.ClientURL())
	_, err = io.Copy(io.Discard, os.Stdin)
	ns.Shutdown()
	ns.WaitForShutdown()
	return err
}

// StartChild runs a nats-server with JetStream on file storage under a new
// temporary directory in a child process: the test binary again, whose
// TestMain calls [ServeChild]. The server's CPU and memory are then its
// own, apart from the test's, as a standalone nats-server's are in a
// deployment; [Server.Process] is the child, for a benchmark to read its
// CPU time. It is stopped when the test ends. A child server cannot be
// restarted.
func StartChild(t testing.TB) *Server {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), ChildEnv+"="+t.TempDir())
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Server{up: true, child: cmd, childIn: stdin}
	t.Cleanup(func() {
		if err := s.stopChild(); err != nil {
			t.Errorf("the child nats-server: %v", err)
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		u := strings.TrimSpace(l)
		if u == "" {
			t.Fatal("the child nats-server printed no URL (does TestMain call natstest.ServeChild?)")
		}
		s.urls = []string{u}
	case <-time.After(readyTimeout):
		t.Fatalf("the child nats-server printed no URL within %v", readyTimeout)
	}
	return s
}

// Process is the child process a server started by [StartChild] runs in,
// nil for a server in the test's own process.
func (s *Server) Process() *os.Process {
	if s.child == nil {
		return nil
	}
	return s.child.Process
}

// stopChild closes the child's standard input, which shuts its server down,
// and waits for it to exit; it returns how the child ended, the same each
// time it is called.
func (s *Server) stopChild() error {
	if s.up {
		s.up = false
		s.childErr = s.childIn.Close()
		if err := s.child.Wait(); s.childErr == nil {
			s.childErr = err
		}
	}
	return s.childErr
}
