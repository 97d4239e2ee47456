package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
)

// domainSetup starts a server, the scripted domain service on its own
// connection and an agent on another.
func domainSetup(t *testing.T, limits map[string]int64, opts ...Option) (*fakeDomain, *Client, *nats.Conn) {
	t.Helper()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), limits)
	nc := natstest.Conn(t, s)
	// The scripted service answers every request; the default time-out
	// (half a second) only matters to these tests when a loaded machine
	// outruns it, so they wait longer unless they say otherwise.
	return f, newClient(t, nc, "c1", append([]Option{domainWait()}, opts...)...), nc
}

func statsOf(a *Client, resource string) Status {
	for _, st := range a.Status() {
		if st.Resource == resource {
			return st
		}
	}
	return Status{}
}

// TestDomainRequest: grants all or the largest number at least min
// copies, returns a rejection as a *RejectedError with the answer's
// context data, and a client error (404) as an error, never failed open.
func TestDomainRequest(t *testing.T) {
	t.Parallel()
	_, a, _ := domainSetup(t, map[string]int64{"rate:api:search": 5, "jobs:sandbox": 3})
	ctx := context.Background()

	g, err := a.Request(ctx, "api:search", "acme", 2)
	if err != nil || g.Granted != 2 || g.HardLimit != 5 || g.GlobalLimit != -1 || g.Degraded || g.Shadow || g.Attempts != 1 {
		t.Fatalf("Request 2 = %+v, %v", g, err)
	}
	g, err = a.Request(ctx, "api:search", "acme", 5, WithMinCopies(1))
	if err != nil || g.Granted != 3 || g.DomainHitsLastSecond != 2 {
		t.Fatalf("Request 5 min 1 with 3 left = %+v, %v; want 3 granted", g, err)
	}
	g, err = a.Request(ctx, "api:search", "acme", 1)
	var rej *RejectedError
	if !errors.As(err, &rej) || !errors.Is(err, ErrRejected) || g.Granted != 0 || rej.Grant == nil || !rej.Grant.HardLimited || rej.Attempts != 1 {
		t.Fatalf("Request at the limit = %+v, %v; want a rejection with context", g, err)
	}
	// Another domain has its own count.
	if g, err := a.Request(ctx, "api:search", "other", 5); err != nil || g.Granted != 5 {
		t.Fatalf("other domain = %+v, %v", g, err)
	}
	// A rate request on a copy resource: the service answers 404 here.
	_, err = a.Request(ctx, "jobs:sandbox", "acme", 1)
	var se *agent.ServiceError
	if !errors.As(err, &se) || se.Code != 404 || errors.Is(err, ErrUnavailable) {
		t.Fatalf("request on a copy resource = %v; want a 404 agent.ServiceError", err)
	}
	st := statsOf(a, "api:search")
	if st.Calls != 4 || st.Granted != 3 || st.Rejected != 1 || st.Degraded != 0 || st.LastAnswer.IsZero() {
		t.Errorf("stats = %+v", st)
	}
}

// TestDomainBadInput: malformed input is an error and nothing is sent.
func TestDomainBadInput(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"rate:api:search": 5, "jobs:sandbox": 3})
	ctx := context.Background()
	cases := []struct {
		name string
		call func() error
	}{
		{"no colon", func() error { _, err := a.Request(ctx, "apisearch", "acme", 1); return err }},
		{"dot in name", func() error { _, err := a.Request(ctx, "api:se.arch", "acme", 1); return err }},
		{"empty domain", func() error { _, err := a.Request(ctx, "api:search", "", 1); return err }},
		{"space in domain", func() error { _, err := a.Reserve(ctx, "jobs:sandbox", "a b", 1); return err }},
		{"invalid UTF-8 domain", func() error { _, err := a.Request(ctx, "api:search", "a\xffb", 1); return err }},
		{"no-break space in domain", func() error { _, err := a.Reserve(ctx, "jobs:sandbox", "a\u00a0b", 1); return err }},
		{"zero copies", func() error { _, err := a.Request(ctx, "api:search", "acme", 0); return err }},
		{"negative copies", func() error { _, err := a.Reserve(ctx, "jobs:sandbox", "acme", -3); return err }},
		{"huge copies", func() error { _, err := a.Reserve(ctx, "jobs:sandbox", "acme", domainwire.MaxCopies+1); return err }},
		{"min above copies", func() error { _, err := a.Request(ctx, "api:search", "acme", 2, WithMinCopies(3)); return err }},
		{"min zero", func() error { _, err := a.Reserve(ctx, "jobs:sandbox", "acme", 2, WithMinCopies(0)); return err }},
		{"negative max wait", func() error { _, err := a.Request(ctx, "api:search", "acme", 1, WithMaxWait(-time.Second)); return err }},
		{"zero backoff", func() error { _, err := a.Reserve(ctx, "jobs:sandbox", "acme", 1, WithBackoffBase(0)); return err }},
		{"seize malformed id", func() error { _, err := a.Seize(ctx, "nodots"); return err }},
		{"seize bad resource", func() error { _, err := a.Seize(ctx, "jobs.sand*box.x"); return err }},
		{"acquire min above max", func() error { _, err := a.AcquireAll(ctx, "acme", []string{"jobs:sandbox"}, "", 1, 2); return err }},
		{"acquire twice", func() error {
			_, err := a.AcquireAll(ctx, "acme", []string{"jobs:sandbox", "jobs:sandbox"}, "", 1, 1)
			return err
		}},
		{"acquire nothing", func() error { _, err := a.AcquireAll(ctx, "acme", nil, "", 1, 1); return err }},
		{"acquire min option", func() error {
			_, err := a.AcquireAll(ctx, "acme", []string{"jobs:sandbox"}, "", 2, 1, WithMinCopies(1))
			return err
		}},
	}
	for _, c := range cases {
		if err := c.call(); err == nil {
			t.Errorf("%s: accepted", c.name)
		} else if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrRejected) {
			t.Errorf("%s: %v is not an input error", c.name, err)
		}
	}
	if got := f.received(""); len(got) != 0 {
		t.Errorf("bad input sent %d messages: %+v", len(got), got[0])
	}
	if len(a.Status()) != 0 {
		t.Errorf("bad input counted: %+v", a.Status())
	}
}

// TestDomainReserveRelease: a hold's partial releases, errors that change
// nothing (over-release, release of a closed hold), idempotent Close, and
// a release the service does not know the hold of (404: lost).
func TestDomainReserveRelease(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"jobs:sandbox": 10})
	ctx := context.Background()

	h, err := a.Reserve(ctx, "jobs:sandbox", "acme", 15, WithMinCopies(4))
	if err != nil || h.Copies() != 10 || h.ID() == "" || h.Info().Degraded || h.Err() != nil || len(h.Groups()) != 1 || h.Info().DomainLimit != 10 {
		t.Fatalf("Reserve 15 min 4 of 10 = %+v, %v", h, err)
	}
	if _, err := a.Reserve(ctx, "jobs:sandbox", "acme", 1); !errors.Is(err, ErrRejected) {
		t.Fatalf("Reserve beyond the limit = %v; want a rejection", err)
	}
	if err := h.Release(ctx, 4); err != nil || h.Copies() != 6 || f.held("jobs:sandbox") != 6 {
		t.Fatalf("Release 4: %v, hold %d, service %d", err, h.Copies(), f.held("jobs:sandbox"))
	}
	sent := len(f.received(domainwire.OpRelease))
	for _, n := range []int64{7, 0, -1} {
		if err := h.Release(ctx, n); err == nil {
			t.Errorf("Release(%d) of a hold of 6 accepted", n)
		}
	}
	if got := len(f.received(domainwire.OpRelease)); got != sent || h.Copies() != 6 {
		t.Errorf("bad releases sent %d messages; hold has %d", got-sent, h.Copies())
	}
	if st := statsOf(a, "jobs:sandbox"); st.Holds != 1 || st.HeldCopies != 6 {
		t.Errorf("stats with one hold of 6: %+v", st)
	}
	if err := h.Close(); err != nil || h.Copies() != 0 || f.held("jobs:sandbox") != 0 {
		t.Fatalf("Close: %v; service holds %d", err, f.held("jobs:sandbox"))
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := h.Release(ctx, 1); !errors.Is(err, ErrHoldClosed) {
		t.Errorf("Release after Close = %v; want ErrHoldClosed", err)
	}
	if _, err := h.Transfer(ctx, 1, 0); !errors.Is(err, ErrHoldClosed) {
		t.Errorf("Transfer after Close = %v; want ErrHoldClosed", err)
	}
	// Releasing the last copy closes the hold too.
	h2, err := a.Reserve(ctx, "jobs:sandbox", "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := h2.Release(ctx, 2); err != nil || h2.Copies() != 0 || !errors.Is(h2.Release(ctx, 1), ErrHoldClosed) {
		t.Fatalf("release of every copy: %v, %d left", err, h2.Copies())
	}
	// The service dropped the hold: the release says lost.
	h3, err := a.Reserve(ctx, "jobs:sandbox", "acme", 3)
	if err != nil {
		t.Fatal(err)
	}
	f.set(func(f *fakeDomain) { delete(f.holds, h3.ID()) })
	if err := h3.Release(ctx, 1); !errors.Is(err, ErrHoldLost) || h3.Err() == nil || !errors.Is(h3.Err(), ErrHoldLost) || h3.Copies() != 0 {
		t.Fatalf("release of a dropped hold = %v (lost %v)", err, (h3.Err() != nil))
	}
	if err := h3.Close(); err != nil {
		t.Errorf("Close of a lost hold = %v; want nil", err)
	}
	if st := statsOf(a, "jobs:sandbox"); st.Lost != 1 || st.Holds != 0 {
		t.Errorf("stats after a lost hold: %+v", st)
	}
}

// TestDomainForbidden: a hold id that belongs to another client (403) is
// an error and the hold stays as it was.
func TestDomainForbidden(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"jobs:sandbox": 10})
	h, err := a.Reserve(context.Background(), "jobs:sandbox", "acme", 3)
	if err != nil {
		t.Fatal(err)
	}
	f.set(func(f *fakeDomain) { f.holds[h.ID()].client = "someone-else" })
	var se *agent.ServiceError
	if err := h.Release(context.Background(), 1); !errors.As(err, &se) || se.Code != 403 || h.Copies() != 3 || h.Err() != nil {
		t.Fatalf("release of someone else's hold = %v; hold %d", err, h.Copies())
	}
}

// TestDomainFailOpen: with no service (no responders, a timeout, a 500),
// Request grants min copies and Reserve returns a local hold of min
// copies, both Degraded and counted; local holds release locally and
// cannot be transferred. Release and Seize do not fail open. (The fake
// service tells no fail mode: the client fails open as
// WithFailOpenUnseen says; failopen_test.go tests the fail modes.)
func TestDomainFailOpen(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := newClient(t, natstest.Conn(t, s), "", WithTimeout(100*time.Millisecond), WithFailOpenUnseen(true))
	ctx := context.Background()

	// No responders.
	g, err := a.Request(ctx, "api:search", "acme", 5, WithMinCopies(2), WithMaxWait(time.Second))
	if err != nil || !g.Degraded || g.Granted != 2 || !errors.Is(g.Cause, ErrUnavailable) || g.Attempts != 1 {
		t.Fatalf("Request without a service = %+v, %v; want a degraded grant of 2", g, err)
	}
	h, err := a.Reserve(ctx, "jobs:sandbox", "acme", 4, WithMinCopies(1))
	if err != nil || !h.Info().Degraded || h.Copies() != 1 || h.ID() != "" || h.Info().Cause == nil {
		t.Fatalf("Reserve without a service = %+v, %v; want a degraded hold of 1", h, err)
	}
	if st := statsOf(a, "jobs:sandbox"); st.Degraded != 1 || st.LocalHolds != 1 || st.LocalCopies != 1 || st.LastError == nil {
		t.Errorf("stats of a degraded hold: %+v", st)
	}
	if _, err := h.Transfer(ctx, 1, 0); err == nil {
		t.Error("transfer of a local hold accepted")
	}
	if err := h.Close(); err != nil || h.Copies() != 0 {
		t.Fatalf("Close of a local hold: %v", err)
	}
	if st := statsOf(a, "jobs:sandbox"); st.LocalHolds != 0 || st.LocalCopies != 0 {
		t.Errorf("stats after closing the degraded hold: %+v", st)
	}
	if _, err := a.Seize(ctx, "jobs.sandbox.x1"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Seize without a service = %v; want ErrUnavailable", err)
	}
	// AcquireAll fails open step by step: min copies of each.
	x, err := a.AcquireAll(ctx, "acme", []string{"jobs:sandbox", "jobs:gpu"}, "api:search", 5, 2)
	if err != nil || x.Copies != 2 || !x.Holds[0].Info().Degraded || x.Holds[1].Copies() != 2 || !x.Rate.Degraded {
		t.Fatalf("AcquireAll without a service = %+v, %v; want 2 of each, degraded", x, err)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}

	// A service that answers 500, then one that does not answer.
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"rate:api:search": 5, "jobs:sandbox": 5})
	f.set(func(f *fakeDomain) { f.fail = true })
	if g, err := a.Request(ctx, "api:search", "acme", 3); err != nil || !g.Degraded || g.Granted != 3 {
		t.Fatalf("Request answered 500 = %+v, %v; want degraded", g, err)
	}
	f.set(func(f *fakeDomain) { f.fail, f.silent = false, true })
	if g, err := a.Request(ctx, "api:search", "acme", 3); err != nil || !g.Degraded {
		t.Fatalf("Request not answered = %+v, %v; want degraded", g, err)
	}
	// A release the service does not answer is applied here, and the
	// next refresh carries it; the last copy's is carried by expiry. The
	// service's clock is frozen, so that only the test expires holds,
	// and the reserves are asked again until answered within the short
	// time-out, which a loaded machine can outrun (as the first does
	// here: granted, but its answer is lost).
	f.set(func(f *fakeDomain) { f.silent, f.ttl, f.unanswered = false, time.Second, 1 })
	f.freeze()
	h2 := reserveAnswered(t, f, a, "jobs:sandbox", "acme", 3)
	h3 := reserveAnswered(t, f, a, "jobs:sandbox", "acme", 1)
	f.set(func(f *fakeDomain) { f.silent = true })
	if err := h2.Release(ctx, 2); err != nil || h2.Copies() != 1 {
		t.Fatalf("Release without an answer = %v, %d left; want applied here", err, h2.Copies())
	}
	if err := h3.Close(); err != nil || h3.Copies() != 0 {
		t.Fatalf("Close without an answer = %v", err)
	}
	if f.held("jobs:sandbox") != 4 {
		t.Fatalf("the silent service changed its holds: %d", f.held("jobs:sandbox"))
	}
	if st := statsOf(a, "jobs:sandbox"); st.UnansweredReleases != 2 {
		t.Errorf("stats: %+v; want 2 unanswered releases", st)
	}
	f.set(func(f *fakeDomain) { f.silent = false })
	f.outlive(t, 600*time.Millisecond, 2, "jobs:sandbox") // h3's hold, no longer refreshed, expires
	poll.Until(t, time.Minute, "the refresh to carry the unanswered releases", func() bool { return f.held("jobs:sandbox") == 1 })
	if err := h2.Release(ctx, 1); err != nil || h2.Copies() != 0 {
		t.Fatalf("Release once answered again = %v, %d left", err, h2.Copies())
	}
	if st := statsOf(a, "api:search"); st.Degraded != 4 || st.LastError == nil {
		t.Errorf("stats: %+v", st)
	}
	// A cancelled context is an error, not a reason to fail open.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.Request(cctx, "api:search", "acme", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("Request with a cancelled context = %v", err)
	}
}

// reserveAnswered reserves copies again until f answers within the
// client's time-out, closing the degraded holds of the tries it outran
// and forgetting what f granted them: nobody refreshes those holds, and
// on a frozen clock they would never expire.
func reserveAnswered(t *testing.T, f *fakeDomain, a *Client, res, domain string, copies int64) *Hold {
	t.Helper()
	var h *Hold
	reserves := func() int { return len(f.received(domainwire.OpReserve)) }
	poll.Until(t, time.Minute, "a reserve answered within the time-out", func() bool {
		var seq int
		f.set(func(f *fakeDomain) { seq = f.seq })
		seen := reserves()
		var err error
		if h, err = a.Reserve(context.Background(), res, domain, copies); err != nil {
			t.Fatal(err)
		}
		if h.Info().Degraded {
			_ = h.Close()
			// The try (one message: a time-out is not retried) is
			// handled once it is received.
			poll.Until(t, time.Minute, "the outrun reserve at the service", func() bool { return reserves() > seen })
			f.set(func(f *fakeDomain) {
				for i := seq + 1; i <= f.seq; i++ {
					delete(f.holds, "h"+strconv.Itoa(i))
				}
			})
			return false
		}
		return true
	})
	return h
}

// TestDomainKillSwitch: rejections become grants of all the copies asked
// for, marked Shadow and counted; switched off at run time, they are
// rejections again.
func TestDomainKillSwitch(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"rate:api:search": 1, "jobs:sandbox": 1}, WithKillSwitch(true))
	ctx := context.Background()
	if !a.KillSwitch() {
		t.Fatal("kill switch off")
	}
	if g, err := a.Request(ctx, "api:search", "acme", 1); err != nil || g.Shadow {
		t.Fatalf("grant within the limit = %+v, %v", g, err)
	}
	g, err := a.Request(ctx, "api:search", "acme", 4, WithMinCopies(2))
	if err != nil || !g.Shadow || g.Granted != 4 || g.Degraded || !g.HardLimited {
		t.Fatalf("rejection under the kill switch = %+v, %v; want a shadow grant of 4", g, err)
	}
	h, err := a.Reserve(ctx, "jobs:sandbox", "acme", 3)
	if err != nil || !h.Info().Shadow || h.Copies() != 3 || h.ID() != "" {
		t.Fatalf("reserve under the kill switch = %+v, %v; want a shadow hold of 3", h, err)
	}
	if f.held("jobs:sandbox") != 0 {
		t.Error("a shadow hold is counted by the service")
	}
	if st := statsOf(a, "api:search"); st.WouldReject != 1 || st.Rejected != 0 {
		t.Errorf("stats: %+v", st)
	}
	if st := statsOf(a, "jobs:sandbox"); st.WouldReject != 1 || st.LocalHolds != 1 || st.LocalCopies != 3 {
		t.Errorf("stats: %+v", st)
	}
	if err := h.Release(ctx, 1); err != nil || h.Copies() != 2 {
		t.Fatalf("release of a shadow hold: %v", err)
	}
	a.SetKillSwitch(false)
	if _, err := a.Request(ctx, "api:search", "acme", 1); !errors.Is(err, ErrRejected) {
		t.Fatalf("with the kill switch off = %v; want a rejection", err)
	}
}

// TestDomainRetry: rejections are retried with the paper's backoff until
// granted, within the max wait and the context's deadline, on the agent's
// clock: the test fires each backoff timer as soon as it is armed, so
// the schedule is checked exactly, whatever the machine's speed.
func TestDomainRetry(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"rate:api:search": 5, "jobs:sandbox": 5})
	clk := clocktest.At(time.Now())
	a := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
	ctx := context.Background()
	f.set(func(f *fakeDomain) { f.rejectFirst = 2 })
	var g Grant
	var err error
	sleeps := clocktest.Drive(t, clk, driveHorizon, func() {
		g, err = a.Request(ctx, "api:search", "acme", 1, WithMaxWait(10*time.Second), WithBackoffBase(10*time.Millisecond))
	})
	if err != nil || g.Granted != 1 || g.Attempts != 3 || len(sleeps) != 2 || g.Waited != sleeps[0]+sleeps[1] {
		t.Fatalf("Request after two rejections = %+v, %v after sleeps %v; want granted on the third attempt", g, err, sleeps)
	}
	checkBackoff(t, sleeps, 10*time.Millisecond)
	if st := statsOf(a, "api:search"); st.Retries != 2 || st.Granted != 1 {
		t.Errorf("stats: %+v", st)
	}
	// Without a max wait a rejection is final.
	f.set(func(f *fakeDomain) { f.rejectFirst = 1 })
	if _, err := a.Reserve(ctx, "jobs:sandbox", "acme", 1); !errors.Is(err, ErrRejected) {
		t.Fatalf("Reserve rejected once, no max wait = %v", err)
	}
	// The schedule: base 100ms, max wait 1s sleeps 100, 200, 400 (±25%),
	// then what is left: 5 attempts, and Waited 1s.
	f.set(func(f *fakeDomain) { f.rejectFirst = 1000 })
	sleeps = clocktest.Drive(t, clk, driveHorizon, func() {
		_, err = a.Reserve(ctx, "jobs:sandbox", "acme", 1, WithMaxWait(time.Second), WithBackoffBase(100*time.Millisecond))
	})
	var rej *RejectedError
	if !errors.As(err, &rej) || rej.Attempts != 5 || len(sleeps) != 4 || rej.Waited != time.Second || rej.Info == nil {
		t.Fatalf("rejected throughout = %v (%+v) after sleeps %v; want 5 attempts over 1s", err, rej, sleeps)
	}
	checkBackoff(t, sleeps[:3], 100*time.Millisecond)
	// The context deadline bounds the retries, leaving the last attempt a
	// timeout to be answered in: at most 300ms here. The deadline passes
	// on the real clock, so the budget is what is left of it when the
	// retries start (only an upper bound is checked: the machine's speed
	// decides how much is left).
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(300*time.Millisecond+10*time.Second))
	defer cancel()
	sleeps = clocktest.Drive(t, clk, driveHorizon, func() {
		_, err = a.Reserve(dctx, "jobs:sandbox", "acme", 1, WithMaxWait(time.Minute), WithBackoffBase(100*time.Millisecond))
	})
	if !errors.As(err, &rej) || rej.Waited > 300*time.Millisecond {
		t.Fatalf("retries within a 300ms deadline = %v (%+v) after sleeps %v; want 300ms of them at most", err, rej, sleeps)
	}
	if len(sleeps) > 1 { // the first sleep was not cut short by the deadline
		checkBackoff(t, sleeps[:1], 100*time.Millisecond)
	}
}

// checkBackoff checks that sleep i is 2^i × base within the jitter, ±25%.
func checkBackoff(t *testing.T, sleeps []time.Duration, base time.Duration) {
	t.Helper()
	for i, d := range sleeps {
		want := base << i
		if d < want*3/4 || d > want*5/4 {
			t.Errorf("sleep %d was %v; want %v ±25%%", i, d, want)
		}
	}
}

// TestDomainLearning: a learning leader's retry-after is the least sleep;
// with no max wait to cover it the rejection says learning.
func TestDomainLearning(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"jobs:sandbox": 5})
	clk := clocktest.At(time.Now())
	a := newClockedClient(t, natstest.Conn(t, s), clk, domainWait())
	ctx := context.Background()
	f.set(func(f *fakeDomain) { f.learning, f.retryAfter = 1, 300*time.Millisecond })
	var h *Hold
	var err error
	sleeps := clocktest.Drive(t, clk, driveHorizon, func() {
		h, err = a.Reserve(ctx, "jobs:sandbox", "acme", 1, WithMaxWait(5*time.Second), WithBackoffBase(time.Millisecond))
	})
	if err != nil || h.Copies() != 1 {
		t.Fatalf("Reserve while learning = %v", err)
	}
	if msgs := f.received(domainwire.OpReserve); len(msgs) != 2 || len(sleeps) != 1 || sleeps[0] != 300*time.Millisecond {
		t.Fatalf("retried %d times after sleeps %v; want once, after 300ms", len(msgs)-1, sleeps)
	}
	f.set(func(f *fakeDomain) { f.learning = 1 })
	_, err = a.Reserve(ctx, "jobs:sandbox", "acme", 1, WithMaxWait(100*time.Millisecond))
	var rej *RejectedError
	if !errors.As(err, &rej) || !rej.Learning || rej.RetryAfter != 300*time.Millisecond || rej.Attempts != 1 {
		t.Fatalf("learning beyond the max wait = %v; want one learning rejection", err)
	}
}

// TestDomainRefresh: holds are refreshed, all holds of a resource in one
// message, and outlive the ttl on the service's clock; a hold the service
// lost is marked lost; Agent.Close releases the rest. The cadence, one
// refresh every ttl/3, is TestDomainServerRefreshEveryThirdTTL's, on the
// agent's clock.
func TestDomainRefresh(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"jobs:sandbox": 10, "jobs:gpu": 2})
	const ttl = 300 * time.Millisecond
	f.set(func(f *fakeDomain) { f.ttl = ttl })
	f.freeze()
	ctx := context.Background()
	var hs []*Hold
	for _, r := range []string{"jobs:sandbox", "jobs:sandbox", "jobs:gpu"} {
		h, err := a.Reserve(ctx, r, "acme", 2)
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	// Three ttls. A refresh may have gone out between the two sandbox
	// reserves, listing one hold; a resource has one refresh in flight at
	// a time, so those after the second step's were all sent once both
	// holds were there.
	f.outlive(t, ttl/2, 2, "jobs:sandbox", "jobs:gpu")
	before := len(f.received(domainwire.OpRefresh))
	f.outlive(t, ttl/2, 4, "jobs:sandbox", "jobs:gpu")
	if f.held("jobs:sandbox") != 4 || f.held("jobs:gpu") != 2 {
		t.Fatalf("after three ttls the service holds %d and %d; want 4 and 2", f.held("jobs:sandbox"), f.held("jobs:gpu"))
	}
	for _, m := range f.received(domainwire.OpRefresh)[before:] {
		var r domainwire.Refresh
		if err := json.Unmarshal(m.data, &r); err != nil {
			t.Fatal(err)
		}
		if r.ClientID != "c1" {
			t.Errorf("refresh from %q", r.ClientID)
		}
		if m.res == "jobs:sandbox" && len(r.Holds) != 2 {
			t.Errorf("a sandbox refresh lists %d holds; want both", len(r.Holds))
		}
	}
	// The service loses one: the next refresh says so.
	f.set(func(f *fakeDomain) { delete(f.holds, hs[0].ID()) })
	poll.Until(t, 30*time.Second, "the lost hold", func() bool { return hs[0].Err() != nil })
	if !errors.Is(hs[0].Err(), ErrHoldLost) || hs[1].Err() != nil {
		t.Fatalf("lost hold not marked: %v %v", (hs[0].Err() != nil), (hs[1].Err() != nil))
	}
	if err := hs[0].Release(ctx, 1); !errors.Is(err, ErrHoldLost) {
		t.Errorf("release of a lost hold = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if f.held("jobs:sandbox") != 0 || f.held("jobs:gpu") != 0 || hs[1].Copies() != 0 {
		t.Errorf("after Agent.Close the service holds %d and %d", f.held("jobs:sandbox"), f.held("jobs:gpu"))
	}
	if _, err := a.Reserve(ctx, "jobs:gpu", "acme", 1); !errors.Is(err, agent.ErrClosed) {
		t.Errorf("Reserve after Close = %v", err)
	}
}

// TestDomainTransferSeize: copies move from one agent to another on its
// own connection; the rest stays with the first; an id seized twice is
// unknown.
func TestDomainTransferSeize(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	f := newFakeDomain(t, natstest.Conn(t, s), map[string]int64{"jobs:sandbox": 20})
	a := newClient(t, natstest.Conn(t, s), "p1")
	b := newClient(t, natstest.Conn(t, s), "p2")
	ctx := context.Background()

	h, err := a.Reserve(ctx, "jobs:sandbox", "acme", 15)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int64{0, 16} {
		if _, err := h.Transfer(ctx, n, time.Minute); err == nil {
			t.Errorf("Transfer(%d) accepted", n)
		}
	}
	if _, err := h.Transfer(ctx, 1, 25*time.Hour); err == nil {
		t.Error("Transfer with a 25h ttl accepted")
	}
	tid, err := h.Transfer(ctx, 10, 30*time.Second)
	if err != nil || h.Copies() != 5 || !strings.HasPrefix(tid, "jobs.sandbox.") {
		t.Fatalf("Transfer 10 of 15 = %q, %v; %d left", tid, err, h.Copies())
	}
	got, err := b.Seize(ctx, tid)
	if err != nil || got.Copies() != 10 || got.Domain() != "acme" || got.Resource() != "jobs:sandbox" || len(got.Groups()) != 1 {
		t.Fatalf("Seize = %+v, %v", got, err)
	}
	if f.held("jobs:sandbox") != 15 {
		t.Errorf("service holds %d; want 15", f.held("jobs:sandbox"))
	}
	var se *agent.ServiceError
	if _, err := b.Seize(ctx, tid); !errors.As(err, &se) || se.Code != 404 {
		t.Errorf("second Seize = %v; want 404", err)
	}
	if err := got.Release(ctx, 5); err != nil {
		t.Fatal(err)
	}
	// Transferring the rest closes the first hold.
	tid2, err := h.Transfer(ctx, 5, 0)
	if err != nil || h.Copies() != 0 || !errors.Is(h.Release(ctx, 1), ErrHoldClosed) {
		t.Fatalf("transfer of the rest: %v", err)
	}
	if _, err := b.Seize(ctx, tid2); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if f.held("jobs:sandbox") != 0 {
		t.Errorf("service holds %d after the seizer closed; want 0", f.held("jobs:sandbox"))
	}
}

// TestAcquireAll: the pseudo-atomic pattern ends with the same copies of
// every resource, the least any step granted, and gives everything back
// when a step is refused.
func TestAcquireAll(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"jobs:sandbox": 10, "jobs:gpu": 6, "rate:api:search": 4})
	ctx := context.Background()

	x, err := a.AcquireAll(ctx, "acme", []string{"jobs:sandbox", "jobs:gpu"}, "api:search", 8, 2)
	if err != nil || x.Copies != 4 || len(x.Holds) != 2 || x.Rate.Granted != 4 {
		t.Fatalf("AcquireAll = %+v, %v; want 4 of each", x, err)
	}
	for _, h := range x.Holds {
		if h.Copies() != 4 {
			t.Errorf("%s holds %d; want 4", h.Resource(), h.Copies())
		}
	}
	if f.held("jobs:sandbox") != 4 || f.held("jobs:gpu") != 4 {
		t.Errorf("service holds %d and %d; want 4 and 4", f.held("jobs:sandbox"), f.held("jobs:gpu"))
	}
	// The rate resource is spent: the last step is refused, and the
	// holds of the first steps are given back.
	_, err = a.AcquireAll(ctx, "acme", []string{"jobs:sandbox"}, "api:search", 3, 1)
	if !errors.Is(err, ErrRejected) {
		t.Fatalf("AcquireAll with the rate spent = %v; want a rejection", err)
	}
	if f.held("jobs:sandbox") != 4 {
		t.Errorf("a refused AcquireAll left holds: service holds %d; want 4", f.held("jobs:sandbox"))
	}
	if err := x.Close(); err != nil || f.held("jobs:sandbox") != 0 || f.held("jobs:gpu") != 0 {
		t.Fatalf("Close: %v", err)
	}
	// Copy resources only.
	y, err := a.AcquireAll(ctx, "acme", []string{"jobs:gpu", "jobs:sandbox"}, "", 9, 1)
	if err != nil || y.Copies != 6 || y.Rate.Granted != 0 {
		t.Fatalf("copy resources only = %+v, %v", y, err)
	}
	_ = y.Close()
}

func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	if backoff(time.Second, 0) != time.Second || backoff(time.Second, 3) != 8*time.Second || backoff(time.Minute, 1000) != 24*time.Hour {
		t.Errorf("backoff: %v %v %v", backoff(time.Second, 0), backoff(time.Second, 3), backoff(time.Minute, 1000))
	}
	lo, hi := time.Hour, time.Duration(0)
	for range 2000 {
		j := jitter(time.Second)
		lo, hi = min(lo, j), max(hi, j)
	}
	if lo < 750*time.Millisecond || hi > 1250*time.Millisecond || lo > 800*time.Millisecond || hi < 1200*time.Millisecond {
		t.Errorf("jitter(1s) ranged over [%v, %v]; want about [750ms, 1250ms]", lo, hi)
	}
}

// TestDomainStatsBounded: beyond maxStats resources the counters
// are shared under "*", so a caller inventing names cannot grow them.
func TestDomainStatsBounded(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a := newClient(t, natstest.Conn(t, s), "", WithFailOpenUnseen(true)) // no service: every call fails open
	ctx := context.Background()
	for i := range maxStats + 2 {
		if g, err := a.Request(ctx, fmt.Sprintf("ns:r%d", i), "acme", 1); err != nil || !g.Degraded {
			t.Fatalf("request %d = %+v, %v", i, g, err)
		}
	}
	st := a.Status()
	if len(st) != maxStats+1 || st[len(st)-1].Resource != "*" || st[len(st)-1].Calls != 2 || st[len(st)-1].Degraded != 2 {
		t.Fatalf("%d entries, last %+v; want %d and \"*\" with 2 calls", len(st), st[len(st)-1], maxStats+1)
	}
}

// TestDomainRefreshChunks: a resource with more holds than one refresh
// lists is refreshed in several messages, every hold in one of them.
func TestDomainRefreshChunks(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"jobs:sandbox": holdsPerRefresh + 10})
	f.set(func(f *fakeDomain) { f.ttl = 3 * time.Second })
	f.freeze() // no hold expires while a loaded machine reserves them
	ctx := context.Background()
	for range holdsPerRefresh + 1 {
		if _, err := a.Reserve(ctx, "jobs:sandbox", "acme", 1); err != nil {
			t.Fatal(err)
		}
	}
	// A round that started after the last reserve lists every hold in two
	// consecutive messages, none above the bound.
	poll.Until(t, time.Minute, "a refresh round of every hold", func() bool {
		var ids [][]string
		for _, m := range f.received(domainwire.OpRefresh) {
			var r domainwire.Refresh
			if err := json.Unmarshal(m.data, &r); err != nil {
				t.Fatal(err)
			}
			if len(r.Holds) > holdsPerRefresh {
				t.Fatalf("one refresh lists %d holds", len(r.Holds))
			}
			var l []string
			for _, h := range r.Holds {
				l = append(l, h.HoldID)
			}
			ids = append(ids, l)
		}
		for i := 0; i+1 < len(ids); i++ {
			seen := map[string]bool{}
			for _, id := range append(ids[i], ids[i+1]...) {
				seen[id] = true
			}
			if len(seen) == holdsPerRefresh+1 {
				return true
			}
		}
		return false
	})
}

// TestDomainConcurrent: holds reserved, released, transferred, seized and
// closed from many goroutines while the refresh loop runs and stats are
// read; afterwards the service's count is exactly what the agent holds.
func TestDomainConcurrent(t *testing.T) {
	t.Parallel()
	f, a, _ := domainSetup(t, map[string]int64{"jobs:sandbox": 1000, "jobs:gpu": 1000})
	const ttl = 600 * time.Millisecond
	f.set(func(f *fakeDomain) { f.ttl = ttl })
	f.freeze()
	ctx := context.Background()
	var wg sync.WaitGroup
	kept := make([]*Hold, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := []string{"jobs:sandbox", "jobs:gpu"}[w%2]
			for i := range 30 {
				h, err := a.Reserve(ctx, res, "acme", 4)
				if err != nil {
					t.Error(err)
					return
				}
				if err := h.Release(ctx, 1); err != nil {
					t.Error(err)
				}
				if i%3 == 0 {
					tid, err := h.Transfer(ctx, 1, time.Minute)
					if err != nil {
						t.Error(err)
					} else if g, err := a.Seize(ctx, tid); err != nil {
						t.Error(err)
					} else {
						_ = g.Close()
					}
				}
				_ = a.Status()
				if i == 29 {
					kept[w] = h
					continue
				}
				if err := h.Close(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	f.outlive(t, ttl/2, 4, "jobs:sandbox", "jobs:gpu") // two ttls: only refreshed holds survive
	var want int64
	for _, h := range kept {
		if h != nil {
			want += h.Copies()
		}
	}
	if got := f.held("jobs:sandbox") + f.held("jobs:gpu"); got != want || want != 8*3 {
		t.Fatalf("service holds %d, the agent %d; want 24", got, want)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := f.held("jobs:sandbox") + f.held("jobs:gpu"); got != 0 {
		t.Fatalf("after Close the service holds %d", got)
	}
}

// TestOptionsPerConcern: each call takes its own concern's options only,
// so that a quota option given to a domain call (Sheddable to Request,
// which once failed only at run time) does not compile, nor a domain
// option given to Take or to New.
func TestOptionsPerConcern(t *testing.T) {
	t.Parallel()
	kinds := map[string]reflect.Type{
		"domain.CallOption": reflect.TypeFor[CallOption](),
		"domain.Option":     reflect.TypeFor[Option](),
		"quota.TakeOption":  reflect.TypeFor[quota.TakeOption](),
		"quota.Option":      reflect.TypeFor[quota.Option](),
		"agent.Option":      reflect.TypeFor[agent.Option](),
	}
	for name, opt := range map[string]any{
		"domain.CallOption": WithMaxWait(time.Second),
		"domain.Option":     WithTimeout(time.Second),
		"quota.TakeOption":  quota.Sheddable(),
		"quota.Option":      quota.WithTimeout(time.Second),
		"agent.Option":      agent.WithNode("eu"),
	} {
		for kind, typ := range kinds {
			if got := reflect.TypeOf(opt).AssignableTo(typ); got != (kind == name) {
				t.Errorf("a %s assignable to %s: %v", name, kind, got)
			}
		}
	}
}
