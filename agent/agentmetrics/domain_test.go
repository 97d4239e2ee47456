package agentmetrics_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/agentmetrics"
	"github.com/allot/allot/agent/domain"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
)

// TestAgentCollectorDomain: a hold of a real domain server shows as held
// copies, and a refused reserve as a rejection, under the resource's
// label; with the server gone, a local hold within the share as a
// degraded grant and local copies, one beyond it as a degraded refusal.
func TestAgentCollectorDomain(t *testing.T) {
	s := natstest.Server(t)
	quiet := slog.New(slog.DiscardHandler)
	nss := map[string]*domainlimit.Namespace{"app": {Name: "app", Resources: map[string]domainlimit.Resource{
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: 3, GlobalLimit: domainlimit.Unlimited}}}}}
	srv, err := domainserver.New(natstest.Conn(t, s), domainserver.Options{Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return nss }), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	// The counts below are of the service's answers: past the default
	// domain timeout (500ms), which a request may take under -race on a
	// loaded machine, the client would fail open (degraded) instead.
	a, err := agent.New(natstest.Conn(t, s), agent.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	d, err := domain.New(a, domain.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(agentmetrics.New(a), agentmetrics.NewDomain(d))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := d.Reserve(ctx, "app:pool", "acme", 2)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := d.Reserve(ctx, "app:pool", "acme", 2); !errors.Is(err, domain.ErrRejected) {
		t.Fatalf("a reserve above the domain limit: %v", err)
	}
	wantPool(t, reg, map[string]float64{
		"allot_agent_domain_held_copies":    2,
		"allot_agent_domain_calls_total":    2,
		"allot_agent_domain_granted_total":  1,
		"allot_agent_domain_rejected_total": 1,
		"allot_agent_domain_degraded_total": 0,
		"allot_agent_domain_local_copies":   0,
	})
	// No service: within its share (its 2 copies and the 1 left of the
	// domain's 3), the client grants itself one copy, and refuses the next.
	srv.Stop()
	if h, err := d.Reserve(ctx, "app:pool", "acme", 1); err != nil || !h.Info().Degraded {
		t.Fatalf("a reserve within the share while no service answers: %+v, %v", h, err)
	}
	if _, err := d.Reserve(ctx, "app:pool", "acme", 1); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("a reserve beyond the share while no service answers: %v", err)
	}
	wantPool(t, reg, map[string]float64{
		"allot_agent_domain_degraded_total":         1,
		"allot_agent_domain_degraded_refused_total": 1,
		"allot_agent_domain_local_copies":           1,
	})
}

// wantPool checks the values of metrics of resource app:pool.
func wantPool(t *testing.T, reg *prometheus.Registry, want map[string]float64) {
	t.Helper()
	for name, w := range want {
		if v, ok := sample(t, reg, name, "app:pool", ""); !ok || v != w {
			t.Errorf("%s{resource=app:pool} = %v (found %v), want %v", name, v, ok, w)
		}
	}
}
