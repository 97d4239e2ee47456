package ledger

import (
	"cmp"
	"slices"

	"github.com/allot/allot/status"
)

// Gauges of resources, for metrics: the public status package defines
// them, the ledger fills them.
type (
	ResourceGauge  = status.ResourceGauge
	ResourceTotals = status.ResourceTotals
)

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
