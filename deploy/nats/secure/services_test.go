package secure_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/quotaserver"
)

// startServices runs a quota and a domain-limits server of node root on
// the coordinator user's connection, as `allot coordinator` does, with a
// quota namespace "api" (5 tokens per bucket) and a domain namespace "app"
// (copies resource "pool", 2 per domain).
func (d *deployment) startServices(t *testing.T) {
	t.Helper()
	nc, errs := d.dial(t, d.srv, "coordinator")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	qcfg := &quota.Config{Namespaces: map[string]*quota.Namespace{"api": {Name: "api",
		Dynamic: &quota.Spec{Algorithm: quota.TokenBucket, Size: 5, FillRate: 0.001, MaxTokensPerRequest: 5}, MaxDynamicBuckets: 100}}}
	qs, err := quotaserver.New(nc, quotaserver.Options{Config: func() *quota.Config { return qcfg }, Logger: log})
	if err == nil {
		err = qs.Start(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qs.Stop)
	dcfg := map[string]*domainlimit.Namespace{"app": {Name: "app", Resources: map[string]domainlimit.Resource{
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: 2, GlobalLimit: domainlimit.Unlimited}}}}}
	ds, err := domainserver.New(nc, domainserver.Options{Config: func() map[string]*domainlimit.Namespace { return dcfg }, Logger: log})
	if err == nil {
		err = ds.Start(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ds.Stop)
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("the coordinator user was refused: %v", e)
	}
}

// TestTenantQuotaAndDomainLimits: a tenant's agent takes quota tokens and
// a tenant reserves domain-limited copies through the import, on the
// ordinary subjects, with nothing refused; the ALLOT account's mappings
// deliver them to the services.
func TestTenantQuotaAndDomainLimits(t *testing.T) {
	d := startDeployment(t)
	d.startServices(t)
	nc, errs := d.dial(t, d.srv, "tenant_a")
	a, err := agent.New(nc, agent.WithQuotaTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range 6 {
		res, err := a.Take(ctx, "api:alice", 1)
		if i < 5 && (err != nil || res.Fallback) {
			t.Fatalf("take %d: %+v %v", i, res, err)
		}
		if i == 5 && err == nil {
			t.Fatalf("take 6 of a bucket of 5 was answered %+v", res)
		}
	}
	m, err := nc.Request(domainwire.Subject("root", domainwire.OpReserve, "app", "pool"), []byte(`{"domain":"acme","copies":3,"min_copies":1,"client_id":"w1"}`), wait)
	if err != nil {
		t.Fatal(err)
	}
	var r domainwire.ReserveReply
	if err := json.Unmarshal(m.Data, &r); err != nil || r.Granted != 2 || r.HoldID == "" {
		t.Fatalf("reserve through the import: %s %v", m.Data, err)
	}
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("tenant_a was refused: %v", e)
	}
}
