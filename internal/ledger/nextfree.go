package ledger

import (
	"math"
	"time"
)

// When a share resource cannot grant a client its target (someone holds
// more than its own, or a shrink is not yet confirmed), the owed client is
// asked back shortly after the first such holder is due back: then it
// gives back what it holds beyond its target. Finding that holder by
// looking at every client made every round with an owed client O(n).
//
// Instead each share resource keeps, per priority band, a ring of time
// buckets covering one refresh interval ahead (dueRing): a client settled
// to come back at due, holding has, marks due's bucket with has/weight,
// or +Inf while it has a shrink to confirm. The State's Within bound says
// which ratio is more than a share in a band: for FAIR_SHARE a client
// holding more than its band's water level per unit of weight holds more
// than its target (if the band gets nothing, any holder in it does). So
// the first bucket after now marked above its band's bound holds, at the
// latest, the first holder due to give back: O(bands · buckets), whatever
// the number of clients.
//
// The answer is never later than a scan's (checkNextFree, after every
// round of the randomized trials): a holder's mark stays in its bucket
// until the ring wraps past it. It may be earlier: by up to one bucket
// (the bucket's start is taken), and for marks that no longer hold (a
// client re-settled since, early, whose old bucket keeps its mark; for
// PROPORTIONAL_SHARE, a client above its band's equal share but within
// its target). Owed clients then come back sooner than needed, a request
// more each, never later than they would have.

// dueBuckets is the number of buckets of a dueRing.
const dueBuckets = 128

// dueRing is a ring of dueBuckets buckets of width ns: bucket e mod
// dueBuckets covers [e·width, (e+1)·width) while epoch says e.
type dueRing struct {
	width int64
	epoch [dueBuckets]int64
	most  [dueBuckets]float64 // the highest mark of the bucket's epoch
}

// newDueRing covers span ahead.
func newDueRing(span time.Duration) *dueRing {
	d := &dueRing{width: max(int64(span)/(dueBuckets-1), int64(time.Millisecond))}
	for k := range d.epoch {
		d.epoch[k] = -1
	}
	return d
}

// mark is what client c's latest settle at now says of it: +Inf while a
// shrink it has yet to confirm counts, else what it holds per unit of
// weight; 0 for nothing to give back.
func (c *client) mark(now int64) float64 {
	switch {
	case c.heldUntil > now && c.held > c.has:
		return math.Inf(1)
	case c.has > 0:
		return c.has / c.weight
	}
	return 0
}

// note records client c, just settled at now.
func (d *dueRing) note(c *client, now int64) {
	if c.due <= now {
		return
	}
	x := c.mark(now)
	if x <= 0 {
		return
	}
	// A due beyond the ring (a longer refresh interval since the ring
	// was made) goes in its last bucket: earlier, never later.
	e := min(c.due/d.width, now/d.width+dueBuckets-1)
	k := e % dueBuckets
	if d.epoch[k] != e {
		d.epoch[k], d.most[k] = e, x
		return
	}
	d.most[k] = max(d.most[k], x)
}

// first returns the start of the first bucket from now's on marked above
// within, or with a shrink to confirm (now+1 for now's own), or 0 if
// there is none.
func (d *dueRing) first(now int64, within float64) int64 {
	e0 := now / d.width
	for e := e0; e < e0+dueBuckets; e++ {
		// +Inf, a shrink to confirm, is above anything.
		if k := e % dueBuckets; d.epoch[k] == e && (d.most[k] > within || math.IsInf(d.most[k], 1)) {
			return max(e*d.width, now+1)
		}
	}
	return 0
}

// dues are a resource's rings, by priority band; nil until nextFree is
// first needed.
type dues map[int32]*dueRing

// note records client c, just settled at now, in its band's ring.
func (r *resource) note(c *client, now int64) {
	if r.dues == nil {
		return
	}
	prio := r.priority(c)
	d := r.dues[prio]
	if d == nil {
		// No client of the band was there when the rings were filled:
		// every one since is noted when settled.
		d = newDueRing(r.tmpl.RefreshInterval)
		r.dues[prio] = d
	}
	d.note(c, now)
}

// nextFree returns when, at the earliest, a client holding more than its
// target or a shrink it has yet to confirm is due back (0 if none is
// known to be).
func (r *resource) nextFree(now int64) int64 {
	if r.dues == nil {
		// The first time: rings over a refresh interval, filled from
		// every client once; settle keeps them from then on.
		r.dues = make(dues)
		for i := range r.clients.len() {
			r.note(r.clients.at(i), now)
		}
	}
	next := int64(0)
	for p, d := range r.dues {
		if t := d.first(now, r.lv.Within(p)); t > 0 && (next == 0 || t < next) {
			next = t
		}
	}
	return next
}
