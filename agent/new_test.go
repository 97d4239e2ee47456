package agent

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/internal/natstest"
)

// New refuses what cannot serve: a closed connection (an agent on it
// would only ever time out) and a bad client id, each with an error that
// says it is the agent's and that callers can tell apart.
func TestNewRefuses(t *testing.T) {
	s := natstest.Server(t)
	closed := natstest.Conn(t, s)
	closed.Close()
	if a, err := New(closed); err == nil || !errors.Is(err, nats.ErrConnectionClosed) || !strings.HasPrefix(err.Error(), "agent: ") {
		if a != nil {
			a.Close()
		}
		t.Fatalf("New on a closed connection: %v, want agent: … connection closed", err)
	}
	if _, err := New(natstest.Conn(t, s), WithClientID("has space")); err == nil || !strings.HasPrefix(err.Error(), "agent: ") {
		t.Fatalf("WithClientID(\"has space\"): %v, want an error starting agent:", err)
	}
}
