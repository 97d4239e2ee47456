package quota

import (
	"context"
	"testing"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
)

// TestDeadlineOnRealClock: a context's deadline passes on the real clock,
// whatever the agent's clock reads; a deadline a minute away leaves Take
// its fallback wait even when the agent's clock is an hour ahead.
func TestDeadlineOnRealClock(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	clk := clocktest.At(time.Now().Add(time.Hour))
	q := newClockedClient(t, natstest.Conn(t, s), clk, WithFallback("logins", 2, 2), WithCircuit(2, time.Hour))
	for range 2 {
		if _, err := q.Take(context.Background(), "logins:alice", 1); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res Result
	var err error
	waits := clocktest.Drive(t, clk, time.Minute, func() { res, err = q.Take(ctx, "logins:alice", 1) })
	if err != nil || res.Wait != 500*time.Millisecond || len(waits) != 1 {
		t.Fatalf("take under a deadline a minute away = %+v, %v after waits %v; want OK_WAIT of 500ms", res, err, waits)
	}
}
