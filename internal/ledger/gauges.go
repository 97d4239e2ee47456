package ledger

import (
	"cmp"
	"slices"
)

// ResourceGauge is one resource's state for metrics.
type ResourceGauge struct {
	ID string
	// Capacity is what the node divides now (see ResourceStat).
	Capacity float64
	// Outstanding bounds what the claimants hold; Wants sums what they ask.
	Outstanding float64
	Wants       float64
	Claimants   int
	Learning    bool
	// Shadow is set when the resource's leases are shadow (its template's
	// shadow mode): agents do not enforce them.
	Shadow bool
}

// ResourceTotals sums the gauges of several resources.
type ResourceTotals struct {
	// Count is how many resources are summed; Learning and Shadow how
	// many of them are in learning mode and in shadow mode.
	Count, Learning, Shadow      int
	Capacity, Outstanding, Wants float64
	Claimants                    int
}

// Add folds g into the totals.
func (t *ResourceTotals) Add(g ResourceGauge) {
	t.Count++
	if g.Learning {
		t.Learning++
	}
	if g.Shadow {
		t.Shadow++
	}
	t.Capacity += g.Capacity
	t.Outstanding += g.Outstanding
	t.Wants += g.Wants
	t.Claimants += g.Claimants
}

// Gauges returns the n resources with the most outstanding, most first,
// and the totals of all others, so that metrics stay
// bounded however many resources the node keeps. It reads every client
// record: call it at most about once a second.
func (l *Ledger) Gauges(now int64, n int) (top []ResourceGauge, rest ResourceTotals) {
	all := make([]ResourceGauge, 0, len(l.resources))
	for id, r := range l.resources {
		all = append(all, ResourceGauge{ID: id, Capacity: r.capacity(now), Outstanding: r.bound(now),
			Wants: r.demand(), Claimants: int(r.clients.len()), Learning: r.learning(now), Shadow: r.tmpl.Shadow})
	}
	slices.SortFunc(all, func(a, b ResourceGauge) int {
		if c := cmp.Compare(b.Outstanding, a.Outstanding); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if len(all) <= n {
		return all, rest
	}
	for _, g := range all[n:] {
		rest.Add(g)
	}
	return all[:n:n], rest
}
