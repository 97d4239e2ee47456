package domain

import (
	"context"
	"testing"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
)

// TestDeadlineOnRealClock: a context's deadline passes on the real clock,
// whatever the agent's clock reads; a deadline a minute away leaves a
// rejected Request its retries even when the agent's clock is an hour
// ahead.
func TestDeadlineOnRealClock(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"rate:api:search": 5})
	clk := clocktest.At(time.Now().Add(time.Hour))
	a := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
	f.set(func(f *fakeDomain) { f.rejectFirst = 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var g Grant
	var err error
	sleeps := clocktest.Drive(t, clk, driveHorizon, func() {
		g, err = a.Request(ctx, "api:search", "acme", 1, WithMaxWait(10*time.Second), WithBackoffBase(10*time.Millisecond))
	})
	if err != nil || g.Granted != 1 || g.Attempts != 2 {
		t.Fatalf("rejected once under a deadline a minute away = %+v, %v after sleeps %v; want granted on the retry", g, err, sleeps)
	}
}
