package level

import "cmp"

// treap is a pool of nodes forming any number of treaps (randomized
// balanced search trees), each known by its root. Every node carries two
// values, a and b, and the sums of a and b over its subtree; those sums are
// recomputed from the children whenever a subtree changes, so a sum is
// always a fresh sum of the values now in the tree, never a running total
// that carries the rounding of past changes.
//
// Nodes are ordered by (key, id), so equal keys are fine. Node 0 is the
// empty tree: its sums are zero and it is never written. Node ids are
// chosen by the caller (a claim's handle, a tenant's index) and the pool
// only holds them; a node belongs to at most one tree at a time.
//
// A node's priority is a hash of its id rather than a stored random
// number: the pool keeps no random state, runs are reproducible, and ids
// (handed out in arrival order) are unrelated to keys, so the trees are
// balanced in expectation: depth O(log n), insert and remove O(log n).
// Links are int32 indices, not pointers, so the garbage collector has
// nothing to scan in a pool of a million nodes.
type treap[K cmp.Ordered] struct {
	n []node[K]
}

type node[K cmp.Ordered] struct {
	key    K
	a, b   float64  // the node's own values
	sa, sb float64  // sums over the node's subtree
	c      [2]int32 // children: c[0] before the node, c[1] after
}

// grow makes ids below size usable.
func (t *treap[K]) grow(size int) {
	if len(t.n) < size {
		t.n = append(t.n, make([]node[K], size-len(t.n))...)
	}
}

// prio is node x's heap priority: the splitmix64 finaliser of its id.
func prio(x int32) uint64 {
	z := uint64(x) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// before orders nodes by key, then id.
func (t *treap[K]) before(x, y int32) bool {
	kx, ky := t.n[x].key, t.n[y].key
	return kx < ky || kx == ky && x < y
}

// side is the child of y on whose side x belongs: 0 before, 1 after.
func (t *treap[K]) side(x, y int32) int {
	if t.before(x, y) {
		return 0
	}
	return 1
}

// pull recomputes x's subtree sums from its children.
func (t *treap[K]) pull(x int32) {
	n := &t.n[x]
	l, r := &t.n[n.c[0]], &t.n[n.c[1]]
	n.sa = l.sa + n.a + r.sa
	n.sb = l.sb + n.b + r.sb
}

// insert adds node x (its key, a and b set) to the tree at root and
// returns the new root.
func (t *treap[K]) insert(root, x int32) int32 {
	if root == 0 {
		n := &t.n[x]
		n.c, n.sa, n.sb = [2]int32{}, n.a, n.b
		return x
	}
	d := t.side(x, root)
	c := t.insert(t.n[root].c[d], x)
	t.n[root].c[d] = c
	if prio(c) > prio(root) {
		return t.rotate(root, d)
	}
	t.pull(root)
	return root
}

// remove takes node x out of the tree at root (x must be in it, with the
// key it was inserted with) and returns the new root.
func (t *treap[K]) remove(root, x int32) int32 {
	switch {
	case root == 0:
		return 0
	case root == x:
		return t.merge(t.n[x].c[0], t.n[x].c[1])
	}
	d := t.side(x, root)
	c := t.remove(t.n[root].c[d], x)
	t.n[root].c[d] = c
	t.pull(root)
	return root
}

// merge joins two trees, every node of x before every node of y.
func (t *treap[K]) merge(x, y int32) int32 {
	switch {
	case x == 0:
		return y
	case y == 0:
		return x
	case prio(x) > prio(y):
		c := t.merge(t.n[x].c[1], y)
		t.n[x].c[1] = c
		t.pull(x)
		return x
	default:
		c := t.merge(x, t.n[y].c[0])
		t.n[y].c[0] = c
		t.pull(y)
		return y
	}
}

// rotate lifts y's child on side d above y and returns it.
func (t *treap[K]) rotate(y int32, d int) int32 {
	x := t.n[y].c[d]
	t.n[y].c[d] = t.n[x].c[1-d]
	t.n[x].c[1-d] = y
	t.pull(y)
	t.pull(x)
	return x
}

// sumAbove returns the sum of a over the nodes of the tree at root whose
// key is above k. O(depth).
func (t *treap[K]) sumAbove(root int32, k K) float64 {
	var sum float64
	for x := root; x != 0; {
		n := &t.n[x]
		if n.key > k {
			sum += n.a + t.n[n.c[1]].sa
			x = n.c[0]
		} else {
			x = n.c[1]
		}
	}
	return sum
}

// split returns the sums of a and b over the nodes of the tree at root
// whose key is at most k (le) and over those whose key is above it (gt),
// each summed directly rather than as a difference from the total.
// O(depth).
func (t *treap[K]) split(root int32, k K) (leA, leB, gtA, gtB float64) {
	for x := root; x != 0; {
		n := &t.n[x]
		if n.key <= k {
			l := &t.n[n.c[0]]
			leA += l.sa + n.a
			leB += l.sb + n.b
			x = n.c[1]
		} else {
			r := &t.n[n.c[1]]
			gtA += n.a + r.sa
			gtB += n.b + r.sb
			x = n.c[0]
		}
	}
	return leA, leB, gtA, gtB
}
