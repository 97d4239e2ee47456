package ledger

import (
	"math"
	"time"

	"github.com/allot/allot/internal/alloc/level"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// client is the coordinator's record of one client's lease on a resource.
type client struct {
	id string
	// wants and weight are its demand: what it asks for and how many
	// clients it stands for (1 but for a child node's band). h names it
	// in the resource's level.State, which divides the capacity and keeps
	// its priority band (see levels.go).
	wants, weight float64
	h             level.Handle
	// since is the first snapshot of its unbroken run of holder promises
	// (holders.go); 4 bytes, beside h, so that it costs no memory.
	since  uint32
	has    float64 // capacity of the lease the client holds from us
	expiry int64   // unix ns; the lease ends here
	due    int64   // unix ns; when the client is expected back
	// seen is when the client last asked (unix ns). A record outlives its
	// lease (lapsed) until its floors end, and at least until seen + the
	// lease length, so that the fair share floors are cut from counts the
	// clients that may come back (see expire).
	seen int64
	// held, until heldUntil (unix ns, the clock skew included), bounds an
	// earlier lease the client may still hold: a reply that shrank its
	// lease may never have reached it (a time-out, a lost reply, a leader
	// that went silent), and leases replace each other only when
	// received. The client's next request says what it holds and settles
	// it. See exposure.
	held      float64
	heldUntil int64
	// floor is the safe capacity last told (see floor.go), counted as
	// held until floorEnd: the end told plus the clock skew. floorPrev,
	// until floorPrevEnd, is an earlier larger one the client may still
	// hold (a reply that lowered it may not have reached it), or what its
	// last request reported holding.
	floor, floorPrev       float64
	floorEnd, floorPrevEnd int64
	// n is what the record adds to the resource's running sums (sums.go).
	// Its positions in the expiry and wake heaps are the heaps'.
	n counted
	// slot is its position in the round's batch plus one (0: it did not
	// ask in this round); what its request reported is there too.
	slot   int32
	lapsed bool
	// countedLapsed: its floor is counted among the lapsed records' (n).
	countedLapsed bool
	released      bool // released after it was requested in the current round
	// node: the record is a band of a child node (see ServerGet).
	node bool
}

// touched reports whether the client asked in the current round.
func (c *client) touched() bool { return c.slot > 0 }

// tenant is the client's tenant ("" plain, and a child node's band; see
// tenants.go): a tenant's clients are keyed by it (Claimant.key).
func (c *client) tenant() string {
	t, _, _ := splitKey(c.id)
	return t
}

// resource holds the state of one resource. It is owned by the round loop.
type resource struct {
	id            string
	tmpl          *config.Template
	gen           uint64  // config generation tmpl was matched in
	learningUntil int64   // unix ns; until then grants echo what clients report
	index         idIndex // client indices by id
	clients       clientPages
	heap          clientHeap // client indices ordered by expiry
	// lv divides the capacity among the clients (levels.go).
	lv *level.State
	// sums are the running sums over the clients (sums.go).
	sums  sums
	batch []int32 // clients requesting in the current round
	// reports are what the requests of the batch said their clients hold
	// (learning mode echoes it), in batch order.
	reports     []holding
	releasedIDs []string
	inBatch     bool
	// up is the capacity a parent node leased this node (child nodes
	// only; see Ledger.SetUpstream).
	up upstream
	// pace is the regular refresh interval of the last allocation: what
	// a child node is told to pace its own claimants from (Lease.Pace).
	pace time.Duration
	// waitSince is when the resource began waiting for a record write
	// (unix ns; 0 not waiting): its batch is allocated after the write.
	waitSince int64
	// round is the last round that asked for the resource (see
	// Ledger.Defer).
	round uint64
	// early: in Ledger.early, or (while a record is built) in its
	// pending raises.
	early bool
	// floors is the state of the resource's floors (floor.go).
	floors floorState
	// dues say when clients that may give capacity back are due
	// (nextfree.go).
	dues dues

	// Write-ahead summary (see summary.go). ceiling is the published upper
	// bound on this resource's outstanding capacity that this coordinator
	// keeps to; ceilingExpiry bounds the expiry of its leases. A standalone
	// resource has neither bound (+Inf, MaxInt64).
	ceiling       float64
	ceilingExpiry int64
	published     bool // listed in the last record written
	// unlisted: no room in the record, so never listed; the record says
	// it is incomplete instead (see Ledger.resourceFor).
	unlisted bool

	// Learning with a predecessor's summary (see learn): predCeiling
	// bounds the predecessor's outstanding leases at learnStart, credited
	// is how much of it clients have reported holding on first contact,
	// predExpiry is the predecessor's latest expiry for the resource.
	predCeiling float64
	credited    float64
	// predBounded: predCeiling is the predecessor's recorded ceiling,
	// which also bounds its floors once learning is over (floorState).
	predBounded bool
	learnStart  int64
	predExpiry  int64
	// skew is Config.ClockSkew in ns: what is told to end at t is counted
	// until t + skew, and a predecessor's times are trusted with it.
	skew        int64
	learnedSeen map[string]struct{}
	// hold is the resource's holder promise (see holders.go).
	hold holders
	// tenants counts the tenants' records (see tenants.go).
	tenants tenantCounts
}

func newResource(id string, tmpl *config.Template, gen uint64) *resource {
	r := &resource{id: id, tmpl: tmpl, gen: gen,
		ceiling: math.Inf(1), ceilingExpiry: math.MaxInt64, tenants: tenantCounts{resources: make(map[string]int), records: make(map[string]int)}}
	r.buildLevel()
	return r
}

// shared reports whether the resource's algorithm divides a global
// capacity (so that summaries and over-grant apply).
func (r *resource) shared() bool { return sharedKind(r.tmpl.Algorithm) }

// predOutstanding bounds the capacity still held under a predecessor's
// leases by clients that have not yet been seen in learning mode, and
// once learning is over, what its floors may still hold.
func (r *resource) predOutstanding(now int64) float64 {
	if !r.learning(now) {
		return r.predFloorOutstanding(now)
	}
	return max(r.predCeiling-r.credited, 0)
}

// bound is the upper bound on the resource's outstanding capacity that
// the published ceiling must cover: own leases plus the predecessor's
// unaccounted remainder while learning.
func (r *resource) bound(now int64) float64 { return r.outstanding(now) + r.predOutstanding(now) }

func (r *resource) learning(now int64) bool { return now < r.learningUntil }

// lookup returns client id's index; r may be nil.
func (r *resource) lookup(id string) (int32, bool) {
	if r == nil {
		return 0, false
	}
	return r.index.find(&r.clients, id)
}

// lookupAt is lookup for a record that was at index hint when last looked
// up (or -1): a record stays put unless one is removed, so the hint is
// usually right, and checking it saves hashing the id.
func (r *resource) lookupAt(hint int32, id string) (int32, bool) {
	if hint >= 0 && hint < r.clients.len() && r.clients.at(hint).id == id {
		return hint, true
	}
	return r.lookup(id)
}

// upsert records a client's request and marks it for this round.
func (r *resource) upsert(id string, wants, weight float64, priority int32, rep holding, now int64) int32 {
	return r.upsertAt(-1, id, wants, weight, priority, rep, now)
}

// upsertAt is upsert for a record last looked up at hint (see lookupAt).
func (r *resource) upsertAt(hint int32, id string, wants, weight float64, priority int32, rep holding, now int64) int32 {
	i, ok := r.lookupAt(hint, id)
	if !ok {
		i = r.clients.push(client{id: id, expiry: now, seen: now})
		r.index.add(&r.clients, i)
		r.track(r.clients.at(i).tenant())
		r.heap.grow()
		r.sums.wake.grow() // it enters the wake heap when counted
		// expiry is "now" until a grant sets it.
		r.heap.push(i, now)
	}
	wants, weight = demandOf(wants, weight)
	r.setDemand(i, wants, weight, priority)
	c := r.clients.at(i)
	// The client says what it holds now: never more than we may have
	// given it (a lie cannot lock others out), and never for longer;
	// whatever it does not report it has replaced or let go. The latest
	// lease and floor told still count: a reply may be on its way. What
	// it reports counts until its end plus the skew, like what we tell:
	// its clock may lag ours, so it may still use what ended on ours.
	held := 0.0
	if rep.expiry+r.skew > now {
		held = max(rep.capacity, 0)
	}
	c.held = min(held, max(c.has, c.held))
	c.heldUntil = min(rep.expiry+r.skew, max(c.expiry+r.skew, c.heldUntil))
	floor := 0.0
	if rep.floorEnd+r.skew > now {
		floor = max(rep.floor, 0)
	}
	c.floorPrev = min(floor, c.floorExposure(now))
	c.floorPrevEnd = min(rep.floorEnd+r.skew, max(c.floorEnd, c.floorPrevEnd))
	if rep.node {
		// A child node is trusted with what its subtree holds (unlike a
		// client, whose report is capped by what it was given): its
		// leases until its lease ends, and the floors its clients may
		// fall back to until they end (see ServerGet).
		c.node = true
		c.held, c.heldUntil = rep.capacity, max(c.heldUntil, rep.expiry+r.skew)
		if rep.floorEnd > now {
			c.floorPrev, c.floorPrevEnd = rep.floor, rep.floorEnd+r.skew
		}
	}
	c.seen = now
	// A request after a release in the same round revives the record: the
	// client will hold the lease this round grants (dropReleased skips it).
	c.released = false
	if c.slot == 0 {
		r.batch = append(r.batch, i)
		r.reports = append(r.reports, rep)
		c.slot = int32(len(r.batch))
	} else {
		r.reports[c.slot-1] = rep
	}
	r.recount(i, now)
	return i
}

// report is what client i's request of this round said it holds.
func (r *resource) report(i int32) *holding { return &r.reports[r.clients.at(i).slot-1] }

// holding is what a request says its client holds: a lease (capacity
// until expiry, unix ns) and a floor (until floorEnd, unix ns); zero
// times for none.
type holding struct {
	capacity float64
	expiry   int64
	floor    float64
	floorEnd int64
	// any: a lease was reported at all (possibly expired).
	any bool
	// node: the report is a child node's band's share of what its
	// subtree holds (ServerGet).
	node bool
}

// exposure is the most the client may be holding at now under leases of
// ours: its latest lease, an earlier larger one it may not have replaced
// yet, or a floor it may fall back to.
func (c *client) exposure(now int64) float64 {
	e := c.has
	if c.heldUntil > now && c.held > e {
		e = c.held
	}
	return max(e, c.floorExposure(now))
}

// leaseExposure is the most the client may be holding at now under a
// lease of ours, its floor aside.
func (c *client) leaseExposure(now int64) float64 {
	if c.heldUntil > now && c.held > c.has {
		return c.held
	}
	return c.has
}

// floorExposure is the most the client may be holding at now once its
// lease has ended: the floor last told, or an earlier larger one.
func (c *client) floorExposure(now int64) float64 {
	e := 0.0
	if c.floorEnd > now {
		e = c.floor
	}
	if c.floorPrevEnd > now && c.floorPrev > e {
		e = c.floorPrev
	}
	return e
}

// remove drops client i: swap-delete from the dense arrays, the heaps
// and the sums.
func (r *resource) remove(i int32) {
	c := r.clients.at(i)
	r.index.remove(&r.clients, i)
	r.untrack(c.tenant())
	r.uncount(i)
	r.heap.remove(i)
	last := r.clients.len() - 1
	if i != last {
		*r.clients.at(i) = *r.clients.at(last)
		r.index.rename(&r.clients, last, i)
	}
	r.heap.move(last, i)
	r.sums.wake.move(last, i)
	r.clients.pop()
}

// markReleased ends a client's lease at once: its capacity is free from
// this round on. The record is dropped after the round (dropReleased), so
// client indices stay stable while requests of the round refer to them.
func (r *resource) markReleased(id string, now int64) bool {
	i, ok := r.index.find(&r.clients, id)
	if !ok || r.clients.at(i).released {
		return false
	}
	r.clients.at(i).released = true
	r.clients.at(i).has = 0
	r.clients.at(i).held, r.clients.at(i).heldUntil = 0, 0
	r.clients.at(i).floor, r.clients.at(i).floorPrev = 0, 0
	r.clients.at(i).floorEnd, r.clients.at(i).floorPrevEnd = 0, 0
	r.setDemand(i, 0, r.clients.at(i).weight, r.priority(r.clients.at(i)))
	r.recount(i, now)
	r.releasedIDs = append(r.releasedIDs, id)
	return true
}

// dropReleased removes the records released during the round.
func (r *resource) dropReleased() {
	for _, id := range r.releasedIDs {
		if i, ok := r.index.find(&r.clients, id); ok && r.clients.at(i).released {
			r.remove(i)
		}
	}
	r.releasedIDs = r.releasedIDs[:0]
}

// expire drops every client whose lease and floors have ended, cheapest
// first: the heap top is the earliest expiry, so this costs O(k log n)
// for k expired.
//
// A client whose lease ends (counted until its expiry plus the clock
// skew) is not forgotten at once: its record lapses (no lease, nothing
// wanted) and stays until its floors end (see floor.go), and at least a
// lease length after it was last seen. While it lasts the floor it may
// be running on counts as held, and its weight counts in the fair share
// that floors are cut from.
//
// The heap is ordered by expiry, which is the lease's end for a live
// record and the time to forget it for a lapsed one: a lapsed record may
// so be forgotten up to the clock skew late, never early. A grant that
// moves the expiry later leaves the client's key where it was (see
// clientHeap.lower): a key is at most the expiry, and a key that comes up
// before its expiry is moved to it then, so a client refreshed several
// times a lease length sinks through the heap once a lease length, not
// at every refresh.
//
// Never called while the resource has a batch pending: batch entries
// are indices into clients.
func (r *resource) expire(now int64) {
	for r.heap.len() > 0 {
		i := r.heap.top()
		c := r.clients.at(i)
		if k := r.heap.key(0); k > now {
			return // every expiry is at or after its key
		} else if k < c.expiry {
			r.heap.fix(i, c.expiry)
			continue
		}
		if !c.lapsed {
			if c.expiry+r.skew > now {
				return
			}
			if c.heldUntil > now && c.held > 0 {
				// An earlier lease may still be held: lapse then. (A
				// report of nothing held lapses at once: a record kept
				// alive for it would keep its demand in the shares.)
				c.expiry, c.has = c.heldUntil-r.skew, 0
				r.recount(i, now)
				r.heap.fix(i, c.expiry)
				continue
			}
			c.lapsed = true
			c.has = 0
			r.setDemand(i, 0, c.weight, r.priority(c))
			c.expiry = max(c.floorEnd, c.floorPrevEnd, c.seen+int64(r.tmpl.LeaseLength))
			r.recount(i, now)
			if c.floorExposure(now) > 0 {
				r.floors.event(now, r.id, c, EventUnheard)
			}
			if c.expiry > now {
				r.heap.fix(i, c.expiry)
				continue
			}
		} else if c.expiry > now {
			return
		}
		if c.node {
			r.floors.event(now, r.id, c, EventForgotten)
		}
		r.remove(i)
	}
}

// records returns how many client records the resource keeps.
func (r *resource) records() int { return int(r.clients.len()) }

// upstream is what a child node holds of a resource from its parent.
type upstream struct {
	child  bool    // capacity comes from the parent, not the template
	known  bool    // the parent has answered for this resource
	cap    float64 // the lease's capacity
	expiry int64   // unix ns; the lease ends here
	safe   float64 // the parent's safe capacity for us: our floor
	// safeUntil is when the floor ends (unix ns; MaxInt64 for a parent
	// that sets no end).
	safeUntil int64
	refresh   time.Duration
	// pace is the parent's regular refresh interval (Lease.Pace; 0 from a
	// parent that does not say): refresh may be shorter, to have this
	// node confirm a shrink soon, which its claimants need not follow.
	pace  time.Duration
	asked float64 // the demand in the last ask
	held  float64 // what the subtree held (bound) at the last ask
}

// regular is the parent's regular refresh interval: its pace, else (a
// parent that does not say) the interval of its last answer.
func (u *upstream) regular() time.Duration {
	if u.pace > 0 {
		return u.pace
	}
	return u.refresh
}

// Regimes of a child's capacity for a resource (see capacity).
const (
	RegimeLease = "lease"    // its lease from the parent
	RegimeFloor = "floor"    // the lease ended unrefreshed: its floor
	RegimeNone  = "none"     // the floor ended too, or nothing known yet
	RegimeOwn   = "capacity" // a root: the template's capacity
)

// regime says what a resource's capacity comes from at now.
func (r *resource) regime(now int64) string {
	switch {
	case !r.up.child:
		return RegimeOwn
	case !r.up.known:
		return RegimeNone
	case now < r.up.expiry:
		return RegimeLease
	case now < r.up.safeUntil:
		return RegimeFloor
	}
	return RegimeNone
}

// capacity is what the resource's algorithm divides at now: the
// template's, or on a child node its lease from the parent, then the
// floor the parent told once that lease ended, as a client would, then
// nothing.
func (r *resource) capacity(now int64) float64 {
	switch r.regime(now) {
	case RegimeOwn:
		return r.tmpl.Capacity
	case RegimeLease:
		return min(r.up.cap, r.tmpl.Capacity)
	case RegimeFloor:
		return max(min(r.up.safe, r.tmpl.Capacity), 0)
	}
	return 0
}

// leaseEnd bounds the expiry of the leases a child hands out: never
// after its own lease from the parent while it has one, then never after
// its floor.
func (r *resource) leaseEnd(now int64) int64 {
	switch r.regime(now) {
	case RegimeLease:
		return r.up.expiry
	case RegimeFloor:
		return r.up.safeUntil
	case RegimeNone:
		return now
	}
	return math.MaxInt64
}

// roundParams are the coordinator-wide inputs to a round.
type roundParams struct {
	now      int64
	horizon  int64         // leases may not expire after this
	minFresh time.Duration // shortest refresh interval handed out
	stats    *Stats
	cut      *Cut
}

// allocate runs the resource's algorithm over its whole state and settles
// the clients of this round. For the share algorithms the grants are gated
// by what is actually free: a client whose share shrank keeps its old
// lease until it refreshes, so others only get capacity not leased out.
// Shrinking clients are settled first so the capacity they return can go to
// growing clients in the same round.
func (r *resource) allocate(p *roundParams) {
	t := r.tmpl
	capacity := r.capacity(p.now)
	r.beginFloors(p.now)
	// Floors that claimants outside the round may be running on are not
	// the algorithm's to divide.
	r.targets(max(capacity-r.floors.reserved, 0))

	// No lease may outlive the recorded horizon (record.go) or the
	// resource's published latest expiry.
	full := max(min(p.now+int64(t.LeaseLength), r.leaseEnd(p.now)), p.now)
	expiry := max(min(full, p.horizon, r.ceilingExpiry), p.now)
	// What the record cuts off: counted and reported (a store that does
	// not keep up shortens leases silently otherwise).
	cut := time.Duration(full - expiry)
	refresh := t.RefreshInterval
	if up := r.up.regular(); r.up.child && up > 0 {
		// Lower levels converge first: clients of a child come back twice
		// as often as the child regularly asks its parent. Not as often as
		// a parent asks it back to confirm a shrink: that is the child's
		// to do, and its own shrinking clients are asked back anyway
		// (settle), so following it sent every client of the subtree the
		// shortest interval for as long as shrinks went on.
		refresh = max(min(refresh, up/2), p.minFresh)
	}
	r.pace = refresh

	shared := r.shared()
	learning := r.learning(p.now)

	settle := func(i int32, capacity float64, fresh time.Duration) {
		c := r.clients.at(i)
		if capacity < c.has && c.expiry > p.now {
			// A shrink: until the client confirms it, the larger lease
			// still counts; it is asked back soon to confirm.
			if c.heldUntil <= p.now || c.held < c.has {
				c.held = c.has
			}
			c.heldUntil = max(c.heldUntil, c.expiry+r.skew)
			fresh = min(fresh, p.minFresh)
		}
		if cut > 0 && capacity > 0 && p.cut != nil {
			p.cut.note(r.id, cut)
		}
		c.has = capacity
		c.lapsed = false
		c.expiry = expiry
		c.due = p.now + int64(fresh)
		r.grantFloor(i, p)
		r.recount(i, p.now)
		r.heap.lower(i, c.expiry)
		r.note(c, p.now)
	}

	switch {
	case learning && shared:
		r.learn(p, refresh, settle)
	case learning:
		// Echo what the client reports it holds (never more than it wants
		// or, for share algorithms, than the capacity): leases issued by a
		// predecessor stay honoured and nothing new is handed out.
		for _, i := range r.batch {
			has := min(r.report(i).capacity, r.clients.at(i).wants)
			if r.report(i).expiry <= p.now {
				has = 0 // an expired lease is reported, not held
			}
			if shared || t.Algorithm == allotpb.Algorithm_STATIC {
				has = min(has, capacity)
			}
			settle(i, max(has, 0), refresh)
		}
	case !shared && math.IsInf(r.ceiling, 1):
		for _, i := range r.batch {
			settle(i, r.target(i), refresh)
		}
	case !shared:
		// A share template's record still binds (its ceiling and holder
		// promise) until one that lifts the ceiling is stored: until then
		// grants keep within it, as in the share path below.
		free := r.ceiling - r.bound(p.now)
		for _, i := range r.batch {
			c := r.clients.at(i)
			tg, before := r.target(i), c.exposure(p.now)
			g := tg
			if tg > c.has {
				g = c.has
				if r.mayHoldClient(c, p.now) {
					g = max(min(tg, before+free), c.has, 0)
				}
			}
			settle(i, g, refresh)
			free -= c.exposure(p.now) - before
		}
	default:
		// Grants stay within the published ceiling (write-ahead).
		free := min(capacity, r.ceiling) - r.bound(p.now)
		// Shrinkers first: what they confirm giving back goes to growers.
		for _, i := range r.batch {
			c := r.clients.at(i)
			if tg := r.target(i); tg <= c.has {
				before := c.exposure(p.now)
				settle(i, tg, refresh)
				free += before - c.exposure(p.now)
			}
		}
		type owedGrant struct {
			i int32
			g float64
		}
		var owed []owedGrant
		for _, i := range r.batch {
			c := r.clients.at(i)
			tg := r.target(i)
			if tg <= c.has {
				continue // settled above
			}
			if !r.mayHoldClient(c, p.now) {
				// Not in the recorded holders: it waits for a record that
				// lists it (see holders.go).
				owed = append(owed, owedGrant{i, c.has})
				continue
			}
			before := c.exposure(p.now)
			g := max(min(tg, before+free), c.has, 0)
			free -= max(g, before) - before
			if g < tg*(1-1e-9) {
				owed = append(owed, owedGrant{i, g})
				continue
			}
			settle(i, g, refresh)
		}
		if len(owed) > 0 {
			// Someone holds more than its share and will give it back when it
			// next refreshes: ask the owed clients back shortly after that.
			back := r.nextFree(p.now)
			fresh := refresh
			if back > 0 {
				fresh = time.Duration(back-p.now) + p.minFresh
			}
			fresh = min(max(fresh, p.minFresh), refresh)
			for _, o := range owed {
				settle(o.i, o.g, fresh)
			}
		}
	}
	for _, i := range r.batch {
		r.clients.at(i).slot = 0
	}
	r.batch, r.reports = r.batch[:0], r.reports[:0]
}
