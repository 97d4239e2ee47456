package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestIDIndex: records added and swap-deleted at random (as a resource
// does), through growth and down to empty: every record is found at its
// index, and ids removed are not found.
func TestIDIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var x idIndex
	var cs []client
	gone := map[string]bool{}
	for step := range 40000 {
		grow := step/5000%2 == 0
		if len(cs) > 0 && (!grow || rng.IntN(3) == 0) {
			i := int32(rng.IntN(len(cs)))
			gone[cs[i].id] = true
			x.remove(cs, i)
			last := int32(len(cs) - 1)
			if i != last {
				cs[i] = cs[last]
				x.rename(cs, last, i)
			}
			cs = cs[:last]
		} else {
			id := fmt.Sprint("c", rng.IntN(1_000_000))
			if _, ok := x.find(cs, id); ok {
				continue
			}
			delete(gone, id)
			cs = append(cs, client{id: id})
			x.add(cs, int32(len(cs)-1))
		}
		if step%100 != 0 {
			continue
		}
		if x.n != len(cs) {
			t.Fatalf("step %d: index counts %d of %d records", step, x.n, len(cs))
		}
		for i := range cs {
			if k, ok := x.find(cs, cs[i].id); !ok || k != int32(i) {
				t.Fatalf("step %d: %q found at %d (%v), is at %d", step, cs[i].id, k, ok, i)
			}
		}
		for id := range gone {
			if _, ok := x.find(cs, id); ok {
				t.Fatalf("step %d: removed %q found", step, id)
			}
		}
	}
}
