package ledger

import (
	"cmp"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot/allot/status"
)

// MaxViewClaimants bounds the claimants one Detail lists, whatever is
// asked: a page of them is for people, not a dump of the state.
const MaxViewClaimants = status.MaxSnapshotClaimants

// Views of a resource, for operators (the dashboard): the public status
// package defines them, the ledger fills them.
type (
	ResourceView   = status.ResourceView
	ClaimantView   = status.ClaimantView
	ResourceDetail = status.ResourceDetail
	ChildView      = status.ChildView
)

// Resources returns views of at most n resources, the ones with the most
// outstanding first (then by id), and how many resources there are. It
// sorts only what it lists: one pass over the resources.
func (l *Ledger) Resources(now int64, n int) ([]ResourceView, int) {
	type ranked struct {
		r   *resource
		out float64
	}
	best := newTopK(min(max(n, 0), len(l.resources)), func(a, b ranked) bool {
		return cmp.Or(cmp.Compare(b.out, a.out), cmp.Compare(a.r.id, b.r.id)) < 0
	})
	for _, r := range l.resources {
		best.offer(ranked{r, r.bound(now)})
	}
	list := best.sorted()
	out := make([]ResourceView, 0, len(list))
	for _, a := range list {
		out = append(out, a.r.view(now))
	}
	return out, len(l.resources)
}

// Detail describes resource id with at most topN of its claimants
// (bounded by MaxViewClaimants) whose id contains search, ignoring case.
// It reports false if the node keeps no state for the resource.
func (l *Ledger) Detail(now int64, id string, topN int, search string) (ResourceDetail, bool) {
	r := l.resources[id]
	if r == nil {
		return ResourceDetail{}, false
	}
	d := ResourceDetail{ResourceView: r.view(now), SafeCapacity: r.floors.per}
	search = strings.ToLower(search)
	topN = min(max(topN, 0), MaxViewClaimants)
	// Larger lease first, then larger wants, then id.
	best := newTopK(min(topN, int(r.clients.len())), func(a, b int32) bool {
		ca, cb := r.clients.at(a), r.clients.at(b)
		return cmp.Or(cmp.Compare(cb.has, ca.has), cmp.Compare(cb.wants, ca.wants), strings.Compare(ca.id, cb.id)) < 0
	})
	for i := range r.clients.len() {
		if search != "" && !strings.Contains(strings.ToLower(displayID(r.clients.at(i).id)), search) {
			continue
		}
		d.Matching++
		best.offer(int32(i))
	}
	list := best.sorted()
	children := map[string]*ChildView{}
	for i := range r.clients.len() {
		c := r.clients.at(i)
		if !c.node || c.lapsed {
			continue
		}
		name := displayID(c.id)
		cv := children[name]
		if cv == nil {
			if len(children) == MaxViewClaimants {
				continue
			}
			cv = &ChildView{Node: name}
			children[name] = cv
		}
		cv.Has += c.has
		cv.Wants += c.wants
		cv.Clients += c.weight
		cv.Bands++
	}
	for _, cv := range children {
		d.Children = append(d.Children, *cv)
	}
	slices.SortFunc(d.Children, func(a, b ChildView) int { return strings.Compare(a.Node, b.Node) })
	d.Top = make([]ClaimantView, 0, len(list))
	for _, i := range list {
		c := r.clients.at(i)
		d.Top = append(d.Top, ClaimantView{ID: displayID(c.id), Node: c.node, Has: c.has, Wants: c.wants,
			Priority: r.priority(c), Weight: c.weight, Expiry: time.Unix(0, c.expiry).UTC(), Lapsed: c.lapsed})
	}
	return d, true
}

// displayID names a child node's band by the child alone (its priority
// is shown apart).
func displayID(id string) string {
	if strings.HasPrefix(id, tenantSep) {
		return displayTenantKey(id)
	}
	if child, prio, ok := strings.Cut(id, bandSep); ok {
		if _, err := strconv.Atoi(prio); err == nil {
			return child
		}
	}
	return id
}

func (r *resource) view(now int64) ResourceView {
	v := ResourceView{ID: r.id, Template: r.tmpl.Name, Algorithm: r.tmpl.Algorithm.String(),
		Capacity: r.capacity(now), Outstanding: r.bound(now), Claimants: int(r.clients.len()), Learning: r.learning(now), Shadow: r.tmpl.Shadow}
	for i := range r.clients.len() {
		c := r.clients.at(i)
		if c.lapsed || c.expiry <= now && now-c.seen > int64(r.tmpl.LeaseLength) {
			continue // gone quiet: lapsed, or about to be at the next sweep
		}
		// A claimant granted nothing still wants: starvation shows.
		v.Wants += c.wants
		if c.expiry > now {
			v.Granted += c.has
		}
	}
	if v.Learning {
		v.LearningUntil = time.Unix(0, r.learningUntil).UTC()
	}
	if !math.IsInf(r.ceiling, 1) && !r.unlisted && r.shared() {
		c := r.ceiling
		v.Ceiling = &c
		if r.ceilingExpiry > 0 && r.ceilingExpiry != math.MaxInt64 {
			v.CeilingExpiry = time.Unix(0, r.ceilingExpiry).UTC()
		}
	}
	if r.up.child {
		v.LeaseKnown = r.up.known
		if r.up.known {
			v.Lease, v.LeaseExpiry = r.up.cap, time.Unix(0, r.up.expiry).UTC()
		}
	}
	return v
}

// topK keeps the k best of the values offered to it (by before, a strict
// order), in a heap with the worst of them on top: one pass over n values
// costs O(n log k), and only the k kept are sorted.
type topK[T any] struct {
	k      int
	before func(a, b T) bool
	heap   []T
}

func newTopK[T any](k int, before func(a, b T) bool) *topK[T] {
	return &topK[T]{k: k, before: before, heap: make([]T, 0, k)}
}

func (t *topK[T]) offer(v T) {
	h := t.heap
	switch {
	case t.k == 0:
	case len(h) < t.k:
		h = append(h, v)
		for i := len(h) - 1; i > 0 && t.before(h[(i-1)/2], h[i]); i = (i - 1) / 2 {
			h[i], h[(i-1)/2] = h[(i-1)/2], h[i]
		}
		t.heap = h
	case t.before(v, h[0]):
		h[0] = v
		for i := 0; ; {
			w := i
			for _, c := range [2]int{2*i + 1, 2*i + 2} {
				if c < len(h) && t.before(h[w], h[c]) {
					w = c
				}
			}
			if w == i {
				break
			}
			h[i], h[w] = h[w], h[i]
			i = w
		}
	}
}

// sorted returns the values kept, best first.
func (t *topK[T]) sorted() []T {
	slices.SortFunc(t.heap, func(a, b T) int {
		switch {
		case t.before(a, b):
			return -1
		case t.before(b, a):
			return 1
		}
		return 0
	})
	return t.heap
}
