package ledger

import (
	"cmp"
	"fmt"
	"math"
	"testing"

	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/internal/alloc/level"
)

// The slow, from-scratch side of the running sums (sums.go): every
// randomized trial checks after every round that what a resource keeps
// equals a sum over its client records done anew, so a change that
// misses recount fails them.

// scratchSums are a resource's sums worked out from its client records.
type scratchSums struct {
	out, floors, lapsed, unlisted, wants, weight float64
	onFloor, leased                              int
	floorEnd                                     int64 // the latest end of a floor counted
	bands                                        map[int32]scratchBand
}

type scratchBand struct {
	records int
	clients int64
	wants   float64
}

// sumsFromScratch sums r's client records at now, exactly (level.Sum),
// from their fields alone.
func sumsFromScratch(r *resource, now int64) scratchSums {
	var out, floors, lapsed, unlisted, wants, weight level.Sum
	s := scratchSums{bands: map[int32]scratchBand{}}
	bandWants := map[int32]*level.Sum{}
	for i := range r.clients.len() {
		c := r.clients.at(i)
		f := c.floorExposure(now)
		out.Add(c.exposure(now))
		floors.Add(f)
		if c.exposure(now) > f {
			s.leased++
		}
		if c.leaseExposure(now) <= 0 {
			unlisted.Add(f)
		}
		if f > 0 {
			s.floorEnd = max(s.floorEnd, c.floorEnd, c.floorPrevEnd)
		}
		if c.lapsed {
			lapsed.Add(f)
			if f > 0 {
				s.onFloor++
			}
		}
		wants.Add(c.wants)
		weight.Add(c.weight)
		prio := r.priority(c) // kept in the State alone
		b := s.bands[prio]
		b.records++
		b.clients += max(int64(math.Round(c.weight)), 1)
		s.bands[prio] = b
		if bandWants[prio] == nil {
			bandWants[prio] = &level.Sum{}
		}
		bandWants[prio].Add(c.wants)
	}
	for p, b := range s.bands {
		b.wants = bandWants[p].Value()
		s.bands[p] = b
	}
	s.out, s.floors, s.lapsed, s.unlisted, s.wants, s.weight = out.Value(), floors.Value(), lapsed.Value(), unlisted.Value(), wants.Value(), weight.Value()
	return s
}

// checkSums reports how r's running sums, read at now, differ from its
// client records (nil if they do not): each record's counted
// contribution and claim in the level.State, and every sum.
func checkSums(r *resource, now int64) error {
	r.sync(now)
	if r.lv.Len() != int(r.clients.len()) {
		return fmt.Errorf("the level.State holds %d claims for %d clients", r.lv.Len(), int(r.clients.len()))
	}
	for i := range r.clients.len() {
		c := r.clients.at(i)
		n := &c.n
		got, ok := r.lv.Claim(c.h)
		if !ok || got.Wants != c.wants || got.Weight != c.weight {
			return fmt.Errorf("%q: the level.State has %+v (%v), the record wants %v weight %v", c.id, got, ok, c.wants, c.weight)
		}
		switch {
		case !r.sums.wake.has(i):
			return fmt.Errorf("%q: not in the wake heap", c.id)
		case n.lease != c.leaseExposure(now):
			return fmt.Errorf("%q: lease exposure counted %v, is %v", c.id, n.lease, c.leaseExposure(now))
		case n.floor != c.floorExposure(now):
			return fmt.Errorf("%q: floor exposure counted %v, is %v", c.id, n.floor, c.floorExposure(now))
		case c.countedLapsed != c.lapsed:
			return fmt.Errorf("%q: counted lapsed %v, is %v", c.id, c.countedLapsed, c.lapsed)
		case r.sums.wake.keyOf(i) <= now:
			return fmt.Errorf("%q: wake %d not after now %d", c.id, r.sums.wake.keyOf(i), now)
		}
	}
	if len(r.sums.wake.ids) != int(r.clients.len()) {
		return fmt.Errorf("wake heap holds %d of %d clients", len(r.sums.wake.ids), int(r.clients.len()))
	}
	if err := checkHeap(&r.heap, r.clients.len(), func(i int32) int64 { return r.clients.at(i).expiry }, true); err != nil {
		return fmt.Errorf("expiry heap: %w", err)
	}
	if err := checkHeap(&r.sums.wake, r.clients.len(), func(i int32) int64 { return r.clients.at(i).nextFall(now) }, true); err != nil {
		return fmt.Errorf("wake heap: %w", err)
	}
	want := sumsFromScratch(r, now)
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"outstanding", r.sums.out.Value(), want.out},
		{"floors", r.sums.floors.Value(), want.floors},
		{"lapsed floors", r.sums.lapsed.Value(), want.lapsed},
		{"unlisted floors", r.sums.unlisted.Value(), want.unlisted},
		{"wants", r.demand(), want.wants},
		{"weight", r.weight(), want.weight},
	} {
		if x.got != x.want {
			return fmt.Errorf("running %s %v, from scratch %v", x.name, x.got, x.want)
		}
	}
	if r.sums.onFloor != want.onFloor || r.sums.leased != want.leased {
		return fmt.Errorf("running on-floor and leased counts %d %d, from scratch %d %d", r.sums.onFloor, r.sums.leased, want.onFloor, want.leased)
	}
	if r.sums.floorEnd < want.floorEnd {
		return fmt.Errorf("the floors counted end at %d, after the bound %d", want.floorEnd, r.sums.floorEnd)
	}
	if err := checkListed(r, now); err != nil {
		return err
	}
	bands := r.lv.Bands()
	if len(bands) != len(want.bands) {
		return fmt.Errorf("running sums have %d bands, from scratch %d", len(bands), len(want.bands))
	}
	for _, b := range bands {
		w := want.bands[b.Priority]
		if b.Claims != w.records || b.Clients != w.clients || b.Wants != w.wants {
			return fmt.Errorf("band %d: running %+v; from scratch %+v", b.Priority, b, w)
		}
	}
	return nil
}

// checkTargets reports how the targets r's level.State gives differ from
// what internal/alloc computes from scratch over the same demands, at the
// capacity its last round divided (nil if they do not): alloc.Run, or
// alloc.ByTenant with the template's tenant level. The two sum in other
// orders, so they may differ in the last bits: by at most 1e-12 of the
// capacity plus the wants.
func checkTargets(r *resource) error {
	d := make([]alloc.Demand, int(r.clients.len()))
	var wants float64
	for i := range r.clients.len() {
		c := r.clients.at(i)
		d[i] = alloc.Demand{Wants: c.wants, Weight: c.weight, Priority: r.priority(c)}
		wants += c.wants
	}
	capacity := r.lv.Capacity()
	if weigh := levelConfig(r.tmpl).TenantWeight; weigh != nil {
		index := map[string]int32{}
		of := make([]int32, int(r.clients.len()))
		var tenants []alloc.Tenant
		for i := range r.clients.len() {
			name := r.clients.at(i).tenant()
			k, ok := index[name]
			if !ok {
				k = int32(len(tenants))
				index[name] = k
				tenants = append(tenants, alloc.Tenant{Weight: weigh(name)})
			}
			of[i] = k
		}
		alloc.ByTenant(r.tmpl.Algorithm, capacity, d, of, tenants, nil)
	} else {
		alloc.Run(r.tmpl.Algorithm, capacity, d, nil)
	}
	tolerance := 1e-12 * (max(capacity, 0) + wants)
	for i := range r.clients.len() {
		if got := r.target(int32(i)); got != d[i].Target && !(math.Abs(got-d[i].Target) <= tolerance) {
			return fmt.Errorf("%q (%+v): target %v, alloc gives %v at capacity %v", r.clients.at(i).id, d[i], got, d[i].Target, capacity)
		}
	}
	return nil
}

// nextFreeScan is nextFree worked out over every client: the earliest
// time a client holding more than its target (by more than rounding), or
// a shrink it has yet to confirm, is due back (0 if none is, or if all
// are overdue). Clients of the round are left out: they are being
// settled (nextFree runs in the middle of a round, a check after it
// finds clients of a round still waiting for the record).
func nextFreeScan(r *resource, now int64) int64 {
	next := int64(math.MaxInt64)
	for i := range r.clients.len() {
		c := r.clients.at(i)
		if c.touched() {
			continue
		}
		over := c.has > r.target(int32(i))*(1+1e-9)
		if !over && (c.heldUntil <= now || c.held <= c.has) {
			continue
		}
		if c.due > now && c.due < next {
			next = c.due
		}
	}
	if next == math.MaxInt64 {
		return 0
	}
	return next
}

// checkNextFree reports whether r's nextFree (its ring made now if it has
// none yet) is ever later than the scan's answer.
func checkNextFree(r *resource, now int64) error {
	if !r.shared() {
		return nil
	}
	got, scan := r.nextFree(now), nextFreeScan(r, now)
	if scan > 0 && (got == 0 || got > scan) {
		return fmt.Errorf("nextFree %+dms, later than the first client due to give back (%+dms)", (got-now)/1e6, (scan-now)/1e6)
	}
	return nil
}

// checkLedger fails t if any resource's running sums differ from its
// records at now, its targets from internal/alloc's, or its nextFree is
// later than a scan's.
func checkLedger(t testing.TB, l *Ledger, now int64) {
	t.Helper()
	for id, r := range l.resources {
		if err := cmp.Or(checkSums(r, now), checkTargets(r), checkNextFree(r, now)); err != nil {
			t.Fatalf("resource %q: %v", id, err)
		}
	}
}

// checkListed reports how r's running figures of the clients a holder
// promise lists differ from its client records at now.
func checkListed(r *resource, now int64) error {
	r.sync(now)
	var n uint32
	var digest uint64
	var bytes int
	for i := range r.clients.len() {
		c := r.clients.at(i)
		in := c.leaseExposure(now) > 0
		if c.listed() != in {
			return fmt.Errorf("%q: listed %v, lease exposure %v", c.id, c.listed(), c.leaseExposure(now))
		}
		if in {
			n++
			if r.hold.key != nil {
				digest += holderHash(r.hold.key, c.id)
			}
			bytes += holderIDBytes(c.id)
		}
	}
	if h := &r.hold; h.n != n || h.digest != digest || h.bytes != bytes {
		return fmt.Errorf("running listed holders %d (digest %x, %d bytes), from scratch %d (%x, %d)", h.n, h.digest, h.bytes, n, digest, bytes)
	}
	return nil
}
