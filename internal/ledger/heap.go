package ledger

// A resource keeps its clients in two heaps of client indices: by expiry
// (the lease's end, or the time to forget a lapsed record; see
// resource.expire) and by wake (the next time the client's exposure may
// change by itself; see sums.go). Each client knows its position in both,
// so a change is fixed in place, O(log n), and a client index that moves
// (swap-delete) is renamed in both.
//
// The heaps are 4-ary and keep each entry's key beside it: a refresh
// moves its client's expiry (and often its wake) to the latest there is,
// so the client sinks to the bottom, and with a million clients every
// level of that walk reached memory no cache held. Reading the key from
// the client's record took a record (a cache line of its own) per child
// compared, two a level over some twenty levels; here the four children's
// keys share one cache line and there are half the levels. What is left
// a level is the position written into the moved client's record.

// heapKind says which key a clientHeap orders by.
type heapKind uint8

const (
	byExpiry heapKind = iota
	byWake
)

// heapPad is how many unused keys precede the root's, so that the keys of
// the four children of an entry, 4k+1 to 4k+4, lie in one 64-byte line
// of an array that starts on one (as large allocations do).
const heapPad = 3

// clientHeap is a 4-ary min-heap of client indices. ids[k] is the client
// at position k and keys[heapPad+k] its key, a copy of the record's,
// taken when it is pushed or fixed.
type clientHeap struct {
	kind heapKind
	ids  []int32
	keys []int64
}

// keyOf reads client i's key from its record.
func (h *clientHeap) keyOf(cs *clientPages, i int32) int64 {
	if h.kind == byExpiry {
		return cs.at(i).expiry
	}
	return cs.at(i).n.wake
}

func (h *clientHeap) pos(c *client) *int32 {
	if h.kind == byExpiry {
		return &c.heapIdx
	}
	return &c.wakeIdx
}

// top returns the client with the least key; the heap must not be empty.
func (h *clientHeap) top() int32 { return h.ids[0] }

// key is the key at position k.
func (h *clientHeap) key(k int) int64 { return h.keys[heapPad+k] }

// put places client i with key at position k.
func (h *clientHeap) put(cs *clientPages, k int, i int32, key int64) {
	h.ids[k], h.keys[heapPad+k] = i, key
	*h.pos(cs.at(i)) = int32(k)
}

// push adds client i.
func (h *clientHeap) push(cs *clientPages, i int32) {
	if h.keys == nil {
		h.keys = make([]int64, heapPad, heapPad+8)
	}
	h.ids = append(h.ids, i)
	h.keys = append(h.keys, 0)
	h.up(cs, len(h.ids)-1, i, h.keyOf(cs, i))
}

// fix restores the order after client i's key changed.
func (h *clientHeap) fix(cs *clientPages, i int32) {
	h.sift(cs, int(*h.pos(cs.at(i))), i, h.keyOf(cs, i))
}

// sift places client i with key at position k or wherever the order
// takes it from there.
func (h *clientHeap) sift(cs *clientPages, k int, i int32, key int64) {
	if k > 0 && key < h.key((k-1)/4) {
		h.up(cs, k, i, key)
	} else {
		h.down(cs, k, i, key)
	}
}

// remove takes client i out.
func (h *clientHeap) remove(cs *clientPages, i int32) {
	k, last := int(*h.pos(cs.at(i))), len(h.ids)-1
	j, key := h.ids[last], h.key(last)
	h.ids, h.keys = h.ids[:last], h.keys[:heapPad+last]
	if k != last {
		h.sift(cs, k, j, key)
	}
}

// rename records that a client in the heap moved to index to.
func (h *clientHeap) rename(cs *clientPages, to int32) {
	if k := *h.pos(cs.at(to)); k >= 0 {
		h.ids[k] = to
	}
}

// init orders the heap of ids from scratch: O(n).
func (h *clientHeap) init(cs *clientPages) {
	h.keys = append(h.keys[:0], make([]int64, heapPad+len(h.ids))...)
	for k, i := range h.ids {
		h.put(cs, k, i, h.keyOf(cs, i))
	}
	// The last parent is that of the last entry, (len-2)/4 (none for
	// fewer than two: Go's division truncates -2/4 to 0).
	for k := (len(h.ids) - 2) / 4; k >= 0 && len(h.ids) > 1; k-- {
		h.down(cs, k, h.ids[k], h.key(k))
	}
}

// up places client i with key at position k or above it, moving the
// entries it passes down.
func (h *clientHeap) up(cs *clientPages, k int, i int32, key int64) {
	for k > 0 {
		p := (k - 1) / 4
		if key >= h.key(p) {
			break
		}
		h.put(cs, k, h.ids[p], h.key(p))
		k = p
	}
	h.put(cs, k, i, key)
}

// down places client i with key at position k or below it, moving the
// least children it passes up.
func (h *clientHeap) down(cs *clientPages, k int, i int32, key int64) {
	n := len(h.ids)
	for {
		c := 4*k + 1
		if c >= n {
			break
		}
		// The least of the (up to) four children; their keys share a
		// cache line.
		m, mk := c, h.key(c)
		for d := c + 1; d < min(c+4, n); d++ {
			if dk := h.key(d); dk < mk {
				m, mk = d, dk
			}
		}
		if mk >= key {
			break
		}
		h.put(cs, k, h.ids[m], mk)
		k = m
	}
	h.put(cs, k, i, key)
}
