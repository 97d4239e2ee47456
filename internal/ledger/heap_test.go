package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// checkHeap checks that h knows n client indices, holds each of its
// clients at the position it says with key(i) as its key (key nil: any;
// with bound, any up to key(i): see resource.expire), and is in heap
// order.
func checkHeap(h *clientHeap, n int32, key func(i int32) int64, bound bool) error {
	if len(h.at) != int(n) {
		return fmt.Errorf("positions of %d clients, %d records", len(h.at), n)
	}
	if len(h.ids) > 0 && len(h.keys) != heapPad+len(h.ids) {
		return fmt.Errorf("%d keys for %d clients", len(h.keys)-heapPad, len(h.ids))
	}
	for k, i := range h.ids {
		switch {
		case i < 0 || i >= n:
			return fmt.Errorf("position %d holds client %d of %d", k, i, n)
		case int(h.at[i]) != k:
			return fmt.Errorf("client %d at %d is said to be at %d", i, k, h.at[i])
		case key != nil && (h.key(k) > key(i) || !bound && h.key(k) != key(i)):
			return fmt.Errorf("client %d's key is %d, its record's %d", i, h.key(k), key(i))
		case k > 0 && h.key((k-1)/4) > h.key(k):
			return fmt.Errorf("position %d's key %d is below its parent's %d", k, h.key(k), h.key((k-1)/4))
		}
	}
	in := 0
	for _, k := range h.at {
		if k >= 0 {
			in++
		}
	}
	if in != len(h.ids) {
		return fmt.Errorf("%d clients said to be in, %d are", in, len(h.ids))
	}
	return nil
}

// TestClientHeap: client indices added (as records are), pushed,
// re-keyed (or lowered), removed (with the swap-delete of the records a resource does)
// and popped at random, against a reference that keeps each client's key
// and finds the least by a scan: the heap's top always has the least key,
// and its positions and keys match the reference's. Keys come from a
// small range, so that ties are common, as they are among clients
// granted in the same round.
func TestClientHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var h clientHeap
	// keys is the reference: each client index's key, -1 not in the heap.
	var keys []int64
	refKey := func(i int32) int64 { return keys[i] }
	for step := range 40000 {
		grow := step/4000%2 == 0 // grow, then shrink, in turns
		n := int32(len(keys))
		switch op := rng.IntN(12); {
		case op < 3 && grow || op < 1 || n == 0:
			// A new record, pushed at once or (as the wake heap's) later.
			h.grow()
			keys = append(keys, -1)
			if rng.IntN(2) == 0 {
				keys[n] = rng.Int64N(500)
				h.push(n, keys[n])
			}
		case op < 5:
			i := int32(rng.IntN(int(n)))
			if keys[i] < 0 {
				keys[i] = rng.Int64N(500)
				h.push(i, keys[i])
			}
		case op < 8:
			i := int32(rng.IntN(int(n)))
			switch k := rng.Int64N(500); {
			case keys[i] < 0:
			case rng.IntN(2) == 0:
				keys[i] = k
				h.fix(i, k)
			default: // lower keeps the lesser key
				keys[i] = min(keys[i], k)
				h.lower(i, k)
			}
		case op < 10:
			// Swap-delete a record, in the heap or not, as
			// resource.remove does.
			i := int32(rng.IntN(int(n)))
			if keys[i] >= 0 {
				h.remove(i)
			}
			last := n - 1
			keys[i] = keys[last]
			keys = keys[:last]
			h.move(last, i)
		default:
			if h.len() == 0 {
				continue
			}
			least := int64(-1)
			for _, k := range keys {
				if k >= 0 && (least < 0 || k < least) {
					least = k
				}
			}
			top := h.top()
			if got := h.key(0); got != least || keys[top] != least {
				t.Fatalf("step %d: top %d has key %d (reference %d), least %d", step, top, got, keys[top], least)
			}
			h.remove(top)
			keys[top] = -1
		}
		for i, k := range keys {
			if h.has(int32(i)) != (k >= 0) {
				t.Fatalf("step %d: client %d in the heap: %v, reference key %d", step, i, h.has(int32(i)), k)
			}
		}
		if step%50 == 0 {
			if err := checkHeap(&h, int32(len(keys)), refKey, false); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
		}
	}
	// Rebuilt from scratch (as resync does), the same clients are in
	// order; so are a heap of none and one of one.
	for _, n := range []int{len(keys), 0, 1} {
		h.reset(int32(len(keys)))
		for i, k := range keys[:n] {
			if k >= 0 {
				h.add(int32(i), k)
			}
		}
		h.init()
		if err := checkHeap(&h, int32(len(keys)), nil, false); err != nil {
			t.Fatalf("after init of %d: %v", n, err)
		}
	}
}
