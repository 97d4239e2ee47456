package domain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestHugeRetryAfterIsBounded: a service (broken or hostile) that asks for
// a wait of 2^53 milliseconds, which overflows a Duration when multiplied
// to nanoseconds, makes the client wait at most a minute, and a rejection
// reports that minute, never a negative wait.
func TestHugeRetryAfterIsBounded(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"api:db": 5})
	f.set(func(f *fakeDomain) { f.learning, f.retryMillis = 1000, 1<<53 })
	c := newClient(t, natstest.Conn(t, s), "", domainWait())
	_, err := c.Reserve(context.Background(), "api:db", "acme", 1, WithMaxWait(100*time.Millisecond))
	var rej *RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("reserve while the service learns = %v; want a RejectedError", err)
	}
	if rej.RetryAfter != time.Minute || rej.Attempts != 1 {
		t.Errorf("rejected after %d attempts with RetryAfter %v; want 1 attempt and the wait bounded to a minute", rej.Attempts, rej.RetryAfter)
	}
}

// TestHugeHoldTTLIsBounded: a hold ttl of 2^50 milliseconds (which wraps
// to about 23 years when multiplied to nanoseconds) is taken as the
// longest ttl a domain service may have, so the hold is refreshed a third
// of that later, not decades later. The client's loop wakes every minute;
// the clock is moved a minute at a time, each time to its pending timer.
func TestHugeHoldTTLIsBounded(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"api:db": 5})
	f.set(func(f *fakeDomain) { f.ttlMillis = 1 << 50 })
	clk := clocktest.At(time.Now())
	c := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
	if _, err := c.Reserve(context.Background(), "api:db", "acme", 1); err != nil {
		t.Fatal(err)
	}
	start := clk.Peek()
	for i := time.Duration(1); i <= domainwire.MaxHoldTTL/3/time.Minute; i++ {
		due := start.Add(i * time.Minute)
		if !poll.Ok(20*time.Second, func() bool { return pendingAt(clk, due) }) {
			t.Fatalf("minute %d: no timer due; pending in %v", i, fromNow(clk))
		}
		clk.Set(due)
	}
	if !poll.Ok(20*time.Second, func() bool { return len(f.received(domainwire.OpRefresh)) > 0 }) {
		t.Fatalf("no refresh a third of %v after the reserve", domainwire.MaxHoldTTL)
	}
}
