package level

import (
	"cmp"
	"math"
)

// fan is the most entries a node of a btree holds; every node but a
// root holds at least fan/4.
const fan = 32

// btree is a pool of B+ trees, any number of them, each known by its root
// node (0 is the empty tree). The trees order entries: an entry is an id
// chosen by the caller (a claim's handle, a tenant's index) with a key and
// two values a and b, set with set before the id is inserted and left
// alone while it is in a tree; an id is in at most one tree at a time.
// Entries are ordered by (key, id), so equal keys are fine.
//
// Leaves hold entries; an internal node holds, for each child, the
// child's last (key, id) and the sums of a and b over the child's
// subtree. Those sums are recomputed from the child's entries whenever the
// child changes, so every sum is a fresh sum of the values now in the
// tree, never a running total carrying the rounding of past changes.
// Nodes hold up to fan entries in one array, so a million entries are
// three or four levels deep and a change touches about as many nodes,
// each a few consecutive cache lines: insert and remove cost O(fan ·
// log_fan n) operations but few cache misses. Links are int32 indices into
// one slice, not pointers, so the garbage collector has nothing to scan.
type btree[K cmp.Ordered] struct {
	vals  pool[entry[K]] // by id
	nodes pool[bnode[K]] // node 0 unused
	free  []int32        // nodes to reuse
}

type entry[K cmp.Ordered] struct {
	key  K
	a, b float64
}

// bnode is a node. Position i is an entry of a leaf (id its id, a and b
// its values) or a child of an internal node (key and id its last
// entry's, a and b the sums over its subtree, kid the child). Each field
// has its own array, so that a search reads the keys alone, a few
// consecutive cache lines. There is room for one position more than fan,
// so that an insertion fits before the node is split.
type bnode[K cmp.Ordered] struct {
	n    int
	leaf bool
	key  [fan + 1]K
	id   [fan + 1]int32
	kid  [fan + 1]int32
	a, b [fan + 1]float64
}

func less[K cmp.Ordered](k1 K, id1 int32, k2 K, id2 int32) bool {
	return k1 < k2 || k1 == k2 && id1 < id2
}

// grow makes ids below size usable.
func (t *btree[K]) grow(size int) {
	t.vals.grow(size)
}

// set sets the key and values of id, which must not be in a tree.
func (t *btree[K]) set(id int32, key K, a, b float64) { *t.vals.at(id) = entry[K]{key, a, b} }

// val returns id's key and values.
func (t *btree[K]) val(id int32) entry[K] { return *t.vals.at(id) }

// sums returns the sums of a and b over the tree at root.
func (t *btree[K]) sums(root int32) (a, b float64) {
	if root == 0 {
		return 0, 0
	}
	nd := t.nodes.at(root)
	for i := range nd.n {
		a += nd.a[i]
		b += nd.b[i]
	}
	return a, b
}

func (t *btree[K]) alloc(leaf bool) int32 {
	if t.nodes.len() == 0 {
		t.nodes.grow(1)
	}
	var v int32
	if k := len(t.free); k > 0 {
		v, t.free = t.free[k-1], t.free[:k-1]
	} else {
		v = int32(t.nodes.len())
		t.nodes.grow(int(v) + 1)
	}
	t.nodes.at(v).n, t.nodes.at(v).leaf = 0, leaf
	return v
}

// search returns the first position of nd whose (key, id) is not before
// (k, id): a count of the keys below k, read front to back, which the
// cache prefetches, then a step over the run of keys equal to k whose
// ids are below id. The ids are read only in that run (mostly empty), so
// a search reads one array, not two: in a tree too large for the cache,
// every line of a leaf not read is a miss saved.
func (nd *bnode[K]) search(k K, id int32) int {
	i := 0
	for _, x := range nd.key[:nd.n] {
		if x < k {
			i++
		}
	}
	for i < nd.n && nd.key[i] == k && nd.id[i] < id {
		i++
	}
	return i
}

// move copies m positions of src from position i to dst from position j.
// Leaves have no children: their kid is left alone, which saves
// touching its lines in the leaf, where an insert or a removal lands.
func (dst *bnode[K]) move(j int, src *bnode[K], i, m int) {
	copy(dst.key[j:j+m], src.key[i:i+m])
	copy(dst.id[j:j+m], src.id[i:i+m])
	if !src.leaf {
		copy(dst.kid[j:j+m], src.kid[i:i+m])
	}
	copy(dst.a[j:j+m], src.a[i:i+m])
	copy(dst.b[j:j+m], src.b[i:i+m])
}

// open makes room at position i.
func (nd *bnode[K]) open(i int) {
	nd.move(i+1, nd, i, nd.n-i)
	nd.n++
}

// close removes position i.
func (nd *bnode[K]) close(i int) {
	nd.move(i, nd, i+1, nd.n-i-1)
	nd.n--
}

// setPos sets position i (kid only in an internal node; see move).
func (nd *bnode[K]) setPos(i int, key K, id, kid int32, a, b float64) {
	nd.key[i], nd.id[i], nd.a[i], nd.b[i] = key, id, a, b
	if !nd.leaf {
		nd.kid[i] = kid
	}
}

// place sets position i of internal node v to describe child c (not
// empty): its last entry and its sums.
func (t *btree[K]) place(v int32, i int, c int32) {
	a, b := t.sums(c)
	cn := t.nodes.at(c)
	t.nodes.at(v).setPos(i, cn.key[cn.n-1], cn.id[cn.n-1], c, a, b)
}

// insert adds id to the tree at root and returns the new root.
func (t *btree[K]) insert(root, id int32) int32 {
	if root == 0 {
		root = t.alloc(true)
	}
	if s := t.ins(root, id); s != 0 {
		r := t.alloc(false)
		t.nodes.at(r).n = 2
		t.place(r, 0, root)
		t.place(r, 1, s)
		root = r
	}
	return root
}

// ins adds id below node v and returns the node v's upper half was split
// off into, or 0.
func (t *btree[K]) ins(v, id int32) int32 {
	e := *t.vals.at(id)
	nd := t.nodes.at(v)
	i := nd.search(e.key, id)
	if nd.leaf {
		nd.open(i)
		nd.setPos(i, e.key, id, 0, e.a, e.b)
	} else {
		switch {
		case i == nd.n:
			i-- // after every entry: into the last child
		case i > 0 && t.nodes.at(nd.kid[i]).leaf && less(e.key, id, t.nodes.at(nd.kid[i]).key[0], t.nodes.at(nd.kid[i]).id[0]):
			// Between two leaves: at the end of the left one, where a run
			// of equal keys it extends ends (see the split below).
			i--
		}
		c := nd.kid[i]
		s := t.ins(c, id)
		nd = t.nodes.at(v) // ins may have grown the pool
		t.place(v, i, c)
		if s != 0 {
			nd.open(i + 1)
			t.place(v, i+1, s)
		}
	}
	if nd.n <= fan {
		return 0
	}
	r := t.alloc(nd.leaf)
	nd, rn := t.nodes.at(v), t.nodes.at(r)
	// Halves, but for a leaf whose new entry extends a run of equal keys
	// at its end (claims wanting the same are ordered by handle, and new
	// handles mostly come in order): splitting such runs in half left
	// every leaf half full. The split is right after the new entry, as
	// far as each side keeps the fewest entries a node may: the run's
	// next entries then go at the end of the left leaf (see the descent
	// above), which fills before it splits again.
	h := nd.n / 2
	if nd.leaf && i > 0 && nd.key[i-1] == e.key && (i == nd.n-1 || nd.key[i+1] != e.key) {
		h = min(max(i+1, fan/4), nd.n-fan/4)
	}
	rn.move(0, nd, h, nd.n-h)
	rn.n, nd.n = nd.n-h, h
	return r
}

// remove takes id out of the tree at root (it must be in it) and returns
// the new root.
func (t *btree[K]) remove(root, id int32) int32 {
	if root == 0 {
		return 0
	}
	t.del(root, id)
	for {
		nd := t.nodes.at(root)
		switch {
		case nd.n == 0:
			t.free = append(t.free, root)
			return 0
		case !nd.leaf && nd.n == 1:
			t.free = append(t.free, root)
			root = nd.kid[0]
		default:
			return root
		}
	}
}

// del removes id below node v.
func (t *btree[K]) del(v, id int32) {
	e := *t.vals.at(id)
	nd := t.nodes.at(v)
	i := nd.search(e.key, id)
	if nd.leaf {
		if i < nd.n && nd.id[i] == id {
			nd.close(i)
		}
		return
	}
	if i == nd.n {
		i--
	}
	c := nd.kid[i]
	t.del(c, id)
	switch cn := t.nodes.at(c); {
	case cn.n >= fan/4:
		t.place(v, i, c)
	case nd.n > 1:
		t.rebalance(v, i)
	case cn.n == 0:
		// The only child of a root, now empty.
		nd.close(i)
		t.free = append(t.free, c)
	default:
		t.place(v, i, c)
	}
}

// rebalance refills child i of v, below fan/4 entries, from a neighbour:
// the two are merged if they fit in one node, else their entries are
// shared evenly.
func (t *btree[K]) rebalance(v int32, i int) {
	nd := t.nodes.at(v)
	if i+1 == nd.n {
		i--
	}
	l, r := nd.kid[i], nd.kid[i+1]
	ln, rn := t.nodes.at(l), t.nodes.at(r)
	if ln.n+rn.n <= fan {
		ln.move(ln.n, rn, 0, rn.n)
		ln.n += rn.n
		t.free = append(t.free, r)
		nd.close(i + 1)
		t.place(v, i, l)
		return
	}
	h := (ln.n + rn.n) / 2
	if ln.n < h {
		m := h - ln.n
		ln.move(ln.n, rn, 0, m)
		rn.move(0, rn, m, rn.n-m)
		ln.n, rn.n = h, rn.n-m
	} else {
		m := ln.n - h
		rn.move(m, rn, 0, rn.n)
		rn.move(0, ln, h, m)
		ln.n, rn.n = h, rn.n+m
	}
	t.place(v, i, l)
	t.place(v, i+1, r)
}

// split returns the sums of a and b over the entries of the tree at root
// whose key is at most k (le) and over those whose key is above it (gt),
// each summed directly rather than as a difference from the total.
func (t *btree[K]) split(root int32, k K) (leA, leB, gtA, gtB float64) {
	for v := root; v != 0; {
		nd := t.nodes.at(v)
		i := 0
		for ; i < nd.n && nd.key[i] <= k; i++ {
			leA += nd.a[i]
			leB += nd.b[i]
		}
		v = 0
		rest := i
		if i < nd.n && !nd.leaf {
			v = nd.kid[i] // its last key is above k, its first may not be
			rest++
		}
		for j := rest; j < nd.n; j++ {
			gtA += nd.a[j]
			gtB += nd.b[j]
		}
	}
	return leA, leB, gtA, gtB
}

// eachAbove calls fn with the id of every entry of the tree at root whose
// key is above k, in order, until fn returns false; it reports whether
// fn never did. A subtree whose last key is at most k is skipped, so it
// costs O(log n) plus the entries visited.
func (t *btree[K]) eachAbove(root int32, k K, fn func(id int32) bool) bool {
	if root == 0 {
		return true
	}
	nd := t.nodes.at(root)
	for i := range nd.n {
		switch {
		case nd.key[i] <= k:
		case nd.leaf:
			if !fn(nd.id[i]) {
				return false
			}
		default:
			if !t.eachAbove(nd.kid[i], k, fn) {
				return false
			}
		}
	}
	return true
}

// fairLevel returns the water level of the tree at root, whose entries
// are claims (a Wants, b Weight, key a/b) wanting more than capacity in
// all: the L at which min(Wants, Weight·L) over the claims sums to
// capacity.
//
// Handing out at the level of entry x's key gives the claims up to x their
// wants (a prefix sum) and the others Weight·key (a suffix sum); that is
// nondecreasing in x, so one descent finds the last x at whose level no
// more than capacity is handed out: in a node, the first child whose last
// entry hands out too much holds the answer's successor. L follows from
// the sums at x as in alloc's waterLevel: (capacity − wants below) /
// weight above.
func fairLevel(t *btree[float64], root int32, capacity float64) float64 {
	_, total := t.sums(root)
	var before, after float64 // wants of the claims before the node; weight of those after
	fixed, above := 0.0, total
	for v := root; v != 0; {
		nd := t.nodes.at(v)
		var suffix [fan + 2]float64 // weight of the node's positions from i on
		for i := nd.n - 1; i >= 0; i-- {
			suffix[i] = suffix[i+1] + nd.b[i]
		}
		next, le := int32(0), before
		for i := range nd.n {
			upTo, gt := le+nd.a[i], after+suffix[i+1]
			if upTo+gt*nd.key[i] <= capacity {
				fixed, above, le = upTo, gt, upTo
				continue
			}
			if !nd.leaf {
				next, before, after = nd.kid[i], le, gt
			}
			break
		}
		v = next
	}
	if above == 0 {
		return math.Inf(1)
	}
	return (capacity - fixed) / above
}
