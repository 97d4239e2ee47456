package level

import (
	"cmp"
	"math"
	"slices"
)

// BandSum sums one priority band's claims over all tenants.
type BandSum struct {
	Priority int32
	// Claims counts the band's claims.
	Claims int
	// Wants and Weight sum the claims' wants and weights.
	Wants, Weight float64
	// Clients sums max(round(Weight), 1) over the claims: the clients
	// the band stands for.
	Clients int64
}

// sums are the running sums of the claims, in all and per priority band.
type sums struct {
	wants, weight Sum
	byPrio        map[int32]*bandTotals
}

type bandTotals struct {
	n             int
	wants, weight Sum
	clients       int64
}

// clientsOf is how many clients a claim of weight w stands for.
func clientsOf(w float64) int64 {
	return max(int64(math.Round(min(w, 1<<62))), 1)
}

// add adds a claim of priority p to the sums (sign -1 takes it out, with
// wants and weight negated).
func (u *sums) add(p int32, wants, weight float64, sign int) {
	u.wants.Add(wants)
	u.weight.Add(weight)
	t := u.byPrio[p]
	if t == nil {
		t = &bandTotals{}
		u.byPrio[p] = t
	}
	if t.n += sign; t.n == 0 {
		delete(u.byPrio, p) // an empty band is not listed
		return
	}
	t.wants.Add(wants)
	t.weight.Add(weight)
	t.clients += int64(sign) * clientsOf(math.Abs(weight))
}

// change moves a claim of priority p that stays in its band from wants
// w0 and weight v0 to w1 and v1. A value that did not change is not
// added and taken out again: the sums are exact, so their values are the
// same either way.
func (u *sums) change(p int32, w0, w1, v0, v1 float64) {
	t := u.byPrio[p]
	if w1 != w0 {
		u.wants.Add(-w0)
		u.wants.Add(w1)
		t.wants.Add(-w0)
		t.wants.Add(w1)
	}
	if v1 != v0 {
		u.weight.Add(-v0)
		u.weight.Add(v1)
		t.weight.Add(-v0)
		t.weight.Add(v1)
		t.clients += clientsOf(v1) - clientsOf(v0)
	}
}

// Wants returns Σ Wants over the claims.
func (s *State) Wants() float64 { return s.wants.Value() }

// Weight returns Σ Weight over the claims.
func (s *State) Weight() float64 { return s.weight.Value() }

// Bands returns the sums of each priority band that has claims, highest
// priority first. O(B log B) for B bands.
func (s *State) Bands() []BandSum {
	out := make([]BandSum, 0, len(s.byPrio))
	for p, t := range s.byPrio {
		out = append(out, BandSum{Priority: p, Claims: t.n, Wants: t.wants.Value(), Weight: t.weight.Value(), Clients: t.clients})
	}
	slices.SortFunc(out, func(a, b BandSum) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}
