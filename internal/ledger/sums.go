package ledger

import (
	"math"

	"github.com/allot/allot/internal/alloc/level"
	"github.com/allot/allot/proto/allotpb"
)

// Running sums: what a round needs to know about all of a resource's
// clients (what they may hold, the floors they may run on, the floors of
// lapsed ones, their weights and wants, per priority band) is kept up to
// date on every change instead of summed over every client each round,
// so that a round costs O(k log n) for its k clients rather than O(n).
//
// Every change of a client's fields goes through recount, the one place
// that takes the client's old contribution out of the sums and puts its
// new one in; a client remembers what it contributed (counted). The sums
// are level.Sum, exact whatever was added and taken out before, so a
// running sum always equals a sum over the clients done from scratch
// (tests check that after every round of the randomized trials).
//
// What a client may hold also falls by itself, as its components end: an
// earlier larger lease at heldUntil, its floors at floorEnd and
// floorPrevEnd. Each client is in a heap by the next such time (wake);
// before a sum is read at now, sync recounts the clients whose wake has
// come, so a sum is exact at the now it is read at: never below the
// truth (that would over-grant) and never above it longer than it takes
// to recount what ended. A lease itself is counted until expire lapses
// the record (has, like the full sum before, stays counted until then).
// If now goes back (a wall clock stepped back), the sums are recounted
// from scratch, O(n), since what ended in between may count again.

// counted is what a client record adds to its resource's running sums,
// as last counted (see resource.recount). Its demand (wants, weight,
// band) is counted by the resource's level.State, which keeps a copy.
type counted struct {
	// lease and floor are its lease exposure and floor exposure; its
	// exposure is the larger (exp).
	lease, floor float64
}

// sums are a resource's running sums over its client records; the sums
// of their demand are its level.State's (Wants, Weight, Bands).
type sums struct {
	at     int64     // the time the sums are exact at
	out    level.Sum // Σ exposure: the outstanding bound
	floors level.Sum // Σ floor exposure
	lapsed level.Sum // Σ floor exposure of lapsed records
	// unlisted is Σ floor exposure of the records not listed among the
	// holders (lease exposure 0): what a holder promise leaves out.
	unlisted level.Sum
	onFloor  int // lapsed records with a floor counted
	// leased counts the records whose exposure is above their floor
	// exposure: they hold a lease (at least that many hold one).
	leased int
	// floorEnd is the latest end (the skew included) of a floor counted
	// since the floors outstanding were last 0: a bound on when the
	// floors counted end, exact unless the record with the latest one
	// was lowered or dropped since.
	floorEnd int64
	wake     clientHeap
}

// add adds n's contribution (sign 1) or takes it out (sign -1); lapsed
// says whether its floor counts among the lapsed records'.
func (s *sums) add(n *counted, lapsed bool, sign int) {
	f := float64(sign)
	s.out.Add(f * n.exp())
	s.floors.Add(f * n.floor)
	if n.lease > n.floor {
		s.leased += sign
	}
	if n.lease <= 0 {
		s.unlisted.Add(f * n.floor)
	}
	if lapsed {
		s.lapsed.Add(f * n.floor)
		if n.floor > 0 {
			s.onFloor += sign
		}
	}
}

// count works out client i's contribution at now and adds it. It returns
// the client's wake: the next time its exposure or floor exposure may
// fall by itself (MaxInt64: never), its key in the wake heap.
func (r *resource) count(i int32, now int64) int64 {
	c := r.clients.at(i)
	n := &c.n
	n.lease, n.floor, c.countedLapsed = c.leaseExposure(now), c.floorExposure(now), c.lapsed
	r.sums.add(n, c.countedLapsed, 1)
	if n.floor > 0 {
		r.sums.floorEnd = max(r.sums.floorEnd, c.floorEnd, c.floorPrevEnd)
	}
	return c.nextFall(now)
}

// exp is the exposure counted: what the client may hold at all.
func (n *counted) exp() float64 { return max(n.lease, n.floor) }

// nextFall is the first time after now at which the client's exposure or
// floor exposure may fall with no change of its fields (MaxInt64: none).
func (c *client) nextFall(now int64) int64 {
	next := int64(math.MaxInt64)
	for _, t := range [...]int64{c.heldUntil, c.floorEnd, c.floorPrevEnd} {
		if t > now && t < next {
			next = t
		}
	}
	return next
}

// recount is the one place a change of what client i may hold (its
// lease, earlier lease, floors, lapse) reaches the sums: call it after
// every such change, at the time of the change. Its demand changes
// through setDemand.
func (r *resource) recount(i int32, now int64) {
	r.sync(now)
	if c := r.clients.at(i); !r.sums.wake.has(i) {
		r.sums.wake.push(i, r.count(i, now))
		if c.n.lease > 0 {
			r.hold.list(c, true)
		}
		return
	}
	r.refresh(i, now)
}

// refresh counts client i (counted before) anew at now: only what
// changed is taken out and put back in (the sums are exact either way),
// and the wake heap is fixed only if its time moved earlier, or came.
func (r *resource) refresh(i int32, now int64) {
	c := r.clients.at(i)
	old, oldLapsed, oldWake := c.n, c.countedLapsed, r.sums.wake.keyOf(i)
	lease, floor := c.leaseExposure(now), c.floorExposure(now)
	var wake int64
	if lease != old.lease || floor != old.floor || c.lapsed != oldLapsed {
		r.sums.add(&c.n, oldLapsed, -1)
		wake = r.count(i, now)
	} else {
		wake = c.nextFall(now)
		if floor > 0 {
			r.sums.floorEnd = max(r.sums.floorEnd, c.floorEnd, c.floorPrevEnd)
		}
	}
	// A later wake leaves the key where it was, as the expiry heap does
	// (see resource.expire): sync then refreshes the client early, which
	// finds nothing fallen and moves the key to its time.
	if wake < oldWake || oldWake <= now {
		r.sums.wake.fix(i, wake)
	}
	if (old.lease > 0) != (c.n.lease > 0) {
		r.hold.list(c, c.n.lease > 0)
	}
}

// uncount takes client i out of the sums and the level.State (it is
// being removed).
func (r *resource) uncount(i int32) {
	if h := r.clients.at(i).h; h != 0 {
		_ = r.lv.Remove(h) // known: it was added
		r.clients.at(i).h = 0
	}
	if !r.sums.wake.has(i) {
		return
	}
	if c := r.clients.at(i); c.n.lease > 0 {
		r.hold.list(c, false)
	}
	r.sums.add(&r.clients.at(i).n, r.clients.at(i).countedLapsed, -1)
	r.sums.wake.remove(i)
}

// sync makes the sums exact at now: it recounts the clients whose
// exposure fell since they were counted.
func (r *resource) sync(now int64) {
	if now < r.sums.at {
		r.resync(now)
		return
	}
	h := &r.sums.wake
	for h.len() > 0 && h.key(0) <= now {
		r.refresh(h.top(), now)
	}
	r.sums.at = now
}

// resync recounts every client at now from scratch: O(n), for a clock
// that went back.
func (r *resource) resync(now int64) {
	wake := r.sums.wake
	wake.reset(r.clients.len())
	r.sums = sums{at: now, wake: wake}
	for i := range r.clients.len() {
		r.sums.wake.add(i, r.count(i, now))
	}
	r.sums.wake.init()
	r.relistAll()
}

// outstanding bounds the capacity clients may hold under our leases.
func (r *resource) outstanding(now int64) float64 {
	r.sync(now)
	return r.sums.out.Value()
}

// floorOutstanding sums the floors every client may fall back to.
func (r *resource) floorOutstanding(now int64) float64 {
	r.sync(now)
	return r.sums.floors.Value()
}

// lapsedFloors sums the floors lapsed records may be running on.
func (r *resource) lapsedFloors(now int64) float64 {
	r.sync(now)
	return r.sums.lapsed.Value()
}

// unlistedFloors bounds the floors of the clients a holder promise taken
// now leaves out, the predecessor's unreported ones included (their
// holders are not known; no promise is taken while they count, but the
// bound must not rest on that).
func (r *resource) unlistedFloors(now int64) float64 {
	r.sync(now)
	return max(r.sums.unlisted.Value(), 0) + r.predFloorOutstanding(now)
}

// onFloor counts the lapsed records whose floor still counts.
func (r *resource) onFloor(now int64) int {
	r.sync(now)
	return r.sums.onFloor
}

// weight sums the weights of every client record.
func (r *resource) weight() float64 { return r.lv.Weight() }

// demand sums what the resource's clients want.
func (r *resource) demand() float64 { return r.lv.Wants() }

// bandDemand is the resource's demand per priority band, highest first:
// what it wants and how many clients it stands for.
func (r *resource) bandDemand() []*allotpb.PriorityBandAggregate {
	bands := r.lv.Bands()
	out := make([]*allotpb.PriorityBandAggregate, len(bands))
	for k, b := range bands {
		out[k] = &allotpb.PriorityBandAggregate{Priority: b.Priority, NumClients: b.Clients, Wants: b.Wants}
	}
	return out
}
