package alloc

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/allot/allot/proto/allotpb"
)

// referenceTenants is the textbook water-filling: repeatedly give every
// unsatisfied tenant its weighted part of what is left, satisfy those
// wanting less, and stop when nobody more is satisfied.
func referenceTenants(capacity float64, t []Tenant) []float64 {
	share := make([]float64, len(t))
	done := make([]bool, len(t))
	left := max(capacity, 0)
	for {
		var weight float64
		for k := range t {
			if !done[k] {
				weight += t[k].Weight
			}
		}
		if weight == 0 {
			return share
		}
		level := left / weight
		progress := false
		for k := range t {
			if !done[k] && t[k].Wants <= t[k].Weight*level {
				share[k], done[k], progress = t[k].Wants, true, true
				left -= t[k].Wants
			}
		}
		if !progress {
			for k := range t {
				if !done[k] {
					share[k] = t[k].Weight * level
				}
			}
			return share
		}
	}
}

// DivideTenants against the reference model over random tenants, and its
// properties on their own: shares sum to at most the capacity (exactly
// it when wants exceed it), no tenant gets more than it wants, and the
// division is max-min fair by weight (a tenant that gets less than it
// wants has at least the weighted share of every other).
func TestDivideTenantsProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 5))
	var s Scratch
	for trial := range 2000 {
		n := 1 + rng.IntN(12)
		ts := make([]Tenant, n)
		var wants float64
		for k := range ts {
			ts[k] = Tenant{Wants: float64(rng.IntN(200)), Weight: []float64{1, 1, 2, 0.5, 3}[rng.IntN(5)]}
			if rng.IntN(4) == 0 {
				ts[k].Wants = rng.Float64() * 1e4
			}
			wants += ts[k].Wants
		}
		capacity := float64(rng.IntN(400))
		DivideTenants(capacity, ts, &s)
		ref := referenceTenants(capacity, ts)
		var sum float64
		for k := range ts {
			sh := ts[k].Share
			sum += sh
			if math.Abs(sh-ref[k]) > 1e-9*max(1, ref[k]) {
				t.Fatalf("trial %d: tenant %d gets %v, the reference %v (%+v, capacity %v)", trial, k, sh, ref[k], ts, capacity)
			}
			if sh < 0 || sh > ts[k].Wants*(1+1e-12) {
				t.Fatalf("trial %d: tenant %d gets %v of %v wanted", trial, k, sh, ts[k].Wants)
			}
			if sh < ts[k].Wants*(1-1e-9) {
				for j := range ts {
					if ts[j].Share/ts[j].Weight > sh/ts[k].Weight*(1+1e-9)+1e-9 {
						t.Fatalf("trial %d: tenant %d is short (%v of %v, weight %v) while %d has more per weight (%v, weight %v)",
							trial, k, sh, ts[k].Wants, ts[k].Weight, j, ts[j].Share, ts[j].Weight)
					}
				}
			}
		}
		if sum > capacity*(1+1e-12) || math.Abs(sum-min(wants, capacity)) > 1e-9*max(1, capacity) {
			t.Fatalf("trial %d: shares sum to %v (capacity %v, wants %v)", trial, sum, capacity, wants)
		}
	}
}

// The Sybil case: a tenant with 1,000 claimants against one with one.
// Without the tenant level the one gets 1/1001; with it, half, and the
// 1,000 share the other half.
func TestByTenantSybil(t *testing.T) {
	d := make([]Demand, 1001)
	tenant := make([]int32, len(d))
	for i := range d {
		d[i] = Demand{Wants: 100, Weight: 1}
	}
	tenant[1000] = 1
	var s Scratch
	FairShare(100, d, &s)
	if got := d[1000].Target; math.Abs(got-100.0/1001) > 1e-9 {
		t.Fatalf("without tenants the lone claimant gets %v", got)
	}
	ts := []Tenant{{Weight: 1}, {Weight: 1}}
	ByTenant(allotpb.Algorithm_FAIR_SHARE, 100, d, tenant, ts, &s)
	var many float64
	for _, dm := range d[:1000] {
		many += dm.Target
	}
	if got := d[1000].Target; math.Abs(got-50) > 1e-9 || math.Abs(many-50) > 1e-9 {
		t.Fatalf("with tenants the lone claimant gets %v, the 1,000 %v", got, many)
	}
	// Weights: 3 to 1 for the lone tenant.
	ts[1].Weight = 3
	ByTenant(allotpb.Algorithm_FAIR_SHARE, 100, d, tenant, ts, &s)
	if got := d[1000].Target; math.Abs(got-75) > 1e-9 {
		t.Fatalf("weight 3 against 1: the lone claimant gets %v, want 75", got)
	}
}

// Within a tenant the algorithm and its priority bands apply to the
// tenant's share, and a tenant that wants less leaves the rest to others;
// targets never sum above the capacity.
func TestByTenantWithinShares(t *testing.T) {
	d := []Demand{
		{Wants: 80, Weight: 1, Priority: 5}, // tenant 0, high band
		{Wants: 80, Weight: 1},              // tenant 0
		{Wants: 10, Weight: 1},              // tenant 1 wants little
		{Wants: 100, Weight: 1},             // tenant 2
		{Wants: 100, Weight: 1},             // tenant 2
	}
	tenant := []int32{0, 0, 1, 2, 2}
	ts := make([]Tenant, 3)
	for k := range ts {
		ts[k].Weight = 1
	}
	for _, kind := range []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE} {
		ByTenant(kind, 100, d, tenant, ts, nil)
		// Tenant 1 takes 10; 0 and 2 get 45 each; within 0 the high band
		// takes all 45, within 2 the two split 22.5 each.
		want := []float64{45, 0, 10, 22.5, 22.5}
		if !near(targets(d), want) {
			t.Fatalf("%v: targets %v, want %v (tenants %+v)", kind, targets(d), want, ts)
		}
	}
}
