package level

import (
	"fmt"
	"math"

	"github.com/allot/allot/proto/allotpb"
)

// Target returns claim h's share: what alloc.Run (or alloc.ByTenant with
// the tenant level) would set as its Target over the State's claims and
// capacity. The first call after a change finds the levels it needs
// (O(log n + log T + B)); later calls reuse them, O(1).
func (s *State) Target(h Handle) (float64, error) {
	if !s.known(h) {
		return 0, fmt.Errorf("%w: %d", ErrUnknownHandle, h)
	}
	n := s.claims.val(int32(h))
	switch s.kind {
	case allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE:
	case allotpb.Algorithm_STATIC:
		return min(n.a, max(s.capacity, 0)), nil
	default:
		return n.a, nil
	}
	bd := &s.bands[s.slots[h].band]
	if bd.ver != s.ver {
		s.cascade(bd.tenant)
	}
	wants, weight := n.a, n.b
	switch {
	case bd.fits:
		return wants, nil
	case s.kind == allotpb.Algorithm_FAIR_SHARE:
		return min(weight*bd.level, wants), nil
	}
	// alloc's proportionalBand, per claim.
	eq := bd.unit * weight
	if wants <= eq {
		return wants, nil
	}
	extra := 0.0
	if bd.excess > 0 {
		extra = bd.leftover * (wants - eq) / bd.excess
	}
	return min(eq+extra, wants), nil
}

// cascade serves tenant t's bands from the highest priority down, as
// alloc's byBand does: each band gets what the bands above left; the first
// whose wants do not fit is divided by the algorithm and leaves nothing to
// those below. Only that band needs a level search.
func (s *State) cascade(t int32) {
	c := max(s.capacity, 0)
	if s.weigh != nil {
		c = max(s.tenantShare(t), 0)
	}
	for _, b := range s.tenants[t].bands {
		bd := &s.bands[b]
		bd.ver = s.ver
		total, weight := s.claims.sums(bd.root)
		if total <= c {
			bd.fits = true
			c = max(c-total, 0)
			continue
		}
		bd.fits = false
		switch {
		case c == 0:
			// Nothing left: every level is 0, and so is every share.
			bd.level, bd.unit, bd.leftover, bd.excess = 0, 0, 0, 0
		case s.kind == allotpb.Algorithm_FAIR_SHARE:
			bd.level = fairLevel(&s.claims, bd.root, c)
		default:
			bd.unit = c / weight
			leA, leB, gtA, gtB := s.claims.split(bd.root, bd.unit)
			bd.leftover = max(bd.unit*leB-leA, 0)
			bd.excess = gtA - bd.unit*gtB
		}
		c = 0 // max(c-c, 0): a contended band uses all it is given
	}
}

// divideTenants finds the tenants' water level, once per change.
func (s *State) divideTenants() {
	if s.tenantVer == s.ver {
		return
	}
	s.tenantVer = s.ver
	c := max(s.capacity, 0)
	total, _ := s.tenantTree.sums(s.tenantRoot)
	s.tenantFits = total <= c
	if !s.tenantFits {
		s.tenantLevel = fairLevel(&s.tenantTree, s.tenantRoot, c)
	}
}

// tenantShare is tenant t's part of the capacity, as alloc.DivideTenants
// gives it: its wants if all tenants' wants fit, else min(Wants,
// Weight·L) at the tenants' water level L.
func (s *State) tenantShare(t int32) float64 {
	s.divideTenants()
	n := s.tenantTree.val(t)
	if s.tenantFits {
		return n.a
	}
	return min(n.b*s.tenantLevel, n.a)
}

// MaxWithinTenants bounds the tenants Within looks at: past it, Within
// says 0.
const MaxWithinTenants = 64

// Within returns a bound x for the claims of priority band p such that a
// claim of a share algorithm that holds no more than it wants, and at
// most x per unit of its weight, holds no more than its target
// (min(Wants, Weight·x) <= Target); +Inf when every such claim's target
// is its wants, and for the other algorithms. A claim above it may hold
// more than its target: for FAIR_SHARE x is the band's water level (the
// lowest over the tenants whose band does not get all it wants; 0 if one
// gets nothing), so every claim above it in such a band does; for
// PROPORTIONAL_SHARE it is the band's equal share per unit of weight,
// which some claims above it do not exceed. So a caller that tracks
// what claims hold per unit of weight finds those that may have to give
// back. The first call after a change costs O(B + log n) per tenant
// whose claims want more than its share (at most MaxWithinTenants of
// them, else it returns 0).
func (s *State) Within(p int32) float64 {
	if !shared(s.kind) {
		return math.Inf(1)
	}
	if s.weigh == nil {
		return s.within(1, p)
	}
	s.divideTenants()
	if s.tenantFits {
		return math.Inf(1) // every tenant gets what its claims want
	}
	// A tenant that gets its wants serves every band of it in full; the
	// others want more per unit of weight than the level.
	x, seen := math.Inf(1), 0
	s.tenantTree.eachAbove(s.tenantRoot, s.tenantLevel, func(t int32) bool {
		if seen++; seen > MaxWithinTenants {
			x = 0
			return false
		}
		x = min(x, s.within(t, p))
		return x > 0
	})
	return x
}

// within is Within over tenant t's band of priority p.
func (s *State) within(t, p int32) float64 {
	k, found := s.findBand(t, p)
	if !found {
		return math.Inf(1)
	}
	b := s.tenants[t].bands[k]
	if s.bands[b].ver != s.ver {
		s.cascade(t)
	}
	switch bd := &s.bands[b]; {
	case bd.fits:
		return math.Inf(1)
	case s.kind == allotpb.Algorithm_FAIR_SHARE:
		return bd.level
	default:
		return bd.unit
	}
}
