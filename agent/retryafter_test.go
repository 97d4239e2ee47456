package agent

import (
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
)

// TestRefreshKeepsToRetryAfter: an overloaded service refuses with 503
// and Allot-Retry-After; the agent sends nothing more until that wait has
// passed, though its own backoff (100 ms at first) and an early refresh
// (a new resource) would ask sooner, and asks again once it has.
func TestRefreshKeepsToRetryAfter(t *testing.T) {
	const wait = 3 * time.Second
	s := natstest.Server(t)
	var asked atomic.Int32
	overloaded(t, s, wait, &asked)

	clock := clocktest.New()
	start := clock.Peek()
	a := newAgent(t, natstest.Conn(t, s), WithClock(clock), WithClientID("shed"))
	if _, err := a.Rate("res", WithWants(10)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the refusal", func() bool {
		var se *ServiceError
		return errors.As(a.LastError(), &se) && se.Code == 503 && se.RetryAfter == wait
	})
	// parked waits until the loop has gone round at the clock's time and
	// waits on a timer again: whatever it was going to send, it has sent.
	parked := func() {
		t.Helper()
		poll.Until(t, 10*time.Second, "the agent's loop to wait again", func() bool {
			n, first := clock.Pending()
			return n > 0 && first.After(clock.Peek())
		})
	}
	parked()
	if n := asked.Load(); n != 1 {
		t.Fatalf("%d requests before any time passed, want 1", n)
	}
	// A second resource asks for an early refresh; it too must wait.
	if _, err := a.Rate("res2", WithWants(5)); err != nil {
		t.Fatal(err)
	}
	for at := 100 * time.Millisecond; at < wait; at += 100 * time.Millisecond {
		clock.Set(start.Add(at))
		parked()
		if n := asked.Load(); n != 1 {
			t.Fatalf("%d requests %v after a refusal that asked for %v, want 1", n, at, wait)
		}
	}
	clock.Set(start.Add(wait + 100*time.Millisecond))
	poll.Until(t, 10*time.Second, "a request once the wait has passed", func() bool { return asked.Load() >= 2 })
}

// overloaded answers every capacity request on s's node root with an
// overloaded service's 503 and an Allot-Retry-After of wait, counting
// them in asked.
func overloaded(t *testing.T, s *server.Server, wait time.Duration, asked *atomic.Int32) {
	t.Helper()
	nc := natstest.Conn(t, s)
	sub, err := nc.Subscribe("allot.root.capacity.*", func(m *nats.Msg) {
		asked.Add(1)
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set("Nats-Service-Error-Code", "503")
		reply.Header.Set("Nats-Service-Error", "overloaded: retry after "+wait.String())
		reply.Header.Set(wire.HeaderRetryAfter, strconv.FormatInt(wait.Milliseconds(), 10))
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}
