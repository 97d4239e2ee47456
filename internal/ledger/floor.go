package ledger

import (
	"math"
	"strings"
	"time"
)

// Floors: what a claimant cut off from the coordinator may use.
//
// Every lease comes with a floor (the safe capacity of the reply) and the
// time the floor ends. A claimant uses its lease until the lease ends;
// if no coordinator has answered by then it falls to its floor until the
// floor ends, then to nothing. Both ends are absolute times on the
// grantor's clock; the grantor counts each as held until that time plus
// the configured clock skew, so whatever the holder's clock, the grantor
// counts a grant for as long as it may be used. Nothing is ever used that
// nobody counts, however long a cut lasts.
//
// The floor is the template's policy (config.FloorPolicy): an absolute
// figure, or a fraction of the fair share (the capacity over the weight
// of every client record), per unit of weight, never above the
// claimant's new lease. Floors are granted out of what is left for them:
// on a root the capacity, on a child node the floor its parent told it
// (after its lease it has nothing else), less every floor still counted
// and, after a takeover, what the predecessor's floors may still hold.
// So the floors of a node never sum to more than the node may itself fall
// back to, at every level of the tree. A floor ends no later than the
// node's own floor, the recorded horizon and the recorded floor expiry,
// so a successor knows of it (record.go).
//
// Lowering a floor (the claimant's share shrank) counts the larger one
// until the claimant's next request reports what it holds, as for leases.
// A claimant that vanished without releasing keeps its floor reserved
// until the floor ends: that is what a cut-off claimant looks like too.

// floorHeadroom is how far above the floors outstanding, as a fraction of
// the floor capacity, a raised floor ceiling is set. It is small: after
// a takeover the successor holds back the recorded floor ceiling, less
// the floors clients report, until the floor expiry, which may be
// minutes away.
const floorHeadroom = 0.02

// floorState is a resource's side of floors.
type floorState struct {
	// per is the floor per unit of weight of the current round; -1
	// unlimited (the template opts out of floors).
	per float64
	// reserved is what beginFloors found claimants outside the round (and
	// the predecessor) may run on.
	reserved float64
	// ceiling bounds out in the record, until ceilingExpiry, when every
	// floor ends (write-ahead; see record.go). Unbounded for a resource
	// the record cannot list.
	ceiling       float64
	ceilingExpiry int64
	// The predecessor's floors (after a takeover): pred bounds their sum
	// until predEnd (their recorded end plus the clock skew); credited is
	// what clients have since reported holding of them, seen who did.
	pred     float64
	predEnd  int64
	credited float64
	seen     map[string]struct{}
	// sink receives what operators are told (see Ledger.Events).
	sink *eventSink
}

// eventSink collects events for the caller and counts them.
type eventSink struct {
	list      []Event
	unheard   uint64
	forgotten uint64
}

// Event kinds.
const (
	// EventUnheard: a claimant's lease ended unrefreshed while it has a
	// floor: it runs on its floor now, if it is alive.
	EventUnheard = "unheard"
	// EventForgotten: a child node's record ended: its floor is no longer
	// counted (it ended, or the child released).
	EventForgotten = "forgotten"
)

// Event is something about a claimant that operators should see: the
// coordinator logs each and counts them.
type Event struct {
	Kind     string
	Resource string
	// Claimant is the client id, or the child node's name for a band.
	Claimant string
	Node     bool
	// Floor is what the claimant may run on, until FloorUntil (unix ns).
	Floor      float64
	FloorUntil int64
}

// maxEvents bounds the events kept between two drains: a burst of
// lapsing clients must not grow memory.
const maxEvents = 1024

// event records kind for client c of resource rid. Clients are counted,
// not listed, unless they are child nodes: those are few and an operator
// wants each.
func (f *floorState) event(now int64, rid string, c *client, kind string) {
	if f.sink == nil {
		return
	}
	switch kind {
	case EventUnheard:
		f.sink.unheard++
	case EventForgotten:
		f.sink.forgotten++
	}
	if !c.node || len(f.sink.list) >= maxEvents {
		return
	}
	child, _, _ := strings.Cut(c.id, bandSep)
	f.sink.list = append(f.sink.list, Event{Kind: kind, Resource: rid, Claimant: child, Node: true,
		Floor: c.floorExposure(now), FloorUntil: max(c.floorEnd, c.floorPrevEnd)})
}

// floorPer is the floor per unit of weight at now: the template's
// absolute figure, or its share of the capacity the node divides per
// unit of weight of every client record; -1 when the template sets no
// floor (unlimited).
func (r *resource) floorPer(now int64) float64 {
	return r.policyFloor(now, r.weight())
}

// policyFloor is floorPer for a total client weight w.
func (r *resource) policyFloor(now int64, w float64) float64 {
	f := r.tmpl.Floor
	switch {
	case f.Unlimited:
		return -1
	case f.HasAbsolute:
		return f.Absolute
	}
	// The fair share of what the node divides now, so that a client
	// gets the same floor whatever level it talks to; floors then fit in
	// the node's own floor by the gate (grantFloor), not by shrinking at
	// every level.
	return f.Share * r.capacity(now) / max(w, 1)
}

// floorCap is what the resource's floors must fit in at now: the
// template's capacity on a root; on a child the floor its parent told it
// while that lasts (it is all the child has once its lease ends), else
// nothing.
func (r *resource) floorCap(now int64) float64 {
	if !r.up.child {
		return r.tmpl.Capacity
	}
	if !r.up.known || now >= r.up.safeUntil {
		return 0
	}
	return max(min(r.up.safe, r.tmpl.Capacity), 0)
}

// floorUntil bounds when a floor granted at now may end: the template's
// floor lease, the horizon, the recorded floor expiry, and on a child its
// own floor's end.
func (r *resource) floorUntil(now, horizon int64) int64 {
	end := min(now+int64(r.tmpl.Floor.Lease), horizon)
	if r.shared() {
		end = min(end, r.floors.ceilingExpiry)
	}
	if r.up.child {
		end = min(end, r.up.safeUntil)
	}
	return end
}

// predFloorOutstanding bounds what the predecessor's floors that no
// client has reported may still hold at now.
//
// Two bounds hold: the recorded floor ceiling less the floors reported,
// and the recorded ceiling less the leases reported while learning. The
// ceiling bounded every lease and floor at the takeover, and what a
// claimant may hold only falls as its lease ends, so it still bounds the
// floors of the claimants not heard from; the floor ceiling may be the
// larger one (they are lowered apart).
func (r *resource) predFloorOutstanding(now int64) float64 {
	if now >= r.floors.predEnd {
		return 0
	}
	rem := max(r.floors.pred-r.floors.credited, 0)
	if r.predBounded {
		rem = min(rem, max(r.predCeiling-r.credited, 0))
	}
	return rem
}

// floorBound bounds the floors outstanding at now, the predecessor's
// included: what the record's floor ceiling must cover.
func (r *resource) floorBound(now int64) float64 {
	return r.floorOutstanding(now) + r.predFloorOutstanding(now)
}

// beginFloors prepares the round's floors from the running sums and the
// round's clients: the floor per unit of weight, and what the claimants
// that did not ask in this round may be running on without a lease
// (their floors), to which it adds what the predecessor's floors may
// still hold once learning is over: the algorithm divides the capacity
// less that (reserved) among the claimants.
func (r *resource) beginFloors(now int64) {
	reserved := r.lapsedFloors(now)
	for _, i := range r.batch {
		if c := r.clients.at(i); c.lapsed {
			reserved -= c.n.floor // asked in this round: not reserved
		}
	}
	// Never below 0, whatever the rounding of the difference.
	reserved = max(reserved, 0)
	if !r.learning(now) {
		reserved += r.predFloorOutstanding(now)
	}
	r.floors.per = r.policyFloor(now, r.weight())
	r.floors.reserved = reserved
}

// grantFloor tells client i its floor with the lease just settled: the
// policy's, never above the lease, within what is left for floors and
// ending by floorUntil.
func (r *resource) grantFloor(i int32, p *roundParams) {
	c := r.clients.at(i)
	if r.floors.per < 0 {
		// Unlimited: nothing to count (the reply says -1).
		c.floor, c.floorEnd = 0, 0
		return
	}
	f := max(min(r.floors.per*c.weight, c.has), 0)
	end := r.floorUntil(p.now, p.horizon)
	before := c.floorExposure(p.now)
	if r.shared() {
		room := min(r.floorCap(p.now), r.floors.ceiling) - r.floorOutstanding(p.now) - r.predFloorOutstanding(p.now)
		f = min(f, max(room+before, 0))
	}
	if end <= p.now {
		f = 0
	}
	if f < c.floor && c.floorEnd > p.now {
		// A lower floor: the higher one counts until the client confirms
		// it (its next request reports what it holds).
		if c.floorPrevEnd <= p.now || c.floorPrev < c.floor {
			c.floorPrev = c.floor
		}
		c.floorPrevEnd = max(c.floorPrevEnd, c.floorEnd)
	}
	c.floor, c.floorEnd = f, end+r.skew
	if f == 0 {
		c.floorEnd = 0
	}
}

// toldFloor is the floor a reply tells client c: its capacity (-1
// unlimited) and when it ends (unix ns; 0 none).
func (r *resource) toldFloor(c *client) (float64, int64) {
	if r.tmpl.Floor.Unlimited {
		return -1, 0
	}
	if c.floorEnd == 0 {
		return 0, 0
	}
	return c.floor, c.floorEnd - r.skew
}

// creditFloor is the first contact of client i after a takeover: a floor
// it reports that the predecessor may have told it is counted as its own
// from now on, and taken off the predecessor's remainder (never more than
// that remainder: a lying client can lock out no more than it).
func (r *resource) creditFloor(i int32, now int64) {
	if r.predFloorOutstanding(now) <= 0 {
		return
	}
	c := r.clients.at(i)
	if r.floors.seen == nil {
		r.floors.seen = make(map[string]struct{})
	}
	if _, ok := r.floors.seen[c.id]; ok {
		return
	}
	r.floors.seen[c.id] = struct{}{}
	rep := r.report(i)
	if rep.floor <= 0 || !r.predHolder(c.id) {
		return
	}
	if rep.floorEnd-r.skew <= r.learnStart {
		// It may have ended before the takeover, so the predecessor's
		// floors may not cover it: not credited from them. But told to
		// end within the skew of now it may still be in use: counted as
		// the client's own until then, beside the predecessor's, so that
		// hearing every promised holder leaves no floor uncounted.
		if end := rep.floorEnd + r.skew; end > now {
			f := min(rep.floor, r.predFloorOutstanding(now))
			if c.floorPrevEnd <= now || c.floorPrev < f {
				c.floorPrev = f
			}
			c.floorPrevEnd = max(c.floorPrevEnd, end)
			r.recount(i, now)
		}
		return
	}
	cr := min(rep.floor, r.predFloorOutstanding(now))
	r.floors.credited += cr
	end := min(rep.floorEnd+r.skew, r.floors.predEnd)
	if c.floorPrevEnd <= now || c.floorPrev < cr {
		c.floorPrev = cr
	}
	c.floorPrevEnd = max(c.floorPrevEnd, end)
	r.recount(i, now)
}

// latestFloorEnd bounds when the last floor counted ends (unix ns, as
// told: without the clock skew): never before it, and later only if the
// record that had the latest one has been lowered or dropped since (see
// sums.floorEnd), which costs a parent no more than counting the
// subtree's floors a while longer.
func (r *resource) latestFloorEnd(now int64) int64 {
	end := now
	if r.floorOutstanding(now) > 0 {
		// A bound, never early: a later end only makes a parent count
		// the floors longer.
		end = max(end, r.sums.floorEnd-r.skew)
	} else {
		r.sums.floorEnd = 0 // no floor counted: start the bound afresh
	}
	if r.predFloorOutstanding(now) > 0 {
		end = max(end, r.floors.predEnd-r.skew)
	}
	return end
}

// noFloorEnd is a parent's floor end when it sets none (an older parent):
// the floor then lasts as long as the child cannot reach it.
const noFloorEnd = math.MaxInt64

// floorLeaseOf is the longest floor lease of the round's resources.
func floorLeaseOf(r *resource) time.Duration {
	if r.tmpl.Floor.Unlimited {
		return 0
	}
	return r.tmpl.Floor.Lease
}
