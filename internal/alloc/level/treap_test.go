package level

import (
	"math"
	"math/rand/v2"
	"testing"
)

// check verifies the tree at root: keys in (key, id) order, every node's
// priority at least its children's, and subtree sums equal to sums of
// the nodes; it returns the ids in order and the depth.
func (t *treap[K]) check(tb testing.TB, root int32) (ids []int32, depth int) {
	tb.Helper()
	var walk func(x int32, d int) (a, b float64)
	walk = func(x int32, d int) (a, b float64) {
		if x == 0 {
			return 0, 0
		}
		depth = max(depth, d)
		n := &t.n[x]
		for _, c := range n.c {
			if c != 0 && prio(c) > prio(x) {
				tb.Fatalf("node %d has priority below child %d", x, c)
			}
		}
		la, lb := walk(n.c[0], d+1)
		ids = append(ids, x)
		ra, rb := walk(n.c[1], d+1)
		a, b = la+n.a+ra, lb+n.b+rb
		if math.Abs(a-n.sa) > 1e-9*math.Abs(a) || math.Abs(b-n.sb) > 1e-9*math.Abs(b) {
			tb.Fatalf("node %d: sums %v %v, nodes sum to %v %v", x, n.sa, n.sb, a, b)
		}
		return a, b
	}
	walk(root, 1)
	for i := 1; i < len(ids); i++ {
		if !t.before(ids[i-1], ids[i]) {
			tb.Fatalf("nodes %d and %d out of order", ids[i-1], ids[i])
		}
	}
	return ids, depth
}

// TestTreap: random inserts and removes (with repeated keys) keep the
// tree ordered, heap-ordered and summed, and split agrees with a scan.
func TestTreap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const size = 2000
	var tr treap[int64]
	tr.grow(size + 1)
	var root int32
	in := map[int32]bool{}
	for step := range 20000 {
		x := int32(1 + rng.IntN(size))
		if in[x] {
			root = tr.remove(root, x)
			delete(in, x)
		} else {
			n := &tr.n[x]
			n.key, n.a, n.b = int64(rng.IntN(50)), float64(rng.IntN(100)), float64(1+rng.IntN(3))
			root = tr.insert(root, x)
			in[x] = true
		}
		if step%500 != 0 {
			continue
		}
		ids, _ := tr.check(t, root)
		if len(ids) != len(in) {
			t.Fatalf("step %d: tree has %d nodes, %d inserted", step, len(ids), len(in))
		}
		k := int64(rng.IntN(52) - 1)
		var leA, leB, gtA, gtB float64
		for _, x := range ids {
			if n := tr.n[x]; n.key <= k {
				leA, leB = leA+n.a, leB+n.b
			} else {
				gtA, gtB = gtA+n.a, gtB+n.b
			}
		}
		a, b, c, d := tr.split(root, k)
		if a != leA || b != leB || c != gtA || d != gtB || tr.sumAbove(root, k) != gtA {
			t.Fatalf("split(%d) = %v %v %v %v, sumAbove %v; scan %v %v %v %v", k, a, b, c, d, tr.sumAbove(root, k), leA, leB, gtA, gtB)
		}
	}
}

// TestTreapDepth: hashed priorities balance the tree whatever the order
// of the keys; inserted in sorted order, an unbalanced tree would be a
// list.
func TestTreapDepth(t *testing.T) {
	const n = 1 << 16
	var tr treap[float64]
	tr.grow(n + 1)
	var root int32
	for x := int32(1); x <= n; x++ {
		tr.n[x].key = float64(x)
		root = tr.insert(root, x)
	}
	_, depth := tr.check(t, root)
	if limit := 4 * 16; depth > limit {
		t.Fatalf("depth %d for %d sorted keys, want at most %d", depth, n, limit)
	}
}
