package domain

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// TestCloseWakesRetries: a Request or Reserve sleeping between retries of
// a rejection returns agent.ErrClosed when the client is closed, as the
// agent's waiters do, instead of sleeping out its backoff (on this frozen
// clock, for ever) and asking a service it was told to stop asking. Before,
// the sleep ignored Close.
func TestCloseWakesRetries(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"request", "reserve"} {
		s := natstest.Server(t)
		f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"rate:api:search": 5, "jobs:sandbox": 5})
		f.set(func(f *fakeDomain) { f.rejectFirst = 1 << 20 })
		clk := clocktest.At(time.Now())
		c := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
		errc := make(chan error, 1)
		go func() {
			var err error
			if op == "request" {
				_, err = c.Request(context.Background(), "api:search", "acme", 1, WithMaxWait(time.Minute))
			} else {
				_, err = c.Reserve(context.Background(), "jobs:sandbox", "acme", 1, WithMaxWait(time.Minute))
			}
			errc <- err
		}()
		poll.Until(t, 10*time.Second, op+": the first rejection and the sleep after it", func() bool {
			n, _ := clk.Pending()
			return len(f.received(op)) == 1 && n > 0
		})
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if !errors.Is(err, agent.ErrClosed) {
				t.Errorf("%s sleeping between retries, after Close: %v, want ErrClosed", op, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still sleeping between retries 10s after Close", op)
		}
		if n := len(f.received(op)); n != 1 {
			t.Errorf("%s: %d attempts, want none after Close", op, n)
		}
	}
}
