// Package limittest runs the integrations' tests against a real embedded
// NATS server, coordinator and agent.
package limittest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// Quiet discards logs.
var Quiet = slog.New(slog.DiscardHandler)

// Template is a FAIR_SHARE template refreshed every 300ms whose leases
// last a minute: the integrations' tests count what a lease in force
// admits, and a short lease lapses when one refresh's answer comes late
// on a loaded machine (the agent then applies its safe capacity, 0, and
// refuses what the test expects admitted).
func Template(glob string, capacity float64, shadow bool) *config.Template {
	return &config.Template{Name: "t-" + glob, Glob: glob, Capacity: capacity, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: time.Minute, RefreshInterval: 300 * time.Millisecond, Shadow: shadow}
}

// Agent starts a NATS server, a coordinator serving tmpls and an agent on
// it, all stopped when the test ends. The agent waits a minute for an
// answer: the coordinator runs until the end, and a refresh or release
// timing out on a loaded machine (the default waits 2s) is no test's
// subject.
func Agent(t *testing.T, tmpls ...*config.Template) *agent.Agent {
	t.Helper()
	return AgentWith(t, nil, tmpls...)
}

// AgentWith is Agent with opts added to the agent's options (a clock the
// test moves, for one).
func AgentWith(t *testing.T, opts []agent.Option, tmpls ...*config.Template) *agent.Agent {
	t.Helper()
	s := natstest.Server(t)
	coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{RoundInterval: 5 * time.Millisecond, Logger: Quiet,
		Templates: sources.StaticTemplates(config.NewSet(1, tmpls, nil))})
	a, err := agent.New(natstest.Conn(t, s), append([]agent.Option{agent.WithLogger(Quiet), agent.WithRequestTimeout(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// Unserved starts a NATS server and an agent on it that asks a node
// nobody serves, so no lease ever arrives; both stop when the test ends.
func Unserved(t *testing.T) *agent.Agent {
	t.Helper()
	a, err := agent.New(natstest.Conn(t, natstest.Server(t)), agent.WithNode("nobody"), agent.WithLogger(Quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}
