package level

import (
	"fmt"
	"math"
)

// Holding is what one claimant may hold under the resource's leases: the
// fields of the coordinator's client record that bound its exposure.
type Holding struct {
	// Has is the lease the claimant holds now.
	Has float64
	// Safe and SafePrev are safe capacities it was told and may run on
	// once its lease ends.
	Safe, SafePrev float64
	// Held, until HeldUntil (unix ns), bounds an earlier lease it may
	// still hold (a shrink it has not confirmed).
	Held      float64
	HeldUntil int64
}

// Exposure is the most the claimant may hold at now: the largest of Has,
// Safe and SafePrev, or Held while HeldUntil is after now and Held is
// larger.
func (x Holding) Exposure(now int64) float64 {
	e := max(x.Has, x.Safe, x.SafePrev)
	if x.HeldUntil > now && x.Held > e {
		e = x.Held
	}
	return e
}

// holdings keeps Σ Has and the outstanding bound Σ Exposure(now) for any
// now: Exposure(now) is base = max(Has, Safe, SafePrev) plus, while
// HeldUntil > now, Held − base when positive; so the bound is Σ base plus
// the sum of those extras over the claims whose HeldUntil is after now, a
// suffix sum of a tree ordered by HeldUntil. Time may go back and forth:
// nothing is dropped when a HeldUntil passes.
type holdings struct {
	held      btree[int64] // an entry per handle: key HeldUntil, a Held − base; only while positive
	heldRoot  int32
	hold      []hold // by handle
	has, base Sum
}

type hold struct {
	has, base float64
	listed    bool // in the held tree
}

func (hs *holdings) grow(size int) {
	hs.held.grow(size)
	if len(hs.hold) < size {
		hs.hold = append(hs.hold, make([]hold, size-len(hs.hold))...)
	}
}

// SetHolding records what claim h may hold now (replacing what was
// recorded before; a new claim holds nothing). O(log n).
func (s *State) SetHolding(h Handle, x Holding) error {
	if !s.known(h) {
		return fmt.Errorf("%w: %d", ErrUnknownHandle, h)
	}
	for _, v := range [...]struct {
		name string
		v    float64
	}{{"has", x.Has}, {"safe", x.Safe}, {"safe_prev", x.SafePrev}, {"held", x.Held}} {
		if math.IsNaN(v.v) || math.IsInf(v.v, 0) || v.v < 0 {
			return fmt.Errorf("%w: %s %v is not a finite number >= 0", ErrInvalid, v.name, v.v)
		}
	}
	s.setHolding(h, x)
	return nil
}

func (hs *holdings) setHolding(h Handle, x Holding) {
	o := &hs.hold[h]
	if o.listed {
		hs.heldRoot = hs.held.remove(hs.heldRoot, int32(h))
	}
	hs.has.Add(-o.has)
	hs.base.Add(-o.base)
	base := max(x.Has, x.Safe, x.SafePrev)
	*o = hold{has: x.Has, base: base, listed: x.Held > base}
	hs.has.Add(x.Has)
	hs.base.Add(base)
	if o.listed {
		hs.held.set(int32(h), x.HeldUntil, x.Held-base, 0)
		hs.heldRoot = hs.held.insert(hs.heldRoot, int32(h))
	}
}

// Has returns Σ Has over the claims.
func (s *State) Has() float64 { return s.has.Value() }

// Outstanding returns Σ Exposure(now) over the claims: the bound on what
// they may hold under the resource's leases at now. O(log n).
func (s *State) Outstanding(now int64) float64 {
	return s.base.Value() + s.held.sumAbove(s.heldRoot, now)
}

// Free returns what may be granted at now beyond what is outstanding:
// min(capacity, ceiling) − Outstanding(now) − pred, where ceiling is the
// published bound on the outstanding total (+Inf for none) and pred
// bounds a predecessor's leases not yet accounted for while learning (0
// otherwise). It may be negative.
func (s *State) Free(now int64, ceiling, pred float64) float64 {
	return min(s.capacity, ceiling) - s.Outstanding(now) - pred
}
