package ledger

import (
	"fmt"
	"testing"

	"github.com/allot/allot/internal/alloc/level"
)

// The slow, from-scratch side of the running sums (sums.go): every
// randomized trial checks after every round that what a resource keeps
// equals a sum over its client records done anew, so a change that
// misses recount fails them.

// scratchSums are a resource's sums worked out from its client records.
type scratchSums struct {
	out, floors, lapsed, wants, weight float64
	onFloor                            int
	bands                              map[int32]scratchBand
}

type scratchBand struct {
	records int
	clients int64
	wants   float64
}

// sumsFromScratch sums r's client records at now, exactly (level.Sum),
// from their fields alone.
func sumsFromScratch(r *resource, now int64) scratchSums {
	var out, floors, lapsed, wants, weight level.Sum
	s := scratchSums{bands: map[int32]scratchBand{}}
	bandWants := map[int32]*level.Sum{}
	for i := range r.clients {
		c, d := &r.clients[i], &r.demands[i]
		f := c.floorExposure(now)
		out.Add(c.exposure(now))
		floors.Add(f)
		if c.lapsed {
			lapsed.Add(f)
			if f > 0 {
				s.onFloor++
			}
		}
		wants.Add(d.Wants)
		weight.Add(d.Weight)
		b := s.bands[d.Priority]
		b.records++
		b.clients += clientsOf(d.Weight)
		s.bands[d.Priority] = b
		if bandWants[d.Priority] == nil {
			bandWants[d.Priority] = &level.Sum{}
		}
		bandWants[d.Priority].Add(d.Wants)
	}
	for p, b := range s.bands {
		b.wants = bandWants[p].Value()
		s.bands[p] = b
	}
	s.out, s.floors, s.lapsed, s.wants, s.weight = out.Value(), floors.Value(), lapsed.Value(), wants.Value(), weight.Value()
	return s
}

// checkSums reports how r's running sums, read at now, differ from its
// client records (nil if they do not): each record's counted
// contribution and every sum.
func checkSums(r *resource, now int64) error {
	r.sync(now)
	for i := range r.clients {
		c, d := &r.clients[i], &r.demands[i]
		n := &c.n
		switch {
		case n.wakeIdx < 0 || int(n.wakeIdx) >= len(r.sums.wake.ids) || r.sums.wake.ids[n.wakeIdx] != int32(i):
			return fmt.Errorf("%q: not in the wake heap where it says (%d)", c.id, n.wakeIdx)
		case n.exp != c.exposure(now):
			return fmt.Errorf("%q: exposure counted %v, is %v", c.id, n.exp, c.exposure(now))
		case n.floor != c.floorExposure(now):
			return fmt.Errorf("%q: floor exposure counted %v, is %v", c.id, n.floor, c.floorExposure(now))
		case n.lapsed != c.lapsed:
			return fmt.Errorf("%q: counted lapsed %v, is %v", c.id, n.lapsed, c.lapsed)
		case n.wants != d.Wants || n.weight != d.Weight || n.prio != d.Priority:
			return fmt.Errorf("%q: demand counted %v/%v/%d, is %+v", c.id, n.wants, n.weight, n.prio, *d)
		case n.wake <= now:
			return fmt.Errorf("%q: wake %d not after now %d", c.id, n.wake, now)
		}
	}
	if len(r.sums.wake.ids) != len(r.clients) {
		return fmt.Errorf("wake heap holds %d of %d clients", len(r.sums.wake.ids), len(r.clients))
	}
	want := sumsFromScratch(r, now)
	for _, x := range []struct {
		name      string
		got, want float64
	}{
		{"outstanding", r.sums.out.Value(), want.out},
		{"floors", r.sums.floors.Value(), want.floors},
		{"lapsed floors", r.sums.lapsed.Value(), want.lapsed},
		{"wants", r.sums.wants.Value(), want.wants},
		{"weight", r.sums.weight.Value(), want.weight},
	} {
		if x.got != x.want {
			return fmt.Errorf("running %s %v, from scratch %v", x.name, x.got, x.want)
		}
	}
	if r.sums.onFloor != want.onFloor {
		return fmt.Errorf("running on-floor count %d, from scratch %d", r.sums.onFloor, want.onFloor)
	}
	if len(r.sums.bands) != len(want.bands) {
		return fmt.Errorf("running sums have %d bands, from scratch %d", len(r.sums.bands), len(want.bands))
	}
	for p, b := range r.sums.bands {
		w := want.bands[p]
		if b.records != w.records || b.clients != w.clients || b.wants.Value() != w.wants {
			return fmt.Errorf("band %d: running %d records, %d clients, wants %v; from scratch %+v", p, b.records, b.clients, b.wants.Value(), w)
		}
	}
	return nil
}

// checkLedger fails t if any resource's running sums differ from its
// records at now.
func checkLedger(t testing.TB, l *Ledger, now int64) {
	t.Helper()
	for id, r := range l.resources {
		if err := checkSums(r, now); err != nil {
			t.Fatalf("resource %q: %v", id, err)
		}
	}
}
