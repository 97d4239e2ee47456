package domain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/replica"
)

// These tests drive the agent through the real domain server
// (domainserver), one partition on an embedded nats-server, with the
// real clock and a short hold ttl.

// serverConfig is namespace "app" (docs/domains.md): a rate resource
// "api" and copy resources "sandbox" and "gpu".
const serverConfig = `
resources:
  api:
    kind: rate
    hard_limit: 5
    tiers:
      - {limit: 5, window: 1s, active: 1h}
  sandbox: {kind: copies, domain_limit: 5, global_limit: 8}
  gpu: {kind: copies, domain_limit: 3}
`

// nsConfig serves namespace ns, read from the document doc.
func nsConfig(t *testing.T, ns, doc string) domainserver.Config {
	t.Helper()
	n, err := domainlimit.ParseNamespace(ns, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	cfg := map[string]*domainlimit.Namespace{ns: n}
	return sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return cfg })
}

// startDomainServer starts a domain server of namespace "app"
// (serverConfig) on s with hold ttl ttl; learn makes it a new leader that
// learns the holds for one ttl.
func startDomainServer(t *testing.T, s *server.Server, ttl time.Duration, learn bool) *domainserver.Server {
	t.Helper()
	return serveDomains(t, s, nsConfig(t, "app", serverConfig), ttl, learn, nil)
}

// startClockedServer is startDomainServer on clk's time.
func startClockedServer(t *testing.T, s *server.Server, clk *serverClock, ttl time.Duration, learn bool) *domainserver.Server {
	t.Helper()
	return serveDomains(t, s, nsConfig(t, "app", serverConfig), ttl, learn, clk.now)
}

// serveDomains starts a domain server of cfg on s, as startDomainServer
// does, on the clock now (nil: the real one).
func serveDomains(t *testing.T, s *server.Server, cfg domainserver.Config, ttl time.Duration, learn bool, now func() time.Time) *domainserver.Server {
	t.Helper()
	// The servers of a test share a seal key, as replicas of a node share
	// the one in the state bucket.
	if now == nil {
		now = time.Now
	}
	o := domainserver.Options{Config: cfg, HoldTTL: ttl, SealKey: []byte("the seal key of the agent's tests"), Logger: slog.New(slog.DiscardHandler), Now: now}
	if learn {
		o.LearnUntil = now().Add(ttl)
	}
	srv, err := domainserver.New(natstest.Conn(t, s), o)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func copiesHeld(srv *domainserver.Server) int64 { return srv.Stats().CopiesHeld }

// serverClock is a domain server's clock that moves only when the test
// advances it: which holds expire is then up to the test, not to the
// machine's speed. The agents still refresh on the real clock.
type serverClock struct {
	mu sync.Mutex
	t  time.Time
}

func newServerClock() *serverClock { return &serverClock{t: time.Now()} }

func (c *serverClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *serverClock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// kept is a hold the test expects its client to keep alive: the client
// and the hold's resource and domain.
type kept struct {
	c                *Client
	resource, domain string
}

// outlive advances clk by steps of d, each once every client of ks has
// the reply to a refresh sent after the previous step (the share of its
// domain is from then): the server handled it at clk's latest time. The
// holds of ks then live through steps*d of the server's time, whatever
// the machine's speed, if and only if their clients keep refreshing them;
// those no client refreshes expire after the server's ttl.
func outlive(t *testing.T, clk *serverClock, d time.Duration, steps int, ks ...kept) {
	t.Helper()
	for range steps {
		clk.add(d)
		moved := time.Now()
		poll.Until(t, 20*time.Second, "refreshes after the clock moved", func() bool {
			for _, k := range ks {
				if sh, ok := k.c.Share(k.resource, k.domain); !ok || !sh.At.After(moved) {
					return false
				}
			}
			return true
		})
	}
}

// domainWait sets the domain timeout of agents whose test needs the
// serving domain service's answers: past the default (500ms), which a
// request may take under -race on a loaded machine, Request and Reserve
// fail open and the counts under test are not the service's.
func domainWait() Option { return WithTimeout(10 * time.Second) }

// TestDomainServerRequestReserve: grants, rejections with the context
// data, the wrong kind of resource and an unknown one as client errors.
func TestDomainServerRequestReserve(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	srv := startDomainServer(t, s, time.Second, false)
	a := newClient(t, natstest.Conn(t, s), "", domainWait())
	ctx := context.Background()

	g, err := a.Request(ctx, "app:api", "acme", 8, WithMinCopies(2))
	if err != nil || g.Granted != 5 || g.HardLimit != 5 || g.GlobalLimit != -1 || g.Degraded {
		t.Fatalf("Request 8 min 2 under a hard limit of 5 = %+v, %v", g, err)
	}
	_, err = a.Request(ctx, "app:api", "acme", 1)
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Grant == nil || !rej.Grant.HardLimited || rej.Grant.DomainHitsLastSecond != 5 {
		t.Fatalf("Request at the limit = %v (%+v); want a hard-limited rejection", err, rej)
	}
	h, err := a.Reserve(ctx, "app:sandbox", "acme", 9, WithMinCopies(1))
	if err != nil || h.Copies() != 5 || h.Info().DomainLimit != 5 || h.Info().GlobalLimit != 8 {
		t.Fatalf("Reserve 9 min 1 = %+v, %v; want the domain limit, 5", h, err)
	}
	if copiesHeld(srv) != 5 {
		t.Errorf("server holds %d", copiesHeld(srv))
	}
	if err := h.Release(ctx, 2); err != nil || h.Copies() != 3 || copiesHeld(srv) != 3 {
		t.Fatalf("Release 2: %v; hold %d, server %d", err, h.Copies(), copiesHeld(srv))
	}
	if err := h.Release(ctx, 4); err == nil || copiesHeld(srv) != 3 {
		t.Fatalf("over-release accepted or counted: %v, server %d", err, copiesHeld(srv))
	}
	var se *agent.ServiceError
	if _, err := a.Request(ctx, "app:sandbox", "acme", 1); !errors.As(err, &se) || se.Code >= 500 {
		t.Errorf("request on a copy resource = %v; want a client error", err)
	}
	if _, err := a.Reserve(ctx, "app:nosuch", "acme", 1); !errors.As(err, &se) || se.Code != 404 {
		t.Errorf("reserve of an unknown resource = %v; want 404", err)
	}
	if err := h.Close(); err != nil || copiesHeld(srv) != 0 {
		t.Fatalf("Close: %v; server holds %d", err, copiesHeld(srv))
	}
}

// TestDomainServerClientDies: a client whose connection dies mid-hold
// loses its holds within the ttl, while a live client's holds outlive
// many ttls; Agent.Close gives its holds back at once.
func TestDomainServerClientDies(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	const ttl = 500 * time.Millisecond
	clk := newServerClock()
	srv := startClockedServer(t, s, clk, ttl, false)
	ctx := context.Background()

	doomedConn := natstest.Conn(t, s)
	doomed := newClient(t, doomedConn, "doomed", domainWait())
	live := newClient(t, natstest.Conn(t, s), "live", domainWait())
	if _, err := doomed.Reserve(ctx, "app:sandbox", "acme", 4); err != nil {
		t.Fatal(err)
	}
	lh, err := live.Reserve(ctx, "app:sandbox", "other", 3)
	if err != nil {
		t.Fatal(err)
	}
	if copiesHeld(srv) != 7 {
		t.Fatalf("server holds %d; want 7", copiesHeld(srv))
	}
	if _, err := live.Reserve(ctx, "app:sandbox", "other", 2); !errors.Is(err, ErrRejected) {
		t.Fatalf("beyond the global limit of 8 = %v; want a rejection", err)
	}
	doomedConn.Close() // the process dies: no release, no refresh
	// One and a half ttls on the server's clock: the dead client's hold
	// expires at its next sweep, the live client's does not.
	live1 := kept{live, "app:sandbox", "other"}
	outlive(t, clk, ttl/2, 3, live1)
	poll.Until(t, 10*time.Second, "the dead client's holds to expire", func() bool { return copiesHeld(srv) == 3 })
	// The live client's hold is still there three ttls later.
	outlive(t, clk, ttl/2, 6, live1)
	if copiesHeld(srv) != 3 || lh.Err() != nil || lh.Copies() != 3 {
		t.Fatalf("after 3 ttls: server holds %d, live hold lost %v", copiesHeld(srv), (lh.Err() != nil))
	}
	// The freed copies can be reserved again.
	if h, err := live.Reserve(ctx, "app:sandbox", "acme", 5); err != nil || h.Copies() != 5 {
		t.Fatalf("Reserve of the freed copies = %v", err)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	if copiesHeld(srv) != 0 {
		t.Errorf("after Agent.Close the server holds %d", copiesHeld(srv))
	}
}

// TestDomainServerLeaderChange: the leader dies mid-hold and a new one
// starts empty, learning the holds from the agents' refreshes: the holds
// survive with exact counts, a reserve during learning waits for it
// within its max wait, and requests while no leader is there fail open.
// The servers run on a clock the test moves, so that learning ends only
// once the holds are learned, however slow the machine.
func TestDomainServerLeaderChange(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	const ttl = 400 * time.Millisecond
	clk := newServerClock()
	old := startClockedServer(t, s, clk, ttl, false)
	ctx := context.Background()
	a := newClient(t, natstest.Conn(t, s), "a", domainWait())
	b := newClient(t, natstest.Conn(t, s), "b", domainWait())
	ha, err := a.Reserve(ctx, "app:sandbox", "acme", 4)
	if err != nil {
		t.Fatal(err)
	}
	hg, err := a.Reserve(ctx, "app:gpu", "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Reserve(ctx, "app:sandbox", "other", 3)
	if err != nil {
		t.Fatal(err)
	}
	old.Stop()
	// No leader: a request fails open (the namespace's fail mode, which
	// the reserves told, is share, which bounds holds only).
	if g, err := a.Request(ctx, "app:api", "acme", 3, WithMinCopies(1)); err != nil || !g.Degraded || g.Granted != 1 {
		t.Fatalf("Request without a leader = %+v, %v; want a degraded grant of 1", g, err)
	}
	// The agents keep their holds through the outage, their refreshes
	// unanswered.
	poll.Until(t, 20*time.Second, "a refresh of each agent to go unanswered", func() bool {
		return lastError(a, "app:sandbox") != nil && lastError(b, "app:sandbox") != nil
	})
	srv := startClockedServer(t, s, clk, ttl, true)
	// A reserve while the new leader learns is answered "learning" and
	// retried after it; by then the old holds are known, so only 1 copy
	// of the global 8 is left.
	type reserved struct {
		h   *Hold
		err error
	}
	third := make(chan reserved, 1)
	go func() {
		h, err := b.Reserve(ctx, "app:sandbox", "third", 3, WithMinCopies(1), WithMaxWait(time.Minute), WithBackoffBase(ttl/4))
		third <- reserved{h, err}
	}()
	poll.Until(t, 20*time.Second, "the three holds learned and a reserve refused for learning", func() bool {
		st := srv.Stats()
		return st.Restored == 3 && st.LearningRefusals > 0
	})
	// Learning ends a ttl after the new leader started, on its clock,
	// which has not moved: the holds it adopted then expire only after
	// that instant, and the clock moves no further.
	clk.add(srv.Stats().LearnUntil.Sub(clk.now()))
	r := <-third
	h, err := r.h, r.err
	if err != nil || h.Copies() != 1 || h.Info().Degraded {
		t.Fatalf("Reserve during learning = %+v, %v; want 1 copy once learned", h, err)
	}
	if got := srv.Stats(); got.CopiesHeld != 4+2+3+1 || got.Restored != 3 {
		t.Fatalf("new leader holds %d copies, restored %d holds; want 10 and 3", got.CopiesHeld, got.Restored)
	}
	for _, x := range []*Hold{ha, hg, hb} {
		if x.Err() != nil {
			t.Errorf("hold of %s lost across the leader change: %v", x.Resource(), x.Err())
		}
	}
	if err := ha.Release(ctx, 4); err != nil || copiesHeld(srv) != 6 {
		t.Fatalf("release to the new leader: %v; it holds %d", err, copiesHeld(srv))
	}
}

// lastError is the last failure of c's exchanges about resource since
// its last answer.
func lastError(c *Client, resource string) error {
	for _, st := range c.Status() {
		if st.Resource == resource {
			return st.LastError
		}
	}
	return nil
}

// TestDomainServerTransfer: copies move between two agents on two
// connections; the counts stay exact and the seizer's Close empties them.
func TestDomainServerTransfer(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	srv := startDomainServer(t, s, time.Second, false)
	ctx := context.Background()
	p1 := newClient(t, natstest.Conn(t, s), "p1", domainWait())
	p2 := newClient(t, natstest.Conn(t, s), "p2", domainWait())

	h, err := p1.Reserve(ctx, "app:sandbox", "acme", 5)
	if err != nil {
		t.Fatal(err)
	}
	tid, err := h.Transfer(ctx, 3, 10*time.Second)
	if err != nil || h.Copies() != 2 {
		t.Fatalf("Transfer 3 of 5 = %v; %d left", err, h.Copies())
	}
	if copiesHeld(srv) != 5 {
		t.Errorf("staged copies not counted: server holds %d", copiesHeld(srv))
	}
	got, err := p2.Seize(ctx, tid)
	if err != nil || got.Copies() != 3 || got.Domain() != "acme" || got.Resource() != "app:sandbox" {
		t.Fatalf("Seize = %+v, %v", got, err)
	}
	// A retry by the seizer is answered with its hold; another client is
	// refused.
	if again, err := p2.Seize(ctx, tid); err != nil || again != got || copiesHeld(srv) != 5 {
		t.Errorf("the seizer's second Seize = %p, %v, want %p; server holds %d", again, err, got, copiesHeld(srv))
	}
	var se *agent.ServiceError
	if _, err := p1.Seize(ctx, tid); !errors.As(err, &se) || se.Code != 409 {
		t.Errorf("Seize by another client of a seized id = %v, want 409", err)
	}
	// The seized hold is p2's: p1 cannot release it through its own id.
	if err := got.Release(ctx, 1); err != nil || copiesHeld(srv) != 4 {
		t.Fatalf("release of the seized hold: %v; server %d", err, copiesHeld(srv))
	}
	if err := p2.Close(); err != nil || copiesHeld(srv) != 2 {
		t.Fatalf("seizer's Close: %v; server holds %d, want 2", err, copiesHeld(srv))
	}
	if err := h.Close(); err != nil || copiesHeld(srv) != 0 {
		t.Fatalf("Close: %v; server holds %d", err, copiesHeld(srv))
	}
}

// TestDomainServerSeizeLostReply: a seize whose reply never reached the
// agent (sent here on a plain connection with the agent's client id) is
// asked again by the agent: it gets the same copies, and keeps them alive
// past the hold TTL by refreshing them, until it closes.
func TestDomainServerSeizeLostReply(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	const ttl = time.Second
	clk := newServerClock()
	srv := startClockedServer(t, s, clk, ttl, false)
	ctx := context.Background()
	p1 := newClient(t, natstest.Conn(t, s), "p1", domainWait())
	h, err := p1.Reserve(ctx, "app:sandbox", "acme", 4)
	if err != nil {
		t.Fatal(err)
	}
	tid, err := h.Transfer(ctx, 2, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Conn(t, s)
	if _, err := nc.Request(domainwire.Subject("root", domainwire.OpSeize, "app", "sandbox"),
		[]byte(`{"client_id":"p2","transfer_id":"`+tid+`"}`), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p2 := newClient(t, natstest.Conn(t, s), "p2", domainWait())
	got, err := p2.Seize(ctx, tid)
	if err != nil || got.Copies() != 2 {
		t.Fatalf("Seize after the lost reply = %+v, %v; want the 2 copies", got, err)
	}
	outlive(t, clk, ttl/2, 5, kept{p1, "app:sandbox", "acme"}, kept{p2, "app:sandbox", "acme"}) // past the hold TTL, twice
	if copiesHeld(srv) != 4 {
		t.Errorf("the seized hold was not kept alive: server holds %d, want 4", copiesHeld(srv))
	}
	if err := p2.Close(); err != nil || copiesHeld(srv) != 2 {
		t.Fatalf("seizer's Close: %v; server holds %d, want 2", err, copiesHeld(srv))
	}
}

// TestDomainServerAcquireAll: the pseudo-atomic pattern against the real
// server: the same copies of two copy resources and the rate resource.
func TestDomainServerAcquireAll(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	srv := startDomainServer(t, s, time.Second, false)
	a := newClient(t, natstest.Conn(t, s), "", domainWait())
	ctx := context.Background()
	x, err := a.AcquireAll(ctx, "acme", []string{"app:sandbox", "app:gpu"}, "app:api", 5, 1)
	if err != nil || x.Copies != 3 || x.Rate.Granted != 3 || copiesHeld(srv) != 6 {
		t.Fatalf("AcquireAll = %+v, %v; server %d; want 3 of each", x, err, copiesHeld(srv))
	}
	// Domain "other" takes 3 of its 5 hits this second; asking for 3
	// more, its acquisition is refused at the last step and gives its
	// sandbox hold back.
	if _, err := a.AcquireAll(ctx, "other", []string{"app:gpu"}, "app:api", 3, 3); err != nil {
		t.Fatalf("other domain: %v", err)
	}
	if _, err := a.AcquireAll(ctx, "other", []string{"app:sandbox"}, "app:api", 3, 3); !errors.Is(err, ErrRejected) {
		t.Fatalf("AcquireAll beyond the rate = %v; want a rejection", err)
	}
	if copiesHeld(srv) != 9 {
		t.Errorf("a refused AcquireAll left copies: server holds %d, want 9", copiesHeld(srv))
	}
	if err := x.Close(); err != nil || copiesHeld(srv) != 3 {
		t.Fatalf("Close: %v; server holds %d", err, copiesHeld(srv))
	}
}

// TestDomainServerReplicaFailover: two elected replicas; the leader's
// connection dies mid-hold (no resignation). The agents keep refreshing
// through the outage (their requests fail open meanwhile), the new leader
// learns the holds from those refreshes, and the counts are exact: no
// hold lost, none counted twice.
func TestDomainServerReplicaFailover(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	cfg := nsConfig(t, "app", serverConfig)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	type member struct {
		nc *nats.Conn
		r  *domainserver.Replica
	}
	var reps []member
	// Holds live 10s without a refresh (the clients refresh every third
	// of that): at 1s a refresh late on a loaded machine let a hold lapse,
	// and the counts below are exact. The new leader learns for as long.
	for _, id := range []string{"r1", "r2"} {
		nc := natstest.Conn(t, s)
		r, err := domainserver.NewReplica(nc, domainserver.ReplicaOptions{Options: domainserver.Options{ServerID: id,
			Config: cfg, HoldTTL: 10 * time.Second, Logger: slog.New(slog.DiscardHandler)},
			Election: replica.Election{TTL: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, member{nc, r})
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(ctx) }()
	}
	leader := func() int {
		for i, r := range reps {
			if srv := r.r.Server(); srv != nil && srv.Err() == nil && !r.nc.IsClosed() {
				return i
			}
		}
		return -1
	}
	poll.Until(t, 10*time.Second, "a leader", func() bool { return leader() >= 0 })
	first := leader()

	// Answers are awaited 5s: a reserve the leader answers later than a
	// short time-out fails open (Degraded), and its grant is orphaned.
	a := newClient(t, natstest.Conn(t, s), "a", WithTimeout(5*time.Second))
	b := newClient(t, natstest.Conn(t, s), "b", WithTimeout(5*time.Second))
	ha, err := a.Reserve(ctx, "app:sandbox", "acme", 4)
	if err != nil || ha.Info().Degraded {
		t.Fatalf("reserve: %v", err)
	}
	hb, err := b.Reserve(ctx, "app:sandbox", "other", 3)
	if err != nil || hb.Info().Degraded {
		t.Fatalf("reserve: %v", err)
	}

	reps[first].nc.Close() // the leader dies
	poll.Until(t, 15*time.Second, "a new leader", func() bool { i := leader(); return i >= 0 && i != first })
	// A reserve that waits out the learning gets the one copy left of
	// the global 8. Unanswered (the seat changed hands again, as it may
	// on a loaded machine), it grants nothing and is asked again. The
	// election ttl is the default's 3s: at 1s the survivor's own
	// leadership lapsed under load, and a later term restores all three
	// holds.
	var h *Hold
	poll.Until(t, time.Minute, "a reserve answered by a leader", func() bool {
		h, err = b.Reserve(ctx, "app:sandbox", "third", 5, WithMinCopies(1), WithMaxWait(30*time.Second), WithBackoffBase(100*time.Millisecond))
		return !errors.Is(err, ErrUnavailable)
	})
	if err != nil || h.Info().Degraded || h.Copies() != 1 {
		t.Fatalf("reserve after the failover = %+v, %v; want 1 copy", h, err)
	}
	i := leader()
	if i < 0 {
		t.Fatal("no leader serves after the reserve was answered")
	}
	next := reps[i].r.Server()
	if st := next.Stats(); st.CopiesHeld != 4+3+1 || st.Restored != 2 {
		t.Fatalf("new leader holds %d copies, restored %d holds; want 8 and 2", st.CopiesHeld, st.Restored)
	}
	if (ha.Err() != nil) || hb.Err() != nil {
		t.Fatalf("holds lost across the failover: %v %v", ha.Err(), hb.Err())
	}
	if err := ha.Release(ctx, 4); err != nil || copiesHeld(next) != 4 {
		t.Fatalf("release to the new leader: %v; it holds %d", err, copiesHeld(next))
	}
}

// TestDomainServerRefreshFitsMaxPayload: holds with long domain names,
// more of them than one message of the server's max_payload can list,
// are refreshed in several messages and all outlive the hold ttl; the
// replies, with a share per domain, fit too.
func TestDomainServerRefreshFitsMaxPayload(t *testing.T) {
	t.Parallel()
	s := natstest.MaxPayloadServer(t, 32<<10)
	const ttl = time.Second
	clk := newServerClock()
	srv := startClockedServer(t, s, clk, ttl, false)
	a := newClient(t, natstest.Conn(t, s), "", domainWait())
	ctx := context.Background()
	const n = 200 // about 300 bytes each: 60 KB, twice the max_payload
	var ks []kept
	for i := range n {
		d := fmt.Sprintf("%0250d", i)
		if _, err := a.Reserve(ctx, "app:gpu", d, 1); err != nil {
			t.Fatal(err)
		}
		ks = append(ks, kept{a, "app:gpu", d})
	}
	// Every domain's share comes from a refresh after each step: every
	// message of each refresh was answered, its shares with it.
	outlive(t, clk, ttl/2, 5, ks...) // past the hold ttl, twice
	if st := srv.Stats(); st.Holds != n || st.Lost != 0 {
		t.Fatalf("after two ttls the server has %d holds (%d refreshed as lost); want all %d", st.Holds, st.Lost, n)
	}
}

func TestRefreshBatches(t *testing.T) {
	mk := func(n, domainLen int) []domainwire.Hold {
		hs := make([]domainwire.Hold, n)
		for i := range hs {
			hs[i] = domainwire.Hold{HoldID: fmt.Sprint("h", i), Domain: strings.Repeat("d", domainLen), Groups: []string{"g<1>"}, Copies: int64(i + 1)}
		}
		return hs
	}
	for _, c := range []struct {
		holds    []domainwire.Hold
		maxBytes int
		batches  int
	}{
		{nil, 1000, 0},
		{mk(3, 10), 1 << 20, 1},
		{mk(2500, 1), 1 << 20, 3}, // by count
		{mk(100, 250), 8000, 5},   // by size: 24 of about 330 bytes each
		{mk(3, 5000), 1000, 3},    // each too large alone: one per message
	} {
		got := refreshBatches("client-1", c.holds, c.maxBytes)
		var all []domainwire.Hold
		for _, b := range got {
			all = append(all, b...)
			if len(b) > holdsPerRefresh {
				t.Errorf("a batch of %d holds", len(b))
			}
			if size := jsonLen(domainwire.Refresh{ClientID: "client-1", Holds: b}); size > c.maxBytes && len(b) > 1 {
				t.Errorf("a batch of %d bytes, limit %d", size, c.maxBytes)
			}
		}
		if len(got) != c.batches || len(all) != len(c.holds) || (len(all) > 0 && !slices.EqualFunc(all, c.holds, func(a, b domainwire.Hold) bool { return a.HoldID == b.HoldID })) {
			t.Errorf("%d holds, limit %d: %d batches holding %d, want %d batches holding every hold in order", len(c.holds), c.maxBytes, len(got), len(all), c.batches)
		}
	}
}
