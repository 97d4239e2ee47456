package domain

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestDomainServerRefreshEveryThirdTTL: a held hold is refreshed every
// third of the ttl the service tells, on the agent's clock. The agent and
// the real domain server share a clock that moves only when the test
// moves it; after each refresh is answered the client's next one is due
// exactly ttl/3 later (its timer is pending at that time), the clock is
// moved there, and the refresh that follows keeps the hold alive through
// two ttls of the server's time.
func TestDomainServerRefreshEveryThirdTTL(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	// A third of the ttl is not a multiple of the agent's own timer (its
	// demand sample, every 500ms), so no other timer stands for it.
	const ttl = 3 * time.Second
	clk := clocktest.At(time.Now())
	srv := serveDomains(t, s, nsConfig(t, "app", serverConfig), ttl, false, clk.Peek)
	a, err := agent.New(natstest.Conn(t, s), agent.WithLogger(quiet), agent.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	c, err := New(a, domainWait())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })

	h, err := c.Reserve(context.Background(), "app:sandbox", "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	const steps = 6 // two ttls
	for i := range steps {
		due := clk.Peek().Add(ttl / 3)
		if !poll.Ok(20*time.Second, func() bool { return pendingAt(clk, due) }) {
			t.Fatalf("step %d: no refresh due ttl/3 (%v) after the last; timers pending in %v", i, ttl/3, fromNow(clk))
		}
		clk.Set(due)
		poll.Until(t, 20*time.Second, fmt.Sprintf("refresh %d at the server", i+1), func() bool { return srv.Stats().Refreshes >= uint64(i+1) })
	}
	if got := srv.Stats().Refreshes; got != steps {
		t.Errorf("the server had %d refreshes in two ttls; want %d, one every ttl/3", got, steps)
	}
	if err := h.Err(); err != nil || copiesHeld(srv) != 2 {
		t.Errorf("after two ttls the hold is %v and the server holds %d copies; want alive, 2", err, copiesHeld(srv))
	}
}

// pendingAt reports whether a timer of clk is pending at t.
func pendingAt(clk *clocktest.Fake, t time.Time) bool {
	for _, d := range clk.Deadlines() {
		if d.Equal(t) {
			return true
		}
	}
	return false
}

// fromNow is when clk's pending timers fire, from its time.
func fromNow(clk *clocktest.Fake) []time.Duration {
	now := clk.Peek()
	var out []time.Duration
	for _, d := range clk.Deadlines() {
		out = append(out, d.Sub(now))
	}
	return out
}
