package level

import (
	"fmt"

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

// tenantShare is tenant t's part of the capacity, as alloc.DivideTenants
// gives it: its wants if all tenants' wants fit, else min(Wants,
// Weight·L) at the tenants' water level L.
func (s *State) tenantShare(t int32) float64 {
	if s.tenantVer != s.ver {
		s.tenantVer = s.ver
		c := max(s.capacity, 0)
		total, _ := s.tenantTree.sums(s.tenantRoot)
		s.tenantFits = total <= c
		if !s.tenantFits {
			s.tenantLevel = fairLevel(&s.tenantTree, s.tenantRoot, c)
		}
	}
	n := s.tenantTree.val(t)
	if s.tenantFits {
		return n.a
	}
	return min(n.b*s.tenantLevel, n.a)
}
