package ledger

// A resource keeps its clients in two heaps of client indices: by expiry
// (the lease's end, or the time to forget a lapsed record; see
// resource.expire) and by wake (the next time the client's exposure may
// change by itself; see sums.go). Each heap knows every client's position
// in it, so a change is fixed in place, O(log n), and a client index that
// moves (swap-delete) is renamed in both.
//
// The heaps are laid out for a million clients. A refresh moves its
// client's expiry (and often its wake) to the latest there is, which
// would sink the client to the bottom, every level of that walk in memory
// no cache holds; so both heaps keep lower bounds (lower), and a client
// sinks only when its key comes to the top before its time, about once a
// lease length. When it does, a heap is 4-ary (half the levels) and keeps
// each entry's key beside it, the four children's keys in one cache line,
// and the positions in an array of its own, 4 bytes a client, a fortieth
// of the records' memory.

// heapPad is how many unused keys precede the root's, so that the keys of
// the four children of an entry, 4k+1 to 4k+4, lie in one 64-byte line
// of an array that starts on one (as large allocations do).
const heapPad = 3

// clientHeap is a 4-ary min-heap of client indices, by a key the caller
// gives (and gives again whenever it changes). ids[k] is the client at
// position k and keys[heapPad+k] its key; at[i] is client i's position
// (-1: not in the heap), for every client index of the resource.
type clientHeap struct {
	ids  []int32
	keys []int64
	at   []int32
}

// top returns the client with the least key; the heap must not be empty.
func (h *clientHeap) top() int32 { return h.ids[0] }

// len returns how many clients the heap holds.
func (h *clientHeap) len() int { return len(h.ids) }

// key is the key at position k.
func (h *clientHeap) key(k int) int64 { return h.keys[heapPad+k] }

// has reports whether client i is in the heap.
func (h *clientHeap) has(i int32) bool { return h.at[i] >= 0 }

// keyOf returns client i's key; i must be in the heap.
func (h *clientHeap) keyOf(i int32) int64 { return h.key(int(h.at[i])) }

// put places client i with key at position k.
func (h *clientHeap) put(k int, i int32, key int64) {
	h.ids[k], h.keys[heapPad+k] = i, key
	h.at[i] = int32(k)
}

// grow makes room for a new client index (the next), not in the heap.
func (h *clientHeap) grow() { h.at = append(h.at, -1) }

// push adds client i, which is not in the heap, with key.
func (h *clientHeap) push(i int32, key int64) {
	if h.keys == nil {
		h.keys = make([]int64, heapPad, heapPad+8)
	}
	h.ids = append(h.ids, i)
	h.keys = append(h.keys, 0)
	h.up(len(h.ids)-1, i, key)
}

// fix sets client i's key (it is in the heap) and restores the order.
func (h *clientHeap) fix(i int32, key int64) { h.sift(int(h.at[i]), i, key) }

// lower sets client i's key (it is in the heap) to key if that is less,
// and leaves it otherwise: for a heap whose keys are lower bounds, which
// its reader moves up when one comes to the top too early.
func (h *clientHeap) lower(i int32, key int64) {
	if k := int(h.at[i]); key < h.key(k) {
		h.up(k, i, key)
	}
}

// sift places client i with key at position k or wherever the order
// takes it from there.
func (h *clientHeap) sift(k int, i int32, key int64) {
	if k > 0 && key < h.key((k-1)/4) {
		h.up(k, i, key)
	} else {
		h.down(k, i, key)
	}
}

// remove takes client i out; it must be in the heap.
func (h *clientHeap) remove(i int32) {
	k, last := int(h.at[i]), len(h.ids)-1
	j, key := h.ids[last], h.key(last)
	h.ids, h.keys = h.ids[:last], h.keys[:heapPad+last]
	h.at[i] = -1
	if k != last {
		h.sift(k, j, key)
	}
}

// move records that the last client index, from, is now to (the record
// at to having been dropped, and taken out of the heap if it was in it),
// and drops from.
func (h *clientHeap) move(from, to int32) {
	if from != to {
		h.at[to] = h.at[from]
		if k := h.at[to]; k >= 0 {
			h.ids[k] = to
		}
	}
	h.at = h.at[:from]
}

// reset empties the heap, keeping its memory, for n client indices
// (none of them in it), to be filled by add and ordered by init.
func (h *clientHeap) reset(n int32) {
	h.ids, h.keys, h.at = h.ids[:0], h.keys[:0], h.at[:0]
	h.keys = append(h.keys, make([]int64, heapPad)...)
	for range n {
		h.at = append(h.at, -1)
	}
}

// add puts client i, not in the heap, with key at the end, out of order:
// init orders the heap after a series of them.
func (h *clientHeap) add(i int32, key int64) {
	h.ids = append(h.ids, i)
	h.keys = append(h.keys, key)
	h.at[i] = int32(len(h.ids) - 1)
}

// init orders the heap from scratch: O(n).
func (h *clientHeap) init() {
	// The last parent is that of the last entry, (len-2)/4 (none for
	// fewer than two: Go's division truncates -2/4 to 0).
	for k := (len(h.ids) - 2) / 4; k >= 0 && len(h.ids) > 1; k-- {
		h.down(k, h.ids[k], h.key(k))
	}
}

// up places client i with key at position k or above it, moving the
// entries it passes down.
func (h *clientHeap) up(k int, i int32, key int64) {
	for k > 0 {
		p := (k - 1) / 4
		if key >= h.key(p) {
			break
		}
		h.put(k, h.ids[p], h.key(p))
		k = p
	}
	h.put(k, i, key)
}

// down places client i with key at position k or below it, moving the
// least children it passes up.
func (h *clientHeap) down(k int, i int32, key int64) {
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
		h.put(k, h.ids[m], mk)
		k = m
	}
	h.put(k, i, key)
}
