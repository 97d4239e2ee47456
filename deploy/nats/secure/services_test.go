package secure_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	agentquota "github.com/allot/allot/agent/quota"
	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/quotaserver"
)

// startServices runs a quota and a domain-limits server of node root on
// the coordinator user's connection, as `allot coordinator` does, with a
// quota namespace "api" (5 tokens per bucket) and a domain namespace "app"
// (copies resource "pool", 2 per domain), each open to every tenant, and
// the same as "own" in both, open to TENANT_A only.
func (d *deployment) startServices(t *testing.T) {
	t.Helper()
	nc, errs := d.dial(t, d.srv, "coordinator")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	bucket := &quota.Spec{Algorithm: quota.TokenBucket, Size: 5, FillRate: 0.001, MaxTokensPerRequest: 5}
	qcfg := &quota.Config{Namespaces: map[string]*quota.Namespace{
		"api": {Name: "api", Dynamic: bucket, MaxDynamicBuckets: 100},
		"own": {Name: "own", Dynamic: bucket, MaxDynamicBuckets: 100, Tenants: []string{"TENANT_A"}}}}
	qs, err := quotaserver.New(nc, quotaserver.Options{Config: sources.QuotaFunc(func() *quota.Config { return qcfg }), Logger: log})
	if err == nil {
		err = qs.Start(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(qs.Stop)
	pool := map[string]domainlimit.Resource{
		"pool": {Name: "pool", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: 2, GlobalLimit: domainlimit.Unlimited}}}
	dcfg := map[string]*domainlimit.Namespace{"app": {Name: "app", Resources: pool},
		"own": {Name: "own", Resources: pool, Tenants: []string{"TENANT_A"}}}
	ds, err := domainserver.New(nc, domainserver.Options{Config: sources.DomainsFunc(func() map[string]*domainlimit.Namespace { return dcfg }), Logger: log})
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

// quotaClient returns a quota client of an agent on nc, both closed when
// the test ends, that waits 2s for the service's answers.
func quotaClient(t *testing.T, nc *nats.Conn) *agentquota.Client {
	t.Helper()
	a, err := agent.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	q, err := agentquota.New(a, agentquota.WithTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// TestTenantQuotaAndDomainLimits: a tenant's agent takes quota tokens and
// a tenant reserves domain-limited copies through the import, on the
// ordinary subjects, with nothing refused; the ALLOT account's mappings
// deliver them to the services.
func TestTenantQuotaAndDomainLimits(t *testing.T) {
	d := startDeployment(t)
	d.startServices(t)
	nc, errs := d.dial(t, d.srv, "tenant_a")
	q := quotaClient(t, nc)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := range 6 {
		res, err := q.Take(ctx, "api:alice", 1)
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

// TestTenantOnlyNamespaces: namespaces open to TENANT_A only refuse
// TENANT_B's takes and reserves with 403 naming the tenant (nats-server
// names the account in the Nats-Request-Info header of the import,
// through the ALLOT account's mappings), change nothing for them, and
// serve TENANT_A.
func TestTenantOnlyNamespaces(t *testing.T) {
	d := startDeployment(t)
	d.startServices(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	reserve := func(nc *nats.Conn) *nats.Msg {
		t.Helper()
		m, err := nc.Request(domainwire.Subject("root", domainwire.OpReserve, "own", "pool"), []byte(`{"domain":"acme","copies":1,"client_id":"w1"}`), wait)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	ncB, _ := d.dial(t, d.srv, "tenant_b")
	qb := quotaClient(t, ncB)
	var se *agent.ServiceError
	if _, err := qb.Take(ctx, "own:k", 1); !errors.As(err, &se) || se.Code != 403 || !strings.Contains(se.Description, `"TENANT_B"`) {
		t.Errorf("TENANT_B's take from own: %v; want 403 naming TENANT_B", err)
	}
	if m := reserve(ncB); m.Header.Get("Nats-Service-Error-Code") != "403" {
		t.Errorf("TENANT_B's reserve in own: %s %v; want 403", m.Data, m.Header)
	}

	ncA, errs := d.dial(t, d.srv, "tenant_a")
	qa := quotaClient(t, ncA)
	if res, err := qa.Take(ctx, "own:k", 1); err != nil || res.Fallback || res.Remaining != 4 {
		t.Errorf("TENANT_A's take from own: %+v, %v; want 4 left (TENANT_B took none)", res, err)
	}
	var r domainwire.ReserveReply
	if m := reserve(ncA); json.Unmarshal(m.Data, &r) != nil || r.Granted != 1 || r.DomainHolds != 1 {
		t.Errorf("TENANT_A's reserve in own: %s; want the first hold of acme", m.Data)
	}
	if e := errs.all(); len(e) > 0 {
		t.Fatalf("tenant_a was refused: %v", e)
	}
}
