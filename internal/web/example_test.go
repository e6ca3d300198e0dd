package web_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/nats-io/nats.go"

	"github.com/gpuq/gpuq/client"
	"github.com/gpuq/gpuq/internal/web"
)

// The wiring of gpuq dev and gpuq scheduler --http: a client on the
// process's connection, the server following the events stream, and the
// routes served until ctx ends.
func Example() {
	serve := func(ctx context.Context, nc *nats.Conn, log *slog.Logger) error {
		cl, err := client.New(nc)
		if err != nil {
			return err
		}
		s, err := web.New(web.Config{Client: cl, Logger: log})
		if err != nil {
			return err
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		go func() { _ = s.Run(ctx) }() // returns nil when ctx ends
		return web.Serve(ctx, l, s.Handler())
	}
	_ = serve // needs a running gpuq; cmd/gpuq's tests run it for real

	_, err := web.New(web.Config{})
	fmt.Println(err)
	// Output: web: Config.Client is required
}
