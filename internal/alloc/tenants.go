package alloc

import (
	"slices"

	"github.com/allot/allot/proto/allotpb"
)

// Tenant is one tenant's claim in the division of a resource's capacity
// between tenants (see DivideTenants and ByTenant).
type Tenant struct {
	// Wants is what the tenant's claimants want in all; finite and >= 0.
	Wants float64
	// Weight is the tenant's weight; > 0. Shares are per unit of weight.
	Weight float64
	// Share is the output: the tenant's part of the capacity,
	// 0 <= Share <= Wants.
	Share float64
}

// DivideTenants sets each tenant's Share by weighted max-min fairness:
// when the tenants' wants fit, each gets what it wants; otherwise there is
// a level L such that each tenant gets min(Wants, Weight*L) and the shares
// sum to capacity. So no tenant gets more than it wants, what one leaves
// goes to the others, and among tenants that want more than they get,
// shares are in proportion to weights. Priorities play no part between
// tenants: a tenant's claimants cannot raise its share by asking for a
// higher band. O(n) expected.
func DivideTenants(capacity float64, t []Tenant, s *Scratch) {
	if s == nil {
		s = new(Scratch)
	}
	s.tenants = slices.Grow(s.tenants[:0], len(t))[:len(t)]
	for k := range t {
		s.tenants[k] = Demand{Wants: t[k].Wants, Weight: t[k].Weight}
	}
	byBand(capacity, s.tenants, s, fairBand)
	for k := range t {
		t[k].Share = s.tenants[k].Target
	}
}

// ByTenant runs the algorithm kind over d with a fairness level between
// tenants first: claimant i belongs to tenant tenant[i], an index into t,
// whose Weight the caller sets. The capacity is divided between the
// tenants by DivideTenants over what their claimants want (t's Wants and
// Share are filled in), then each tenant's share among its claimants by
// kind, priority bands included, as Run would. So the targets of one
// tenant's claimants sum to at most its share, however many they are.
func ByTenant(kind allotpb.Algorithm_Kind, capacity float64, d []Demand, tenant []int32, t []Tenant, s *Scratch) {
	if s == nil {
		s = new(Scratch)
	}
	for k := range t {
		t[k].Wants = 0
	}
	for i := range d {
		t[tenant[i]].Wants += d[i].Wants
	}
	DivideTenants(capacity, t, s)
	// Group the claimants by tenant (a counting sort), run the algorithm
	// over each group's copy, and copy the targets back.
	s.start = slices.Grow(s.start[:0], len(t)+1)[:len(t)+1]
	clear(s.start)
	for i := range d {
		s.start[tenant[i]+1]++
	}
	for k := 1; k < len(s.start); k++ {
		s.start[k] += s.start[k-1]
	}
	s.member = slices.Grow(s.member[:0], len(d))[:len(d)]
	s.group = slices.Grow(s.group[:0], len(d))[:len(d)]
	s.next = append(s.next[:0], s.start[:len(t)]...)
	for i := range d {
		k := tenant[i]
		s.member[s.next[k]] = int32(i)
		s.group[s.next[k]] = d[i]
		s.next[k]++
	}
	for k := range t {
		part := s.group[s.start[k]:s.start[k+1]]
		Run(kind, t[k].Share, part, s)
		for j, i := range s.member[s.start[k]:s.start[k+1]] {
			d[i].Target = part[j].Target
		}
	}
}
