// Package natstest starts embedded nats-servers for tests: random ports,
// temporary JetStream stores, shut down when the test ends.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/embed"
)

// Server starts a JetStream-enabled server on a random loopback port.
// ReadyWait bounds how long a test server may take to accept clients. A
// server with JetStream sets up its store before it listens, which takes
// seconds on a busy machine under the race detector; the bound only keeps
// a broken start from hanging a test.
const ReadyWait = time.Minute

func Server(tb testing.TB) *server.Server {
	tb.Helper()
	s, err := embed.Start(embed.Options{StoreDir: tb.TempDir()})
	if err != nil {
		tb.Fatalf("start nats-server: %v", err)
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Conn connects to s and closes the connection when the test ends.
func Conn(tb testing.TB, s *server.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	opts = append([]nats.Option{nats.Timeout(5 * time.Second), nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		tb.Fatalf("connect to %s: %v", s.ClientURL(), err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// MaxPayloadServer starts a JetStream-enabled server on a random loopback
// port whose max_payload is maxPayload bytes.
func MaxPayloadServer(tb testing.TB, maxPayload int32) *server.Server {
	tb.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, MaxPayload: maxPayload, JetStream: true, StoreDir: tb.TempDir(),
		NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	go s.Start()
	tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(ReadyWait) {
		tb.Fatal("nats-server not ready for connections")
	}
	return s
}
