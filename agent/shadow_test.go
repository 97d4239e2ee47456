package agent

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
)

// checkShadowRate drives a rate limiter granted 10/s that wants 1e6/s:
// in shadow mode it admits a burst of 200 at once and counts what the
// grant would have refused; otherwise it refuses almost all of them.
//
// a's clock (clk) stands still but when the test moves it: the buckets
// fill for the second it is moved on, and earn nothing while the 200
// events run (on the real clock, 200ms of them on a loaded machine
// earned the grant's bucket more than the test allowed for).
func checkShadowRate(t *testing.T, a *Agent, clk *clocktest.Fake, id string, shadow bool) {
	t.Helper()
	lim, err := a.Rate(id, WithWants(1e6))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, id+": lease of 10/s", func() bool {
		st := lim.Status()
		return st.Leased && st.Granted == 10 && st.Shadow == shadow
	})
	clk.Advance(time.Second)
	if shadow {
		// The enforced rate is the wants: its bucket has filled.
		if n := lim.Tokens(); n < 200 {
			t.Fatalf("%s: %v tokens a second into the wants of 1e6/s, want 200 at least", id, n)
		}
	}
	allowed := 0
	for range 200 {
		if lim.Allow() {
			allowed++
		}
	}
	st := lim.Status()
	if !shadow {
		// A second's worth of burst (10).
		if allowed != 10 || st.Shadow || st.WouldRefuse != 0 || st.ShadowAdmitted != 0 || st.Capacity != 10 {
			t.Errorf("%s not in shadow mode: allowed %d of 200 at 10/s, want 10; status %+v", id, allowed, st)
		}
		return
	}
	if allowed != 200 {
		t.Errorf("%s in shadow mode: allowed %d of 200, want all", id, allowed)
	}
	// The shadow bucket holds a second's worth (10 tokens at 10/s).
	if st.ShadowAdmitted != 200 || st.WouldRefuse != 190 {
		t.Errorf("%s: ShadowAdmitted %d, WouldRefuse %d; want 200 and 190", id, st.ShadowAdmitted, st.WouldRefuse)
	}
	if st.Capacity != 1e6 || st.ShadowCapacity != 10 || st.Source != SourceLease {
		t.Errorf("%s: Capacity %g, ShadowCapacity %g, Source %v; want the wants 1e6 in force, 10 shadowed, from the lease", id, st.Capacity, st.ShadowCapacity, st.Source)
	}
}

// checkShadowGauge drives a gauge granted 2 units that wants 5; a's clock
// (clk) moves on while it waits for the lease, so that the agent asks
// again if its first answer grants less.
func checkShadowGauge(t *testing.T, a *Agent, clk *clocktest.Fake, id string, shadow bool) {
	t.Helper()
	g, err := a.Gauge(id, WithWants(5))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, id+": lease of 2 units", func() bool {
		clk.Advance(20 * time.Millisecond)
		st := g.Status()
		return st.Leased && st.Granted == 2 && st.Shadow == shadow && g.Limit() == map[bool]int{false: 2, true: 5}[shadow]
	})
	got := 0
	for range 4 {
		if g.TryAcquire(1) {
			got++
		}
	}
	st := g.Status()
	want, would := 2, uint64(0)
	if shadow {
		want, would = 4, 2
	}
	if got != want || st.WouldRefuse != would {
		t.Errorf("%s (shadow %v): acquired %d of 4, WouldRefuse %d; want %d and %d", id, shadow, got, st.WouldRefuse, want, would)
	}
	// A waiter admitted later is measured too.
	if err := g.Release(got); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Acquire(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if st := g.Status(); st.WouldRefuse != would {
		t.Errorf("%s: WouldRefuse %d after acquiring within the grant, want %d", id, st.WouldRefuse, would)
	}
}

// TestShadowTemplate: through a real coordinator, a resource whose
// template says shadow is enforced at the wants while its grant is
// measured; a resource of another template on the same agent is not.
func TestShadowTemplate(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	watched, watchedG := testTemplate("watched", 10), testTemplate("watched-g", 2)
	watched.Shadow, watchedG.Shadow = true, true
	startCoordinator(t, natstest.Conn(t, s), watched, watchedG, testTemplate("strict", 10), testTemplate("strict-g", 2))
	clk := clocktest.At(time.Now())
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithClock(clk))
	checkShadowRate(t, a, clk, "watched", true)
	checkShadowRate(t, a, clk, "strict", false)
	checkShadowGauge(t, a, clk, "watched-g", true)
	checkShadowGauge(t, a, clk, "strict-g", false)
}

// TestShadowGlobal: a coordinator with Options.Shadow puts every resource
// in shadow mode.
func TestShadowGlobal(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{
		Node: "root", RoundInterval: 10 * time.Millisecond, Shadow: true, Logger: quiet,
		Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{testTemplate("api", 10), testTemplate("conns", 2)}, nil)),
	})
	clk := clocktest.At(time.Now())
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithClock(clk))
	checkShadowRate(t, a, clk, "api", true)
	checkShadowGauge(t, a, clk, "conns", true)
}

// swappableTemplates is a template source a test can change.
type swappableTemplates struct{ p atomic.Pointer[config.Set] }

// TestShadowEnds: when the operator takes shadow off the template, the
// agent enforces the grant again and its counters keep their values.
func TestShadowEnds(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	watched := testTemplate("api", 10)
	watched.Shadow = true
	src := &swappableTemplates{}
	src.p.Store(config.NewSet(1, []*config.Template{watched}, nil))
	coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", RoundInterval: 10 * time.Millisecond, Templates: sources.TemplatesFunc(src.p.Load), Logger: quiet})
	clk := clocktest.At(time.Now())
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithClock(clk))
	checkShadowRate(t, a, clk, "api", true)
	lim, _ := a.Rate("api")
	before := lim.Status().WouldRefuse

	src.p.Store(config.NewSet(2, []*config.Template{testTemplate("api", 10)}, nil))
	// The agent refreshes as its clock moves (a refresh is due every
	// 300ms of it), faster than the real one but for well under the
	// minute a lease lasts.
	poll.Until(t, 10*time.Second, "shadow off after the template changed", func() bool {
		clk.Advance(20 * time.Millisecond)
		return !lim.Status().Shadow
	})
	st := lim.Status()
	if st.Capacity != 10 || lim.Limit() != 10 || st.WouldRefuse != before || st.ShadowCapacity != 0 {
		t.Errorf("after shadow: Capacity %g, Limit %g, WouldRefuse %d (was %d), ShadowCapacity %g; want 10, 10, unchanged, 0",
			st.Capacity, float64(lim.Limit()), st.WouldRefuse, before, st.ShadowCapacity)
	}
	lim.Allow()
	if got := lim.Status(); got.ShadowAdmitted != 200 {
		t.Errorf("ShadowAdmitted %d after shadow ended, want 200 (no longer counting)", got.ShadowAdmitted)
	}
}

// TestShadowOutlivesLease: when the coordinator goes away, a shadowed
// resource keeps enforcing its wants; what is measured is then the
// failure mode's capacity (the safe capacity).
func TestShadowOutlivesLease(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	watched := expiringTemplate("api", 10)
	watched.Shadow, watched.Floor = true, config.FloorPolicy{Absolute: 4, HasAbsolute: true, Lease: time.Minute}
	c := startCoordinator(t, natstest.Conn(t, s), watched)
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"))
	lim, err := a.Rate("api", WithWants(50))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a shadow lease", func() bool { st := lim.Status(); return st.Leased && st.Shadow })
	c.Stop()
	poll.Until(t, 10*time.Second, "the lease to expire", func() bool { return lim.Status().Source == SourceSafe })
	st := lim.Status()
	if !st.Shadow || st.Capacity != 50 || float64(lim.Limit()) != 50 || st.ShadowCapacity != 4 {
		t.Errorf("after the lease: Shadow %v, Capacity %g, Limit %g, ShadowCapacity %g; want true, 50, 50, 4", st.Shadow, st.Capacity, float64(lim.Limit()), st.ShadowCapacity)
	}
}
