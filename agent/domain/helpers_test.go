package domain

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newClient returns a domain client of a quiet agent on nc with client id
// id (the agent's default when empty), both closed when the test ends.
func newClient(t testing.TB, nc *nats.Conn, id string, opts ...Option) *Client {
	t.Helper()
	aopts := []agent.Option{agent.WithLogger(quiet)}
	if id != "" {
		aopts = append(aopts, agent.WithClientID(id))
	}
	a, err := agent.New(nc, aopts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	c, err := New(a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// lockedBuffer is an output safe for concurrent writers: a process's
// stdout and stderr, read while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// newClockedClient is newClient on clk's time. Its agent is closed at
// once (the client lives on without it), so that the only timers on clk
// are the client's.
func newClockedClient(t testing.TB, nc *nats.Conn, clk *clocktest.Fake, opts ...Option) *Client {
	t.Helper()
	a, err := agent.New(nc, agent.WithLogger(quiet), agent.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return c
}

// driveHorizon bounds the timers clocktest.Drive fires in these tests:
// the backoff sleeps, not a refresh loop's (a third of the fake service's
// 10s hold ttl), which it leaves pending.
const driveHorizon = 2 * time.Second
