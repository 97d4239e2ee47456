package quota

import (
	"context"
	"testing"
	"time"

	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/quotatest"
	"github.com/allot/allot/internal/wire"
)

// TestFarDeadline: a context whose deadline is further away than the
// longest wait a bucket can have (wire.MaxQuotaWait, 31 days) bounds
// nothing, and Take is answered as without it. Before, the deadline was
// sent as max_wait and the service refused the request (400: max_wait
// longer than the limit).
func TestFarDeadline(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	quotatest.Start(t, natstest.Conn(t, s), map[string]string{
		"jobs": `{"default_bucket": {"size": 10, "fill_rate": 1}}`,
	})
	q := newClient(t, natstest.Conn(t, s), serviceTimeout())
	ctx, cancel := context.WithTimeout(context.Background(), wire.MaxQuotaWait+24*time.Hour)
	defer cancel()
	if res, err := q.Take(ctx, "jobs:nightly", 1); err != nil || res.Fallback || res.Remaining != 9 {
		t.Fatalf("take under a deadline 32 days away = %+v, %v; want OK with 9 remaining", res, err)
	}
}

// TestReportBounds: a report of more tokens than the service takes in one
// (wire.MaxQuotaTokens) is refused at once and changes nothing, and
// reports summed between two flushes are charged up to that bound. Before,
// both were sent, and the service ignored them: the charge was lost
// without a word, where Report promises it is never rejected.
func TestReportBounds(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	quotatest.Start(t, natstest.Conn(t, s), map[string]string{
		"bytes": `{"default_bucket": {"size": 1000000000000, "fill_rate": 1000000}}`,
	})
	q := newClient(t, natstest.Conn(t, s), WithReportInterval(time.Minute))
	if err := q.Report("bytes:backup", wire.MaxQuotaTokens+1); err == nil {
		t.Error("a report above the most tokens the service takes succeeded")
	}
	half := int64(wire.MaxQuotaTokens/2 + 1)
	for range 2 {
		if err := q.Report("bytes:backup", half); err != nil {
			t.Fatal(err)
		}
	}
	q.mu.Lock()
	pending := q.pending["bytes:backup"]
	q.mu.Unlock()
	if pending != wire.MaxQuotaTokens {
		t.Errorf("pending charge %d, want the sum saturated at %d", pending, int64(wire.MaxQuotaTokens))
	}
	if err := q.Close(); err != nil { // sends the pending reports
		t.Fatal(err)
	}
	peeker := newClient(t, natstest.Conn(t, s), serviceTimeout())
	poll.Until(t, 10*time.Second, "the summed reports charged", func() bool {
		p, err := peeker.Take(context.Background(), "bytes:backup", 0)
		return err == nil && p.Remaining < wire.MaxQuotaTokens/2
	})
}
