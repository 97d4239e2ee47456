package domain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// Failing open through the real path: a real nats-server, the real domain
// server, real agents; the leader is stopped so that no domain service
// answers (no responders), as in a leader's gap during a failover.

// gapTTL is the hold ttl of these tests: the agents refresh every third
// of it, and use a share only if told within one ttl before the service
// stopped answering, which must hold on a busy machine under -race.
const gapTTL = 2 * time.Second

// serveGap serves namespace "gap" of the document doc on a new
// nats-server, which it returns with the domain server.
func serveGap(t *testing.T, doc string) (*server.Server, *domainserver.Server) {
	t.Helper()
	s := natstest.Server(t)
	return s, serveDomains(t, s, nsConfig(t, "gap", doc), gapTTL, false, nil)
}

// holding returns a client of s, with id id, that holds n copies of
// gap:pool for domain.
func holding(t *testing.T, s *server.Server, id, domain string, n int64, opts ...Option) (*Client, *Hold) {
	t.Helper()
	c := newClient(t, natstest.Conn(t, s), id, append([]Option{domainWait()}, opts...)...)
	h, err := c.Reserve(context.Background(), "gap:pool", domain, n)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

// waitShare waits until c's share of gap:pool for domain has a global
// part of global (-1: any) and a domain part of dom (-1: any): the
// client has heard, from a refresh, of the other clients.
func waitShare(t *testing.T, c *Client, domain string, global, dom int64) {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("%s's share of %s to be %d/%d", c.clientID, domain, global, dom), func() bool {
		sh, ok := c.Share("gap:pool", domain)
		return ok && (global < 0 || sh.GlobalShare == global) && (dom < 0 || sh.DomainShare == dom)
	})
}

// reserveMany reserves 1 copy of gap:pool for domain n times as c, and
// returns the holds granted and the errors.
func reserveMany(c *Client, domain string, n int) (holds []*Hold, errs []error) {
	for range n {
		h, err := c.Reserve(context.Background(), "gap:pool", domain, 1)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		holds = append(holds, h)
	}
	return holds, errs
}

// copiesOf sums the copies of holds.
func copiesOf(holds []*Hold) int64 {
	var n int64
	for _, h := range holds {
		n += h.Copies()
	}
	return n
}

// TestGapBoundedByTheLimit: three clients hold a copy each of a pool
// whose global limit is 5 (or 11), the leader stops, and each client
// reserves again and again while no service answers. What they hold and
// granted themselves together stays within the limit: each grants itself
// its part of the room left, no more. Before shares, each of the 30
// reserves got a degraded hold: 33 copies of 5.
func TestGapBoundedByTheLimit(t *testing.T) {
	t.Parallel()
	for _, limit := range []int64{5, 11} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			t.Parallel()
			s, srv := serveGap(t, fmt.Sprintf("resources:\n  pool: {kind: copies, global_limit: %d}\n", limit))
			var clients []*Client
			var holds []*Hold
			for i := range 3 {
				c, h := holding(t, s, fmt.Sprintf("c%d", i), fmt.Sprintf("d%d", i), 1)
				clients, holds = append(clients, c), append(holds, h)
			}
			// 3 held; each client's share is its copy and a third of the
			// room left, once a refresh told it of the others.
			each := 1 + (limit-3)/3
			for i, c := range clients {
				waitShare(t, c, fmt.Sprintf("d%d", i), each, -1)
			}
			srv.Stop()
			for i, c := range clients {
				got, errs := reserveMany(c, fmt.Sprintf("d%d", i), 10)
				holds = append(holds, got...)
				for _, err := range errs {
					if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "above the client's share") {
						t.Fatalf("a refused degraded reserve: %v", err)
					}
				}
				if st := statsOf(c, "gap:pool"); st.Degraded != uint64(each-1) || st.DegradedRefused != uint64(10-(each-1)) || st.LocalCopies != each-1 {
					t.Errorf("client %d: %+v; want %d degraded, %d refused", i, st, each-1, 10-(each-1))
				}
			}
			if total := copiesOf(holds); total > limit || total != 3*each {
				t.Fatalf("during the gap the clients hold %d copies of a pool limited to %d; want %d", total, limit, 3*each)
			}
		})
	}
}

// TestGapSharesSpanDomainsAndGroups: a client's share of the global limit
// bounds its copies of all domains together, and a group's share its
// copies in the group's pool; a domain's share those of the domain.
func TestGapSharesSpanDomainsAndGroups(t *testing.T) {
	t.Parallel()
	t.Run("global", func(t *testing.T) {
		t.Parallel()
		s, srv := serveGap(t, "resources:\n  pool: {kind: copies, global_limit: 6}\n")
		c, ha := holding(t, s, "c", "a", 1)
		hb, err := c.Reserve(context.Background(), "gap:pool", "b", 1)
		if err != nil {
			t.Fatal(err)
		}
		// Alone: 2 held, all 4 left are its share; a domain alone could
		// take 5.
		waitShare(t, c, "b", 6, 6)
		srv.Stop()
		ga, _ := reserveMany(c, "a", 5)
		gb, _ := reserveMany(c, "b", 5)
		if total := copiesOf(append(append(ga, gb...), ha, hb)); total != 6 {
			t.Fatalf("copies of a and b during the gap: %d, want the global share of 6", total)
		}
	})
	t.Run("domain and group", func(t *testing.T) {
		t.Parallel()
		s, srv := serveGap(t, `
resources:
  pool:
    kind: copies
    domain_limit: 6
    groups: [{name: g, limit: 9, domains: [dx, dy]}]
`)
		a, ha := holding(t, s, "a", "dx", 1)
		b, hb := holding(t, s, "b", "dx", 1)
		c, hc := holding(t, s, "c", "dy", 1)
		// dx: 2 held of 6, 4 left among a and b; g: 3 held of 9, 6 left
		// among the three; dy: c alone, 5 left, but g gives it 2 more.
		waitShare(t, a, "dx", -1, 1+4/2)
		waitShare(t, b, "dx", -1, 1+4/2)
		poll.Until(t, 10*time.Second, "the group's share of c", func() bool {
			sh, ok := c.Share("gap:pool", "dy")
			return ok && len(sh.Groups) == 1 && sh.Groups[0] == GroupShare{"g", 1 + 6/3}
		})
		srv.Stop()
		holds := []*Hold{ha, hb, hc}
		for _, x := range []struct {
			c      *Client
			domain string
		}{{a, "dx"}, {b, "dx"}, {c, "dy"}} {
			got, _ := reserveMany(x.c, x.domain, 5)
			if len(got) != 2 {
				t.Errorf("%s got %d local holds of %s, want 2", x.c.clientID, len(got), x.domain)
			}
			holds = append(holds, got...)
		}
		var x int64
		for _, h := range holds {
			if h.Domain() == "dx" {
				x += h.Copies()
			}
		}
		if x != 6 || copiesOf(holds) != 9 {
			t.Fatalf("during the gap: %d copies of dx (limit 6), %d in group g (limit 9)", x, copiesOf(holds))
		}
	})
}

// TestGapFailModes: a namespace that fails closed grants nothing while no
// service answers, rate hits included; one that fails open grants the
// min copies of every call, as before shares, however many; one that
// shares grants hits as open does.
func TestGapFailModes(t *testing.T) {
	t.Parallel()
	const doc = `fail: %s
resources:
  pool: {kind: copies, global_limit: 5}
  api:
    kind: rate
    hard_limit: 1
    tiers: [{limit: 1, window: 1s, active: 1h}]
`
	ctx := context.Background()
	for _, mode := range []FailMode{FailClosed, FailOpen, FailShare} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			s, srv := serveGap(t, fmt.Sprintf(doc, mode))
			c, h := holding(t, s, "c", "d", 5)
			if _, err := c.Request(ctx, "gap:api", "d", 1); err != nil {
				t.Fatal(err)
			}
			if sh, ok := c.Share("gap:pool", "d"); !ok || sh.Fail != mode {
				t.Fatalf("share %+v, %v; want fail mode %s", sh, ok, mode)
			}
			srv.Stop()
			holds, errs := reserveMany(c, "d", 3)
			g, gerr := c.Request(ctx, "gap:api", "d", 1)
			st := statsOf(c, "gap:pool")
			switch mode {
			case FailClosed:
				if len(holds) != 0 || len(errs) != 3 || !errors.Is(errs[0], ErrUnavailable) || !strings.Contains(errs[0].Error(), "fails closed") {
					t.Fatalf("closed: %d holds, errors %v", len(holds), errs)
				}
				if !errors.Is(gerr, ErrUnavailable) || g.Granted != 0 {
					t.Fatalf("closed: Request = %+v, %v", g, gerr)
				}
				if st.DegradedRefused != 3 || st.Degraded != 0 || statsOf(c, "gap:api").DegradedRefused != 1 {
					t.Fatalf("closed: stats %+v", st)
				}
			case FailOpen:
				if copiesOf(holds) != 3 || copiesOf(holds)+h.Copies() <= 5 || st.Degraded != 3 {
					t.Fatalf("open: %d local copies beside the 5 held (stats %+v); want 3 past the limit", copiesOf(holds), st)
				}
				if gerr != nil || !g.Degraded || g.Granted != 1 {
					t.Fatalf("open: Request = %+v, %v", g, gerr)
				}
			case FailShare:
				if len(holds) != 0 || st.DegradedRefused != 3 {
					t.Fatalf("share: %d holds beside the 5 held; want none (stats %+v)", len(holds), st)
				}
				if gerr != nil || !g.Degraded || g.Granted != 1 {
					t.Fatalf("share: Request = %+v, %v; want a degraded grant", g, gerr)
				}
			}
		})
	}
}

// TestGapUnseenResource: a client that has had no answer about a
// namespace does not know its fail mode: it fails closed, or open with
// WithFailOpenUnseen.
func TestGapUnseenResource(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	ctx := context.Background()
	strict := newClient(t, natstest.Conn(t, s), "strict", domainWait())
	if h, err := strict.Reserve(ctx, "gap:pool", "d", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "fail mode is unknown") {
		t.Fatalf("Reserve of an unseen resource = %+v, %v; want ErrUnavailable", h, err)
	}
	if _, err := strict.Request(ctx, "gap:api", "d", 1); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Request of an unseen resource = %v; want ErrUnavailable", err)
	}
	if st := statsOf(strict, "gap:pool"); st.DegradedRefused != 1 || st.Degraded != 0 {
		t.Errorf("stats: %+v", st)
	}
	lenient := newClient(t, natstest.Conn(t, s), "lenient", domainWait(), WithFailOpenUnseen(true))
	if h, err := lenient.Reserve(ctx, "gap:pool", "d", 2, WithMinCopies(1)); err != nil || !h.Info().Degraded || h.Copies() != 1 {
		t.Fatalf("Reserve of an unseen resource, failing open = %+v, %v", h, err)
	}
	if g, err := lenient.Request(ctx, "gap:api", "d", 1); err != nil || !g.Degraded {
		t.Fatalf("Request of an unseen resource, failing open = %+v, %v", g, err)
	}
}

// TestGapShareAge: a share told more than one hold ttl before the service
// stopped answering is stale (the service no longer counts its client in
// the others' shares), while a holder's, renewed by its refreshes, stays
// good however long the gap lasts. The service and both agents share a
// clock that moves only when the test moves it: one refresh of the holder
// at a time, then far into the gap.
func TestGapShareAge(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	clk := clocktest.At(time.Now())
	srv := serveDomains(t, s, nsConfig(t, "gap", "resources:\n  pool: {kind: copies, global_limit: 10}\n"), gapTTL, false, clk.Peek)
	ctx := context.Background()
	holder := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
	quiet := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
	if _, err := holder.Reserve(ctx, "gap:pool", "h", 1); err != nil {
		t.Fatal(err)
	}
	qh, err := quiet.Reserve(ctx, "gap:pool", "q", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := qh.Close(); err != nil {
		t.Fatal(err)
	}
	told, _ := quiet.Share("gap:pool", "q")
	// Past one ttl after the quiet client's share was told, the holder
	// refreshing every third of it.
	for clk.Peek().Sub(told.At) <= gapTTL {
		due := clk.Peek().Add(gapTTL / 3)
		poll.Until(t, 20*time.Second, "the holder's refresh due", func() bool { return pendingAt(clk, due) })
		clk.Set(due)
		poll.Until(t, 20*time.Second, "the holder's refresh answered", func() bool {
			sh, ok := holder.Share("gap:pool", "h")
			return ok && sh.At.Equal(due)
		})
	}
	srv.Stop()
	// The holder's next refresh goes unanswered; its share was told a
	// refresh before. The gap then lasts two ttls.
	clk.Advance(gapTTL / 3)
	poll.Until(t, 20*time.Second, "the holder's refresh unanswered", func() bool { return statsOf(holder, "gap:pool").LastError != nil })
	clk.Advance(2 * gapTTL)
	if h, err := holder.Reserve(ctx, "gap:pool", "h", 1); err != nil || !h.Info().Degraded {
		t.Fatalf("the holder's Reserve late in the gap = %+v, %v; want a degraded hold", h, err)
	}
	if _, err := quiet.Reserve(ctx, "gap:pool", "q", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "older than one hold ttl") {
		t.Fatalf("Reserve with a stale share = %v; want it refused", err)
	}
	if _, err := quiet.Reserve(ctx, "gap:pool", "never", 1); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "no share of domain") {
		t.Fatalf("Reserve of a domain without a share = %v; want it refused", err)
	}
}
