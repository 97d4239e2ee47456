package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestIDIndex: records added and swap-deleted at random (as a resource
// does), through growth and down to empty: every record is found at its
// index, and ids removed are not found.
func TestIDIndex(t *testing.T) { idIndexTrial(t, 5, 0) }

// TestIDIndexWide: TestIDIndex with an index that gives up its
// fingerprints at a few hundred records: it widens on the way and finds
// every record after.
func TestIDIndexWide(t *testing.T) {
	x := idIndex{limit: 300}
	var cs clientPages
	for i := range 1000 {
		x.add(&cs, cs.push(client{id: fmt.Sprint("c", i)}))
		if x.wide != (i+1 > 300) {
			t.Fatalf("%d records: wide is %v", i+1, x.wide)
		}
	}
	for i, c := range cs.all() {
		if k, ok := x.find(&cs, c.id); !ok || k != i {
			t.Fatalf("%q found at %d (%v), is at %d", c.id, k, ok, i)
		}
	}
	idIndexTrial(t, 6, 300)
}

func idIndexTrial(t *testing.T, seed uint64, limit uint32) {
	rng := rand.New(rand.NewPCG(seed, seed))
	x := idIndex{limit: limit}
	var cs clientPages
	gone := map[string]bool{}
	for step := range 40000 {
		grow := step/5000%2 == 0
		if cs.len() > 0 && (!grow || rng.IntN(3) == 0) {
			i := int32(rng.IntN(int(cs.len())))
			gone[cs.at(i).id] = true
			x.remove(&cs, i)
			last := cs.len() - 1
			if i != last {
				*cs.at(i) = *cs.at(last)
				x.rename(&cs, last, i)
			}
			cs.pop()
		} else {
			id := fmt.Sprint("c", rng.IntN(1_000_000))
			if _, ok := x.find(&cs, id); ok {
				continue
			}
			delete(gone, id)
			x.add(&cs, cs.push(client{id: id}))
		}
		if step%100 != 0 {
			continue
		}
		if x.n != int(cs.len()) {
			t.Fatalf("step %d: index counts %d of %d records", step, x.n, cs.len())
		}
		for i, c := range cs.all() {
			if k, ok := x.find(&cs, c.id); !ok || k != i {
				t.Fatalf("step %d: %q found at %d (%v), is at %d", step, c.id, k, ok, i)
			}
		}
		for id := range gone {
			if _, ok := x.find(&cs, id); ok {
				t.Fatalf("step %d: removed %q found", step, id)
			}
		}
	}
}

// TestIDIndexSplit: an index that grows past splitAt records into its
// tables, loses half of them at random and grows again finds every
// record and none removed.
func TestIDIndexSplit(t *testing.T) {
	rng := rand.New(rand.NewPCG(6, 6))
	var x idIndex
	var cs clientPages
	next := 0
	add := func(k int) {
		for range k {
			x.add(&cs, cs.push(client{id: fmt.Sprint("c", next)}))
			next++
		}
	}
	gone := map[string]bool{}
	check := func(when string) {
		t.Helper()
		if x.n != int(cs.len()) || len(x.tabs) != tables {
			t.Fatalf("%s: index counts %d of %d records in %d tables", when, x.n, cs.len(), len(x.tabs))
		}
		for i, c := range cs.all() {
			if k, ok := x.find(&cs, c.id); !ok || k != i {
				t.Fatalf("%s: %q found at %d (%v), is at %d", when, c.id, k, ok, i)
			}
		}
		for id := range gone {
			if _, ok := x.find(&cs, id); ok {
				t.Fatalf("%s: removed %q found", when, id)
			}
		}
	}
	add(splitAt + splitAt/2)
	check("grown")
	for cs.len() > splitAt*3/4 {
		i := int32(rng.IntN(int(cs.len())))
		gone[cs.at(i).id] = true
		x.remove(&cs, i)
		if last := cs.len() - 1; i != last {
			*cs.at(i) = *cs.at(last)
			x.rename(&cs, last, i)
		}
		cs.pop()
	}
	check("halved")
	add(splitAt)
	check("grown again")
}

// TestClientPages: records pushed and popped across pages keep their
// indices, and a page emptied is freed only once the one before it is a
// quarter empty.
func TestClientPages(t *testing.T) {
	var p clientPages
	for i := range int32(3*pageSize + 10) {
		if got := p.push(client{id: fmt.Sprint(i)}); got != i {
			t.Fatalf("push %d returned %d", i, got)
		}
	}
	for i := range p.len() {
		if p.at(i).id != fmt.Sprint(i) {
			t.Fatalf("record %d is %q", i, p.at(i).id)
		}
	}
	for p.len() > 3*pageSize-1 {
		p.pop()
	}
	if len(p.pages) != 4 {
		t.Fatalf("%d pages for %d records: the emptied page went at once", len(p.pages), p.len())
	}
	for p.len() > 3*pageSize-pageSize/4-1 {
		p.pop()
	}
	if len(p.pages) != 3 || p.at(p.len()-1).id != fmt.Sprint(p.len()-1) {
		t.Fatalf("%d pages for %d records", len(p.pages), p.len())
	}
	for p.len() > 0 {
		p.pop()
	}
	if len(p.pages) != 1 {
		t.Fatalf("%d pages left empty", len(p.pages))
	}
}
