package agentmetrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/agentmetrics"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/agent/internal/limittest"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// TestAgentCollector registers an agent's collector with a real
// coordinator behind it and checks the granted capacity, the admitted and
// refused counts of a rate and a gauge resource, and the time without a
// lease.
func TestAgentCollector(t *testing.T) {
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	quiet := slog.New(slog.DiscardHandler)
	tmpl := &config.Template{Name: "api", Glob: "*", Capacity: 2, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: time.Minute, RefreshInterval: 10 * time.Second}
	short := &config.Template{Name: "short", Glob: "short", Capacity: 10, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 500 * time.Millisecond, RefreshInterval: 100 * time.Millisecond}
	c := coordtest.Start(t, nc, coordinator.Options{
		RoundInterval: coordinator.NoRoundInterval,
		Templates:     sources.StaticTemplates(config.NewSet(1, []*config.Template{tmpl, short}, nil)),
		Logger:        quiet,
	})
	a, err := agent.New(nc, agent.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(agentmetrics.New(a))

	// Capacity 2 per second, burst 2: of 5 events at once, 2 pass.
	lim, err := a.Rate("api", agent.WithWants(2), agent.WithBurst(2))
	if err != nil {
		t.Fatal(err)
	}
	g, err := a.Gauge("conns", agent.WithWants(2))
	if err != nil {
		t.Fatal(err)
	}
	sh, err := a.Rate("short", agent.WithWants(1))
	if err != nil {
		t.Fatal(err)
	}
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if lim.Capacity() != 2 || g.Capacity() != 2 || !sh.Status().Leased {
			return fmt.Errorf("no lease of 2: rate %+v, gauge %+v", lim.Status(), g.Status())
		}
		return nil
	})
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if n := lim.Tokens(); n < 2 {
			return fmt.Errorf("bucket not full: %v tokens", n)
		}
		return nil
	})
	for range 5 {
		lim.Allow()
	}
	ok := 0
	for range 3 {
		if g.TryAcquire(1) {
			ok++
		}
	}
	if ok != 2 {
		t.Fatalf("gauge of 2 admitted %d of 3", ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := g.Acquire(ctx, 1); err == nil {
		t.Fatal("gauge at its limit admitted an Acquire")
	}

	check := func(name, resource, kind string, want float64) {
		t.Helper()
		if got, _ := sample(t, reg, name, resource, kind); got != want {
			t.Errorf("%s{resource=%q} = %v; want %v", name, resource, got, want)
		}
	}
	check("allot_agent_granted", "api", "rate", 2)
	check("allot_agent_capacity", "api", "rate", 2)
	check("allot_agent_leased", "api", "rate", 1)
	check("allot_agent_admitted_total", "api", "rate", 2)
	check("allot_agent_refused_total", "api", "rate", 3)
	check("allot_agent_admitted_total", "conns", "gauge", 2)
	check("allot_agent_refused_total", "conns", "gauge", 2) // TryAcquire and Acquire
	if n := samples(t, reg); n != 3*11+1 {
		t.Errorf("%d samples; want 34 (11 per resource and the term)", n)
	}
	check("allot_agent_shadow", "api", "rate", 0)
	check("allot_agent_would_refuse_total", "api", "rate", 0)

	// While leased, the time without a lease stands still (it counts the
	// moments before the first lease): api's lease, a minute long, holds
	// while the agent refreshes short's twice.
	apiLeased, leased := fallback(t, a, "api"), fallback(t, a, "short")
	for range 2 {
		last := sh.Status().LastRefresh
		poll.Until(t, 10*time.Second, "a refresh of short", func() bool { return sh.Status().LastRefresh.After(last) })
	}
	if f := fallback(t, a, "api"); f != apiLeased || !lim.Status().Leased {
		t.Fatalf("time without a lease moved from %v to %v while leased (leased %v)", apiLeased, f, lim.Status().Leased)
	}
	// With the coordinator gone and the lease expired, the agent runs on
	// its safe capacity, and the time counts.
	c.Stop()
	poll.Until(t, 30*time.Second, "the lease of short to expire", func() bool { return !sh.Status().Leased })
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if f := fallback(t, a, "short"); f < leased+100*time.Millisecond {
			return fmt.Errorf("time without a lease %v; want at least %v", f, leased+100*time.Millisecond)
		}
		return nil
	})
	check("allot_agent_leased", "short", "rate", 0)
	if v, _ := sample(t, reg, "allot_agent_fallback_seconds_total", "short", "rate"); v < 0.1 {
		t.Errorf("allot_agent_fallback_seconds_total{resource=short} = %v; want at least 0.1", v)
	}
}

// sample returns the value of family name for resource and kind.
func sample(t *testing.T, reg *prometheus.Registry, name, resource, kind string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["resource"] == resource && l["kind"] == kind {
				return m.GetGauge().GetValue() + m.GetCounter().GetValue(), true
			}
		}
	}
	return -1, false
}

// samples counts the samples reg gathers.
func samples(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		n += len(f.GetMetric())
	}
	return n
}

func fallback(t *testing.T, a *agent.Agent, id string) time.Duration {
	t.Helper()
	for _, u := range a.Usage() {
		if u.ResourceID == id {
			return u.Fallback
		}
	}
	t.Fatalf("no usage of %s", id)
	return 0
}

// TestAgentCollectorShadow: under a shadow template the collector says
// shadow and counts what the grant would have refused.
//
// The agent's clock stands still but when the test moves it: on the real
// clock, a second between two of the ten events on a loaded machine
// earned the shadowed bucket another token.
func TestAgentCollectorShadow(t *testing.T) {
	clk := clocktest.At(time.Now())
	a := limittest.AgentWith(t, []agent.Option{agent.WithClock(clk)}, limittest.Template("watched", 1, true))
	reg := prometheus.NewRegistry()
	reg.MustRegister(agentmetrics.New(a))
	lim, err := a.Rate("watched", agent.WithWants(1e6))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a shadow lease", func() bool { return lim.Status().Shadow })
	clk.Advance(time.Second)
	if n := lim.Tokens(); n < 10 {
		t.Fatalf("%v tokens a second into the shadow lease, want 10 at least", n)
	}
	for range 10 {
		lim.Allow()
	}
	for name, want := range map[string]float64{"allot_agent_shadow": 1, "allot_agent_shadow_capacity": 1, "allot_agent_shadow_admitted_total": 10} {
		if got, _ := sample(t, reg, name, "watched", "rate"); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
	// A burst of 1 at 1/s: the first passes the shadowed bucket.
	if got, _ := sample(t, reg, "allot_agent_would_refuse_total", "watched", "rate"); got != 9 {
		t.Errorf("allot_agent_would_refuse_total = %v; want 9", got)
	}
}
