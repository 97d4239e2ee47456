package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkHeap checks that h holds each of its clients at the position the
// record says, with the record's key, in heap order.
func checkHeap(h *clientHeap, cs *clientPages) error {
	if len(h.ids) > 0 && len(h.keys) != heapPad+len(h.ids) {
		return fmt.Errorf("heap of kind %d: %d keys for %d clients", h.kind, len(h.keys)-heapPad, len(h.ids))
	}
	for k, i := range h.ids {
		switch {
		case i < 0 || i >= cs.len():
			return fmt.Errorf("heap of kind %d: position %d holds client %d of %d", h.kind, k, i, cs.len())
		case int(*h.pos(cs.at(i))) != k:
			return fmt.Errorf("heap of kind %d: client %d at %d says it is at %d", h.kind, i, k, *h.pos(cs.at(i)))
		case h.key(k) != h.keyOf(cs, i):
			return fmt.Errorf("heap of kind %d: client %d's key is %d, its record's %d", h.kind, i, h.key(k), h.keyOf(cs, i))
		case k > 0 && h.key((k-1)/4) > h.key(k):
			return fmt.Errorf("heap of kind %d: position %d's key %d is below its parent's %d", h.kind, k, h.key(k), h.key((k-1)/4))
		}
	}
	return nil
}

// TestClientHeap: clients pushed, re-keyed, removed (with the swap-delete
// of the records a resource does) and popped at random, of both kinds,
// against a reference that finds the least key by a scan: the heap's top
// always has the least key, and its positions and keys match the
// records'. Keys come from a small range, so that ties are common, as
// they are among clients granted in the same round.
func TestClientHeap(t *testing.T) {
	for _, kind := range []heapKind{byExpiry, byWake} {
		t.Run(fmt.Sprint(kind), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(kind)))
			h := clientHeap{kind: kind}
			var cs clientPages
			setKey := func(i int32, key int64) {
				if kind == byExpiry {
					cs.at(i).expiry = key
				} else {
					cs.at(i).n.wake = key
				}
			}
			// in is the reference: whether each record is in the heap.
			var in []bool
			for step := range 30000 {
				size := step/3000%2 == 0 // grow, then shrink, in turns
				switch op := rng.IntN(10); {
				case op < 4 && size || op < 2 || cs.len() == 0:
					i := cs.push(client{heapIdx: -1, wakeIdx: -1})
					in = append(in, true)
					setKey(i, rng.Int64N(500))
					h.push(&cs, i)
				case op < 7:
					i := int32(rng.IntN(int(cs.len())))
					if !in[i] {
						continue
					}
					setKey(i, rng.Int64N(500))
					h.fix(&cs, i)
				case op < 9:
					// Swap-delete a record, in the heap or not, as
					// resource.remove does.
					i := int32(rng.IntN(int(cs.len())))
					if in[i] {
						h.remove(&cs, i)
					}
					last := cs.len() - 1
					if i != last {
						*cs.at(i) = *cs.at(last)
						in[i] = in[last]
						if in[i] {
							h.rename(&cs, i)
						}
					}
					cs.pop()
					in = in[:last]
				default:
					if len(h.ids) == 0 {
						continue
					}
					least := int64(-1)
					for i, ok := range in {
						if k := h.keyOf(&cs, int32(i)); ok && (least < 0 || k < least) {
							least = k
						}
					}
					top := h.top()
					if got := h.keyOf(&cs, top); got != least {
						t.Fatalf("step %d: top's key %d, least %d", step, got, least)
					}
					h.remove(&cs, top)
					in[top] = false
					*h.pos(cs.at(top)) = -1
				}
				want := 0
				for _, ok := range in {
					if ok {
						want++
					}
				}
				if len(h.ids) != want {
					t.Fatalf("step %d: heap holds %d, reference %d", step, len(h.ids), want)
				}
				if step%50 == 0 {
					if err := checkHeap(&h, &cs); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
				}
			}
			// Rebuilt from scratch, the same clients are in order; so
			// are an empty heap and one of one client.
			h.init(&cs)
			if err := checkHeap(&h, &cs); err != nil {
				t.Fatalf("after init: %v", err)
			}
			for _, n := range []int{0, 1} {
				e := clientHeap{kind: kind, ids: h.ids[:n]}
				e.init(&cs)
				if err := checkHeap(&e, &cs); err != nil {
					t.Fatalf("after init of %d: %v", n, err)
				}
			}
		})
	}
}
