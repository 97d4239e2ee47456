package ledger

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// tenantSet is one FAIR_SHARE template over every resource with policy p.
func tenantSet(capacity float64, p *config.TenantPolicy) *config.Set {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: capacity, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 5 * time.Second, RefreshInterval: time.Second, Tenants: p}
	return config.NewSet(1, []*config.Template{tm}, nil)
}

// tenantClient asks as a client of a tenant would, reporting the lease
// it holds.
type tenantClient struct {
	who      Claimant
	id       string
	wants    float64
	priority int32
	lease    Lease
}

func (c *tenantClient) request(resources ...string) *allotpb.GetCapacityRequest {
	req := &allotpb.GetCapacityRequest{ClientId: c.id}
	if len(resources) == 0 {
		resources = []string{"r"}
	}
	for _, rid := range resources {
		rr := &allotpb.ResourceRequest{ResourceId: rid, Wants: c.wants, Priority: c.priority}
		if c.lease.Capacity > 0 {
			rr.Has = &allotpb.Lease{Capacity: c.lease.Capacity, ExpiryTime: timestamppb.New(time.Unix(0, c.lease.Expiry))}
		}
		req.Resource = append(req.Resource, rr)
	}
	return req
}

// rounds runs n rounds in which every client asks once, and checks after
// each that the leases never sum above the capacity.
func rounds(t *testing.T, l *Ledger, set *config.Set, now *int64, n int, clients []*tenantClient) {
	t.Helper()
	for range n {
		*now += int64(100 * time.Millisecond)
		slots := make([][]Slot, len(clients))
		for k, c := range clients {
			s, err := l.GetAs(*now, set, c.who, c.request())
			if err != nil {
				t.Fatal(err)
			}
			slots[k] = s
		}
		settleRound(l, *now)
		var sum float64
		for k, c := range clients {
			c.lease = slots[k][0].Lease(*now)
			sum += c.lease.Capacity
		}
		if capacity := set.Match("r").Capacity; sum > capacity*(1+1e-9) {
			t.Fatalf("leases sum to %v of %v", sum, capacity)
		}
	}
}

// With the fairness level, a tenant's share does not grow with its
// client ids: ten clients of A against one of B and one plain client
// split the capacity in three (B's weight 2: A 25, B 50, plain 25);
// without it, every client gets a twelfth.
func TestTenantFairnessLevel(t *testing.T) {
	for _, fair := range []bool{true, false} {
		t.Run(fmt.Sprintf("fair=%v", fair), func(t *testing.T) {
			p := &config.TenantPolicy{Fair: fair}
			if fair {
				p.Weights = map[string]float64{"B": 2}
			}
			set := tenantSet(100, p)
			now := int64(1e18)
			l := newViewLedger(now)
			var clients []*tenantClient
			for i := range 10 {
				clients = append(clients, &tenantClient{who: Claimant{Tenant: "A", User: "a"}, id: fmt.Sprint("a", i), wants: 100})
			}
			b := &tenantClient{who: Claimant{Tenant: "B", User: "b"}, id: "a0", wants: 100} // A's ids do not help B
			plain := &tenantClient{id: "a1", wants: 100}
			clients = append(clients, b, plain)
			rounds(t, l, set, &now, 20, clients)
			var sumA float64
			for _, c := range clients[:10] {
				sumA += c.lease.Capacity
			}
			want := []float64{25, 50, 25}
			if !fair {
				want = []float64{1000.0 / 12, 100.0 / 12, 100.0 / 12}
			}
			if got := []float64{sumA, b.lease.Capacity, plain.lease.Capacity}; math.Abs(got[0]-want[0]) > 1e-6 || math.Abs(got[1]-want[1]) > 1e-6 || math.Abs(got[2]-want[2]) > 1e-6 {
				t.Fatalf("A, B, plain get %v, want %v", got, want)
			}
		})
	}
}

// A tenant's priority bound caps what its clients claim, beside the
// template's; a tenant without an entry gets the default, the plain
// tenant only its own entry.
func TestTenantPriorityBound(t *testing.T) {
	p := &config.TenantPolicy{MaxPriority: map[string]int32{"A": 5}, DefaultMaxPriority: 0, HasDefaultMaxPriority: true}
	set := tenantSet(100, p)
	now := int64(1e18)
	l := newViewLedger(now)
	a := &tenantClient{who: Claimant{Tenant: "A"}, id: "a", wants: 100, priority: 5}
	b := &tenantClient{who: Claimant{Tenant: "B"}, id: "b", wants: 100, priority: 1000}
	rounds(t, l, set, &now, 10, []*tenantClient{a, b})
	if a.lease.Capacity != 100 || b.lease.Capacity != 0 {
		t.Fatalf("A at 5 gets %v, B asking 1000 (bound 0) gets %v; want 100 and 0", a.lease.Capacity, b.lease.Capacity)
	}
	if l.Stats().PriorityCapped == 0 {
		t.Fatal("capped requests are not counted")
	}
	// The plain tenant is not bounded by the default: it outranks A.
	plain := &tenantClient{id: "p", wants: 100, priority: 6}
	rounds(t, l, set, &now, 10, []*tenantClient{a, b, plain})
	if plain.lease.Capacity != 100 {
		t.Fatalf("a plain client at 6 gets %v, want 100", plain.lease.Capacity)
	}
	// The template's bound applies to everyone.
	tm := *set.Match("r")
	tm.MaxPriority, tm.HasMaxPriority = 2, true
	if got := l.priority(&tm, Claimant{Tenant: "A"}, 5); got != 2 {
		t.Fatalf("A asking 5 under template bound 2 and tenant bound 5 is served at %d", got)
	}
}

// A tenant may keep at most max_clients client ids per resource and have
// clients on at most max_resources resources: beyond, the resource gets
// 429 with the reason and nothing changes; other tenants and plain
// clients are not affected; a released id frees its place.
func TestTenantCaps(t *testing.T) {
	set := tenantSet(100, &config.TenantPolicy{MaxClients: 3, MaxResources: 2})
	now := int64(1e18)
	l := newViewLedger(now)
	get := func(who Claimant, id string, resources ...string) []Slot {
		t.Helper()
		c := &tenantClient{who: who, id: id, wants: 1}
		slots, _ := l.GetAs(now, set, who, c.request(resources...))
		settleRound(l, now)
		return slots
	}
	a := Claimant{Tenant: "A", User: "u"}
	for i := range 3 {
		if s := get(a, fmt.Sprint("c", i)); s[0].Code != 0 {
			t.Fatalf("client %d: %v", i, s[0].Err)
		}
	}
	records := l.Stats().Clients
	s := get(a, "c3")
	if s[0].Code != CodeTooMany || !strings.Contains(s[0].Err, `tenant "A" has 3 client ids on resource "r" and the limit is 3 (tenants.max_clients of template "t")`) {
		t.Fatalf("the 4th id of A: %d %q", s[0].Code, s[0].Err)
	}
	if l.Stats().Clients != records || l.Stats().TenantCapped != 1 {
		t.Fatalf("a refused request changed the records (%d → %d) or was not counted", records, l.Stats().Clients)
	}
	if s := get(Claimant{Tenant: "A", User: "v"}, "c0"); s[0].Code != CodeTooMany {
		t.Fatal("another user of A passed A's cap")
	}
	if s := get(Claimant{Tenant: "B"}, "c3"); s[0].Code != 0 {
		t.Fatalf("B: %v", s[0].Err)
	}
	if s := get(Claimant{}, "c3"); s[0].Code != 0 {
		t.Fatalf("a plain client: %v", s[0].Err)
	}
	// Resources: r and r2 fit, r3 is refused, the request is partly served.
	s = get(a, "c0", "r2", "r3")
	if s[0].Code != 0 || s[1].Code != CodeTooMany || !strings.Contains(s[1].Err, `tenant "A" has clients on 2 resources of this node and the limit is 2 (tenants.max_resources of template "t"); "r3" would be one more`) {
		t.Fatalf("r2, r3: %+v", s)
	}
	if _, ok := l.resources["r3"]; ok {
		t.Fatal("the refused resource was created")
	}
	// A release frees the id's place once its round ends.
	now += int64(time.Millisecond)
	if n := l.ReleaseAs(now, a, "c1", []string{"r"}); n != 1 {
		t.Fatalf("released %d", n)
	}
	settleRound(l, now)
	if s := get(a, "c3"); s[0].Code != 0 {
		t.Fatalf("after a release: %v", s[0].Err)
	}
	// Every record gone: nothing left counted.
	now += int64(time.Hour)
	l.Sweep(now)
	if len(l.tenantRes) != 0 {
		t.Fatalf("counts left after every record went: %v", l.tenantRes)
	}
}

// TestTenantNodeCaps: whatever the templates say, one tenant may have
// clients on at most its share of the node's resources and keep at most
// its share of the node's client records, so it cannot fill the node's
// limits and lock the other tenants out of new resources (seen: one
// tenant filled --max-resources through the default template in 26 s,
// and every other tenant got 429 for any new resource). Plain clients
// and child nodes are not bounded by it.
func TestTenantNodeCaps(t *testing.T) {
	set := tenantSet(100, nil)
	now := int64(1e18)
	l := New(Config{HolderKey: testHolderKey(), Node: "root", ServerID: "root", Term: 1, MaxResources: 100, MaxClients: 1000})
	p, _ := l.Start(now, Prior{Kind: PriorNew})
	l.Commit(now, p, nil)
	get := func(who Claimant, id string, resources ...string) []Slot {
		t.Helper()
		c := &tenantClient{who: who, id: id, wants: 1}
		slots, _ := l.GetAs(now, set, who, c.request(resources...))
		settleRound(l, now)
		return slots
	}
	a := Claimant{Tenant: "A", User: "u"}
	// A tenth of 100 resources each: A fills its share, no more.
	for i := range 10 {
		if s := get(a, "c", fmt.Sprint("r", i)); s[0].Code != 0 {
			t.Fatalf("resource %d: %v", i, s[0].Err)
		}
	}
	s := get(a, "c", "r10")
	if s[0].Code != CodeTooMany || !strings.Contains(s[0].Err, `tenant "A" has clients on 10 resources of this node and the limit per tenant is 10 (--tenant-max-resources)`) {
		t.Fatalf("A's 11th resource: %d %q", s[0].Code, s[0].Err)
	}
	if _, ok := l.resources["r10"]; ok {
		t.Fatal("the refused resource was created")
	}
	if s := get(Claimant{Tenant: "B"}, "c", "r10"); s[0].Code != 0 {
		t.Fatalf("B's first resource: %v", s[0].Err)
	}
	if s := get(Claimant{}, "p", "r11"); s[0].Code != 0 {
		t.Fatalf("a plain client: %v", s[0].Err)
	}
	// A tenth of 1000 client records: 100 ids on one resource.
	for i := range 90 {
		if s := get(a, fmt.Sprint("id", i), "r0"); s[0].Code != 0 {
			t.Fatalf("id %d: %v", i, s[0].Err)
		}
	}
	s = get(a, "one-more", "r0")
	if s[0].Code != CodeTooMany || !strings.Contains(s[0].Err, `tenant "A" has 100 client records on this node and the limit per tenant is 100 (--tenant-max-clients)`) {
		t.Fatalf("A's 101st record: %d %q", s[0].Code, s[0].Err)
	}
	if s := get(Claimant{Tenant: "B"}, "one-more", "r0"); s[0].Code != 0 {
		t.Fatalf("B: %v", s[0].Err)
	}
	if l.Stats().TenantCapped != 2 {
		t.Fatalf("tenant_capped %d, want 2", l.Stats().TenantCapped)
	}
}
