package agent

import (
	"testing"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestEarlyRefreshGapFromEarlyOnly: WithMinRefreshGap spaces early
// refreshes (those a new resource triggers), not an early one from the
// regular refresh before it. A resource created just after a regular
// refresh, with the last early refresh longer than the gap ago, is asked
// for at once: on the agent's clock, frozen from then on, it gets its
// first lease. Before, the gap was counted from the regular refresh, so
// the new resource waited up to the gap (250ms) blocked at capacity 0,
// and the middleware's first request of a route, which waits 250ms by
// default for that lease, was refused with the global capacity unused.
func TestEarlyRefreshGapFromEarlyOnly(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	tmpl := testTemplate("*", 100)
	tmpl.LeaseLength = time.Hour // valid whatever the frozen clock reads
	startCoordinator(t, natstest.Conn(t, s), tmpl)
	clk := clocktest.At(time.Now())
	start := clk.Peek()
	a := newAgent(t, natstest.Conn(t, s), WithClock(clk))
	first, err := a.Rate("first", WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the first resource's lease (an early refresh)", func() bool { return first.Status().Leased })
	// The regular refresh is due within the refresh interval (300ms,
	// jittered down by at most 15%), more than the gap after the early one.
	at := start.Add(tmpl.RefreshInterval)
	clk.Set(at)
	poll.Until(t, 10*time.Second, "the regular refresh", func() bool { return !first.Status().LastRefresh.Before(at) })
	second, err := a.Rate("second", WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the second resource's lease with the clock stopped after the regular refresh", func() bool { return second.Status().Leased })
}
