package agent

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestHeldEarlyRefreshSleeps: while an overloaded service's Retry-After
// holds the refreshes back, a pending early refresh (a new resource) does
// not wake the agent's loop before the hold ends: its next timer is the
// demand sample's, not a millisecond away. Before, the loop woke every
// millisecond of the hold, a busy loop of up to the service's wait.
func TestHeldEarlyRefreshSleeps(t *testing.T) {
	t.Parallel()
	const wait = 3 * time.Second
	s := natstest.Server(t)
	var asked atomic.Int32
	overloaded(t, s, wait, &asked)
	clock := clocktest.New()
	start := clock.Peek()
	seen := make(chan string, 10)
	a := newAgent(t, natstest.Conn(t, s), WithClock(clock), WithOnChange(func(st Status) {
		select {
		case seen <- st.ResourceID:
		default: // never block the loop
		}
	}))
	if _, err := a.Rate("res", WithWants(10)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the refusal", func() bool {
		var se *ServiceError
		return errors.As(a.LastError(), &se) && se.Code == 503
	})
	if _, err := a.Rate("res2", WithWants(5)); err != nil { // an early refresh, held
		t.Fatal(err)
	}
	// The loop reports res2 once it has taken it in, having stopped the
	// timer it slept on; the timer it sets next is the one that counts.
	for id := range seen {
		if id == "res2" {
			break
		}
	}
	at := start.Add(300 * time.Millisecond) // past the gap, within the hold
	poll.Until(t, 10*time.Second, "the loop asleep", func() bool { n, _ := clock.Pending(); return n > 0 })
	clock.Set(at)
	poll.Until(t, 10*time.Second, "the loop asleep past "+at.String(), func() bool {
		n, first := clock.Pending()
		return n > 0 && first.After(at)
	})
	if _, first := clock.Pending(); first.Before(at.Add(100 * time.Millisecond)) {
		t.Errorf("the loop sleeps until %v, %v after the clock, within a %v hold", first, first.Sub(at), wait)
	}
}
