package ledger

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/allot/allot/status"
)

// The tree: a child node is a claimant of its parent standing for the
// clients behind it. At the parent, each priority band a child reports is
// a client record of its own ("<child>\x1f<priority>"), weighted by the
// band's number of clients, so a client gets the same share whether it
// talks to the root or to a node below it, and bands keep their meaning
// across levels. The child reports what its subtree holds (outstanding);
// the parent counts, per band, the larger of what it granted and that
// report's share (exposure), so a shrink the child has not passed on yet
// still counts. The child's capacity per resource is its lease from the
// parent, and no lease it hands out ends after that lease.

// bandSep separates a child node's name from a band in record ids; it is
// a control character, which no client id may contain.
const bandSep = "\x1f"

func bandID(child string, priority int32) string {
	return child + bandSep + strconv.FormatInt(int64(priority), 10)
}

// ServerSlot is where one resource of a GetServerCapacity request stands.
type ServerSlot struct {
	r     *resource
	bands []string
	// Code and Err are set when the resource is refused.
	Code int32
	Err  string
}

// Served reports whether the slot refers to a served resource.
func (s ServerSlot) Served() bool { return s.r != nil }

// ServerGet applies a GetServerCapacity request (already validated) from
// a child node and returns one slot per resource, like Get.
func (l *Ledger) ServerGet(now int64, set *config.Set, req *allotpb.GetServerCapacityRequest) ([]ServerSlot, error) {
	child := req.GetServerId()
	res := req.GetResource()
	slots := make([]ServerSlot, len(res))
	tmpls := make([]*config.Template, len(res))
	served, addRes, addRecords := 0, 0, 0
	// ids are the record ids of each resource's bands, at where their
	// records are (-1 new; see lookupAt).
	ids := make([][]string, len(res))
	at := make([][]int32, len(res))
	for k, rr := range res {
		var r *resource
		if tmpls[k], r, slots[k].Code, slots[k].Err = l.resolve(set, rr.GetResourceId(), &addRes); tmpls[k] == nil {
			continue
		}
		ids[k], at[k] = make([]string, len(rr.GetWants())), make([]int32, len(rr.GetWants()))
		for j, b := range rr.GetWants() {
			ids[k][j], at[k][j] = bandID(child, b.GetPriority()), -1
			if i, known := r.lookup(ids[k][j]); known {
				at[k][j] = i
			} else {
				addRecords++
			}
		}
		if l.records+addRecords > l.cfg.MaxClients {
			tmpls[k] = nil
			slots[k] = ServerSlot{Code: CodeTooMany, Err: fmt.Sprintf("this node keeps %d client records and the limit is %d (--max-clients)", l.records, l.cfg.MaxClients)}
			continue
		}
		served++
	}
	if served == 0 {
		return slots, fmt.Errorf("%w: %s", ErrNothingServed, slots[0].Err)
	}
	for k, rr := range res {
		if tmpls[k] == nil {
			continue
		}
		r := l.resourceFor(now, rr.GetResourceId(), tmpls[k], set.Generation)
		l.touch(now, r)
		// Share what the child's subtree holds among its bands, in
		// proportion to what each was granted (all to the first band if
		// nothing was): the sum is the report, so exposure covers it.
		bands := rr.GetWants()
		granted, total := make([]float64, len(bands)), 0.0
		for j := range bands {
			if i, ok := r.lookupAt(at[k][j], ids[k][j]); ok {
				at[k][j] = i
				granted[j] = r.clients.at(i).has
				total += granted[j]
			}
		}
		// The subtree's leases end with the child's lease; once that has
		// ended (the child runs on its floor) with its floor. A child that
		// says neither (an older one) is counted for a day.
		var floorEnd int64
		if e := rr.GetSafeExpiryTime(); e != nil {
			floorEnd = e.AsTime().UnixNano()
		}
		expiry := now + int64(24*time.Hour)
		switch e := rr.GetHas().GetExpiryTime(); {
		case e != nil:
			expiry = e.AsTime().UnixNano()
		case floorEnd > 0:
			expiry = floorEnd
		}
		out := max(rr.GetOutstanding(), rr.GetHas().GetCapacity())
		fout := max(rr.GetSafeOutstanding(), 0)
		for j, b := range bands {
			frac := 0.0
			switch {
			case total > 0:
				frac = granted[j] / total
			case j == 0:
				frac = 1
			}
			share, fshare := out*frac, fout*frac
			before := r.records()
			i := r.upsertAt(at[k][j], ids[k][j], b.GetWants(), float64(l.childClients(child, b.GetNumClients())), l.priority(tmpls[k], Claimant{}, b.GetPriority()),
				holding{capacity: share, expiry: expiry, floor: fshare, floorEnd: floorEnd, any: rr.GetHas() != nil, node: true}, now)
			l.records += r.records() - before
			r.creditFloor(i, now)
		}
		slots[k] = ServerSlot{r: r, bands: ids[k]}
	}
	return slots, nil
}

// childClients is how many clients a band of child is counted for: what
// it claims, at most its bound (Config.ChildMaxClients, ChildClients).
func (l *Ledger) childClients(child string, claimed int64) int64 {
	bound, ok := l.cfg.ChildClients[child]
	if !ok {
		bound = l.cfg.ChildMaxClients
	}
	if claimed > bound {
		l.stats.ChildCapped++
		return bound
	}
	return claimed
}

// ReadyServer reports whether every resource of slots has been allocated.
func ReadyServer(slots []ServerSlot) bool {
	for _, s := range slots {
		if s.r != nil && s.r.waitSince != 0 {
			return false
		}
	}
	return true
}

// Lease returns what the child holds of the slot's resource: the sum of
// its bands' leases.
func (s ServerSlot) Lease(now int64) Lease {
	out := Lease{ResourceID: s.r.id, Expiry: math.MaxInt64, Refresh: s.r.tmpl.RefreshInterval, SafeExpiry: math.MaxInt64, Pace: s.r.pace}
	if out.Pace == 0 {
		out.Pace = s.r.tmpl.RefreshInterval
	}
	for _, id := range s.bands {
		b := Slot{r: s.r, client: id, at: -1}.Lease(now)
		out.Capacity += b.Capacity
		out.Expiry = min(out.Expiry, b.Expiry)
		out.Refresh = min(out.Refresh, b.Refresh)
		switch {
		case b.SafeCapacity < 0 || out.SafeCapacity < 0:
			out.SafeCapacity = -1
		case b.SafeCapacity > 0:
			// The child's floor is its bands' floors, until the first of
			// them ends.
			out.SafeCapacity += b.SafeCapacity
			out.SafeExpiry = min(out.SafeExpiry, b.SafeExpiry)
		}
	}
	if out.Expiry == math.MaxInt64 {
		out.Expiry = now
	}
	if out.SafeCapacity <= 0 {
		out.SafeExpiry = 0
	}
	return out
}

// UpstreamRequests returns, for a child node, what to ask the parent for:
// every resource with clients, its demand per priority band (summed
// wants, number of clients), what its subtree holds (outstanding) and its
// current lease (has), cut to the parent's per-request limits.
func (l *Ledger) UpstreamRequests(now int64, node string) []*allotpb.GetServerCapacityRequest {
	ids := make([]string, 0, len(l.resources))
	for id, r := range l.resources {
		if r.up.child && int(r.clients.len()) > 0 {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var reqs []*allotpb.GetServerCapacityRequest
	var cur *allotpb.GetServerCapacityRequest
	bands := 0
	for _, id := range ids {
		r := l.resources[id]
		rr := &allotpb.ServerCapacityResourceRequest{ResourceId: id, Outstanding: r.bound(now), Wants: r.bandDemand()}
		r.up.asked, r.up.held = r.demand(), rr.Outstanding
		fb, fend := r.floorBound(now), r.latestFloorEnd(now)
		if told := r.floorCap(now); told > fb {
			// While the floor the parent told us lasts, our clients may
			// come to hold up to it (we may grant floors within it), so
			// that is what the subtree may fall back to: a parent's
			// successor credits it in full instead of keeping the
			// difference back from everyone until the floor ends.
			fb, fend = told, max(fend, r.up.safeUntil)
		}
		if fb > 0 {
			// What the subtree may hold once our lease ends: the parent
			// counts it while it is more than the floor it told us.
			rr.SafeOutstanding = fb
			rr.SafeExpiryTime = timestamppb.New(time.Unix(0, fend))
		}
		if r.up.known {
			// Also once it has expired: a parent that took over counts it
			// as a holder it promised heard (holders.go).
			rr.Has = &allotpb.Lease{Capacity: r.up.cap, ExpiryTime: timestamppb.New(time.Unix(0, r.up.expiry)),
				RefreshInterval: durationpb.New(r.up.refresh)}
		}
		if cur == nil || len(cur.Resource) == wire.MaxResourcesPerReq || bands+len(rr.Wants) > wire.MaxBandsPerReq {
			cur = &allotpb.GetServerCapacityRequest{ServerId: node}
			reqs = append(reqs, cur)
			bands = 0
		}
		cur.Resource = append(cur.Resource, rr)
		bands += len(rr.Wants)
	}
	return reqs
}

// UpstreamSource names which of the parent's coordinators answered: lease
// partition Part of Parts (the zero value: the parent's plain subject).
// Each partition elects its own leader, so each has terms of its own.
type UpstreamSource struct{ Part, Parts int }

// SetUpstream installs the parent's answer: each resource's lease becomes
// its capacity. Answers of a lower term than one already seen are stale
// (a deposed parent leader) and ignored; it reports whether resp was.
func (l *Ledger) SetUpstream(now int64, resp *allotpb.GetServerCapacityResponse) bool {
	return l.SetUpstreamFrom(now, UpstreamSource{}, resp)
}

// SetUpstreamFrom is SetUpstream for the answer of one of the parent's
// lease partitions: terms are compared with that partition's only.
func (l *Ledger) SetUpstreamFrom(now int64, src UpstreamSource, resp *allotpb.GetServerCapacityResponse) bool {
	if resp.GetTerm() < l.upTerms[src] {
		return false
	}
	if l.upTerms == nil {
		l.upTerms = map[UpstreamSource]uint64{}
	}
	l.upTerms[src] = resp.GetTerm()
	for _, rr := range resp.GetResponse() {
		r := l.resources[rr.GetResourceId()]
		if r == nil || !r.up.child {
			continue
		}
		g := rr.GetGets()
		// asked and held stay: they describe the ask this answers.
		r.up.known, r.up.cap = true, max(g.GetCapacity(), 0)
		r.up.expiry, r.up.safe = g.GetExpiryTime().AsTime().UnixNano(), rr.GetSafeCapacity()
		r.up.safeUntil = noFloorEnd
		if e := rr.GetSafeExpiryTime(); e != nil {
			r.up.safeUntil = e.AsTime().UnixNano()
		}
		if r.up.safe < 0 {
			// Unlimited: the parent's template opts out of floors; its
			// capacity bounds ours.
			r.up.safe = r.tmpl.Capacity
		}
		r.up.refresh = g.GetRefreshInterval().AsDuration()
		r.up.pace = rr.GetPace().AsDuration() // 0 when absent: an older parent
	}
	return true
}

// Ask says how soon a child should ask its parent.
type Ask int

// The answers of UpstreamWanted.
const (
	// AskLater: the regular ask, once per refresh interval, will do.
	AskLater Ask = iota
	// AskSoon: demand grew or the subtree gave back a noticeable part of
	// the lease (UpstreamJump of it) since the last ask. The caller asks
	// at once unless it asked within a fraction of the refresh interval,
	// so that freed or wanted capacity moves through the tree in about
	// one round trip per level instead of one refresh interval.
	AskSoon
	// AskNow: a resource of the round waits for its first lease.
	AskNow
)

// UpstreamJump is the change, as a fraction of a child's lease, that makes
// it ask its parent before the regular ask.
const UpstreamJump = 0.001

// UpstreamWanted reports how soon the parent should be asked, from the
// resources of the round: at once when one waits for its first lease from
// the parent; soon when demand grew or what the subtree holds fell by
// UpstreamJump of the lease (at least a hundredth of a unit) since the
// last ask, or when the subtree wants more than the lease (capacity the
// parent frees or gains then reaches it within the caller's ask gap, not
// the regular interval; children are few, so the extra asks are cheap).
func (l *Ledger) UpstreamWanted(now int64) Ask {
	ask := AskLater
	for _, r := range l.touched {
		if !r.up.child || len(r.batch) == 0 {
			continue
		}
		if !r.up.known {
			return AskNow
		}
		jump := max(r.up.cap*UpstreamJump, 0.01)
		if d := r.demand(); d > r.up.asked+jump || r.bound(now)+jump < r.up.held || d > r.up.cap+jump {
			// Demand grew, the subtree gave back, or it wants more than
			// it has: the parent can act only once it hears.
			ask = AskSoon
		}
	}
	return ask
}

// UpstreamRefresh is how often a child asks its parent: the shortest
// refresh interval the parent gave, else the templates' (default 1s).
func (l *Ledger) UpstreamRefresh() time.Duration {
	d := time.Duration(0)
	for _, r := range l.resources {
		if r.up.child && r.up.known && r.up.refresh > 0 && (d == 0 || r.up.refresh < d) {
			d = r.up.refresh
		}
	}
	if d == 0 {
		d = time.Second
	}
	return d
}

// ResourceStat describes one resource for operators; the coordinator
// publishes it in STATS as it is.
type ResourceStat = status.ResourceStat

// Top returns the n resources with the most outstanding, most first.
func (l *Ledger) Top(now int64, n int) []ResourceStat {
	out := make([]ResourceStat, 0, min(n, len(l.resources)))
	for id, r := range l.resources {
		st := ResourceStat{ID: id, Capacity: r.capacity(now), Outstanding: r.bound(now), Claimants: int(r.clients.len()), Learning: r.learning(now), Shadow: r.tmpl.Shadow,
			Floors: r.floorOutstanding(now), OnFloor: r.onFloor(now)}
		st.Withheld = r.predOutstanding(now)
		if st.Learning {
			st.LearningUntil = time.Unix(0, r.learningUntil).UTC().Format(time.RFC3339Nano)
		}
		if r.up.child {
			st.Regime = r.regime(now)
		}
		if r.up.child && r.up.known {
			st.Lease = r.up.cap
			st.LeaseExpiry = time.Unix(0, r.up.expiry).UTC().Format(time.RFC3339Nano)
			st.Floor = r.up.safe
			if r.up.safeUntil != noFloorEnd {
				st.FloorUntil = time.Unix(0, r.up.safeUntil).UTC().Format(time.RFC3339Nano)
			}
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b ResourceStat) int {
		if c := cmp.Compare(b.Outstanding, a.Outstanding); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
