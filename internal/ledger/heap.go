package ledger

// A resource keeps its clients in two binary heaps of client indices: by
// expiry (the lease's end, or the time to forget a lapsed record; see
// resource.expire) and by wake (the next time the client's exposure may
// change by itself; see sums.go). Each client knows its position in both,
// so a change is fixed in place, O(log n), and a client index that moves
// (swap-delete) is renamed in both.

// heapKind says which key a clientHeap orders by.
type heapKind uint8

const (
	byExpiry heapKind = iota
	byWake
)

// clientHeap is a min-heap of client indices.
type clientHeap struct {
	kind heapKind
	ids  []int32
}

func (h *clientHeap) key(cs *clientPages, i int32) int64 {
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

func (h *clientHeap) less(cs *clientPages, a, b int) bool {
	return h.key(cs, h.ids[a]) < h.key(cs, h.ids[b])
}

func (h *clientHeap) swap(cs *clientPages, a, b int) {
	h.ids[a], h.ids[b] = h.ids[b], h.ids[a]
	*h.pos(cs.at(h.ids[a])) = int32(a)
	*h.pos(cs.at(h.ids[b])) = int32(b)
}

// push adds client i.
func (h *clientHeap) push(cs *clientPages, i int32) {
	*h.pos(cs.at(i)) = int32(len(h.ids))
	h.ids = append(h.ids, i)
	h.up(cs, len(h.ids)-1)
}

// fix restores the order after client i's key changed.
func (h *clientHeap) fix(cs *clientPages, i int32) {
	k := int(*h.pos(cs.at(i)))
	if !h.down(cs, k) {
		h.up(cs, k)
	}
}

// remove takes client i out.
func (h *clientHeap) remove(cs *clientPages, i int32) {
	k, last := int(*h.pos(cs.at(i))), len(h.ids)-1
	if k != last {
		h.swap(cs, k, last)
	}
	h.ids = h.ids[:last]
	if k != last {
		h.fix(cs, h.ids[k])
	}
}

// rename records that a client in the heap moved to index to.
func (h *clientHeap) rename(cs *clientPages, to int32) {
	if k := *h.pos(cs.at(to)); k >= 0 {
		h.ids[k] = to
	}
}

// init orders the heap from scratch: O(n).
func (h *clientHeap) init(cs *clientPages) {
	for k, i := range h.ids {
		*h.pos(cs.at(i)) = int32(k)
	}
	for k := len(h.ids)/2 - 1; k >= 0; k-- {
		h.down(cs, k)
	}
}

func (h *clientHeap) up(cs *clientPages, k int) {
	for k > 0 {
		p := (k - 1) / 2
		if !h.less(cs, k, p) {
			return
		}
		h.swap(cs, k, p)
		k = p
	}
}

func (h *clientHeap) down(cs *clientPages, k int) bool {
	start, n := k, len(h.ids)
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if c+1 < n && h.less(cs, c+1, c) {
			c++
		}
		if !h.less(cs, c, k) {
			break
		}
		h.swap(cs, k, c)
		k = c
	}
	return k > start
}
