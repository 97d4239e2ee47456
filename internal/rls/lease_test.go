package rls_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/rls"
	"github.com/allot/allot/internal/sources"
)

// TestSidecarReplaysReference replays the reference's recorded scenarios
// through the sidecar's Store, over real gRPC, at the recorded instants:
// no template maps these descriptors to leases (one maps another
// domain's), so every counter is counted in the partitions over NATS,
// and every reply equals the reference's.
func TestSidecarReplaysReference(t *testing.T) {
	rec := loadRecording(t)
	clock := &stepClock{}
	c := startCluster(t, 2, clock.now)
	putTemplate(t, c, "elsewhere", `{"identifier_glob":"envoy/elsewhere/*","capacity":10,"algorithm":{"kind":"FAIR_SHARE"}}`)
	store := leaseStore(t, c, "sidecar")
	replayRecorded(t, c, clock, store, rec, "_sidecar")
	if tracked, leased := store.Leases(); tracked == 0 || leased != 0 {
		t.Errorf("%d lease resources tracked, %d leased: want some tracked, none leased", tracked, leased)
	}
}

// putTemplate stores a template in the cluster's bucket and waits until
// the watcher serves it.
func putTemplate(t *testing.T, c *cluster, name, doc string) {
	t.Helper()
	if _, err := c.kv.Put(context.Background(), config.Key(name), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "template "+name, func() bool {
		for _, tm := range c.watcher.Current().Templates() {
			if tm.Name == name {
				return true
			}
		}
		return false
	})
}

// leaseStore starts a sidecar's store on its own connection, with client
// id id, counting centrally over NATS.
func leaseStore(t *testing.T, c *cluster, id string) *rls.LeaseStore {
	t.Helper()
	store, err := rls.NewLeaseStore(rls.LeaseStoreOptions{Conn: natstest.Conn(t, c.srv), Agent: []agent.Option{agent.WithClientID(id), agent.WithLogger(quiet())},
		Templates: c.watcher.Current, Central: c.router(t, false), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// TestSidecarLeases: a template maps path=/api/* of domain edge to a
// lease resource of 20 per second. Two sidecars answer it from their
// leases, in process: once they hold them, requests for it reach no
// partition, the leases add up to at most the capacity, and what the
// sidecars admit stays within it. A request that also carries a
// descriptor no template maps counts that one in the partitions.
func TestSidecarLeases(t *testing.T) {
	c := startCluster(t, 1, nil)
	// Leases of a minute: a lease that lapsed while the machine was slow
	// (one refresh answered late) would send the requests to the
	// partition, which the test counts as a lease not answering them.
	putTemplate(t, c, "edge-api", `{"identifier_glob":"envoy/edge/path=/api/*","capacity":20,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"200ms"}}`)
	if _, err := c.kv.Put(context.Background(), config.EnvoyKey("edge"), []byte(`domain: edge
descriptors:
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1000}
`)); err != nil {
		t.Fatal(err)
	}
	c.waitDomains(t, []string{"edge"})
	coord, err := coordinator.New(natstest.Conn(t, c.srv), coordinator.Options{Templates: sources.WatchedTemplates(c.watcher), RoundInterval: 5 * time.Millisecond, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coord.Stop)

	type sidecar struct {
		store  *rls.LeaseStore
		client rlspb.RateLimitServiceClient
	}
	var cars []sidecar
	for i := range 2 {
		store := leaseStore(t, c, fmt.Sprintf("sidecar-%d", i))
		svc, err := rls.New(rls.Options{Config: rls.WatchedConfig(c.watcher), Store: store, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		cars = append(cars, sidecar{store, serveGRPC(t, svc)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	api := func(path string) *rlspb.RateLimitRequest {
		return &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{
			{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "path", Value: path}}}}}
	}
	ask := func(s sidecar, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
		t.Helper()
		resp, err := s.client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// Demand at both until both hold a lease.
	poll.Until(t, 20*time.Second, "both sidecars to hold a lease", func() bool {
		for _, s := range cars {
			ask(s, api("/api/warm"))
		}
		_, l0 := cars[0].store.Leases()
		_, l1 := cars[1].store.Leases()
		return l0 == 1 && l1 == 1
	})
	counted := c.replicas[0].Server().Stats().Requests
	start := time.Now()
	admitted := 0
	var bursts float64
	for range 400 {
		for _, s := range cars {
			resp := ask(s, api("/api/v1/items"))
			st := resp.GetStatuses()[0]
			if st.GetCurrentLimit().GetRequestsPerUnit() != 1000 {
				t.Fatalf("current_limit %v: want the configured limit", st.GetCurrentLimit())
			}
			if resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
				admitted++
			}
		}
	}
	elapsed := time.Since(start)
	var sum float64
	for _, s := range cars {
		lim, err := s.store.Agent().Rate("envoy/edge/path=/api/*")
		if err != nil {
			t.Fatal(err)
		}
		st := lim.Status()
		if st.Source != agent.SourceLease || st.Capacity <= 0 {
			t.Errorf("sidecar %s: %+v", s.store.Agent().ClientID(), st)
		}
		sum += st.Granted
		bursts += float64(lim.Burst())
	}
	if sum > 20 {
		t.Errorf("the leases add up to %g, above the capacity 20", sum)
	}
	// Token buckets never admit more than their rate and one burst, the
	// rate being at most the lease.
	if most := 20*elapsed.Seconds() + bursts; float64(admitted) > most {
		t.Errorf("admitted %d in %v: above %g", admitted, elapsed, most)
	}
	if admitted == 0 || admitted == 800 {
		t.Errorf("admitted %d of 800: want the leases to refuse some and admit some", admitted)
	}
	if n := c.replicas[0].Server().Stats().Requests; n != counted {
		t.Errorf("%d count requests reached the partition for lease-mapped descriptors", n-counted)
	}

	// A descriptor no template maps, beside one that is, in one request:
	// the first is counted in the partition.
	mixed := api("/api/mixed")
	mixed.Descriptors = append(mixed.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "client", Value: "alice"}}})
	resp := ask(cars[0], mixed)
	if got := resp.GetStatuses()[1]; got.GetCurrentLimit().GetRequestsPerUnit() != 1000 || got.GetLimitRemaining() != 999 {
		t.Errorf("the unmapped descriptor: %v", got)
	}
	if n := c.replicas[0].Server().Stats().Requests; n != counted+1 {
		t.Errorf("%d count requests for one unmapped descriptor, want 1", n-counted)
	}

	// Without its template the descriptor is counted in the partition
	// again, and the sidecars give the lease back.
	if err := c.kv.Delete(ctx, config.Key("edge-api")); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "the template to go", func() bool {
		ask(cars[0], api("/api/after"))
		ask(cars[1], api("/api/after"))
		_, l0 := cars[0].store.Leases()
		_, l1 := cars[1].store.Leases()
		return l0 == 0 && l1 == 0
	})
	before := c.replicas[0].Server().Stats().Requests
	if resp := ask(cars[0], api("/api/after")); resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
		t.Errorf("counted centrally: %v", resp)
	}
	if n := c.replicas[0].Server().Stats().Requests; n != before+1 {
		t.Errorf("%d count requests once the template is gone, want 1", n-before)
	}
}
