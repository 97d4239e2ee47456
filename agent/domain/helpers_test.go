package domain

import (
	"bytes"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
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
