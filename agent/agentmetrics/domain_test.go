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
)

// TestAgentCollectorDomain: a hold of a real domain server shows as held
// copies, and a refused reserve as a rejection, under the resource's
// label.
func TestAgentCollectorDomain(t *testing.T) {
	s := natstest.Server(t)
	quiet := slog.New(slog.DiscardHandler)
	nss := map[string]*domainlimit.Namespace{"app": {Name: "app", Resources: map[string]domainlimit.Resource{
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: 3, GlobalLimit: domainlimit.Unlimited}}}}}
	srv, err := domainserver.New(natstest.Conn(t, s), domainserver.Options{Config: func() map[string]*domainlimit.Namespace { return nss }, Logger: quiet})
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
	for name, want := range map[string]float64{
		"allot_agent_domain_held_copies":    2,
		"allot_agent_domain_calls_total":    2,
		"allot_agent_domain_granted_total":  1,
		"allot_agent_domain_rejected_total": 1,
		"allot_agent_domain_degraded_total": 0,
		"allot_agent_domain_local_copies":   0,
	} {
		if v, ok := sample(t, reg, name, "app:pool", ""); !ok || v != want {
			t.Errorf("%s{resource=app:pool} = %v (found %v), want %v", name, v, ok, want)
		}
	}
}
