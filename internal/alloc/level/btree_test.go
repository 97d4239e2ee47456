package level

import (
	"math"
	"math/rand/v2"
	"testing"
)

// check verifies the tree at root: every leaf at one depth, entries in
// (key, id) order, each child described by its last entry and the fresh
// sums of its entries, every node but the root at least a quarter full.
// It returns the ids in order and the depth.
func (t *btree[K]) check(tb testing.TB, root int32) (ids []int32, depth int) {
	tb.Helper()
	leafDepth := -1
	var walk func(v int32, d int)
	walk = func(v int32, d int) {
		nd := t.nodes.at(v)
		if v != root && nd.n < fan/4 || nd.n == 0 || nd.n > fan {
			tb.Fatalf("node %d (root %v) holds %d entries", v, v == root, nd.n)
		}
		if nd.leaf {
			if leafDepth >= 0 && d != leafDepth {
				tb.Fatalf("leaves at depths %d and %d", leafDepth, d)
			}
			leafDepth = d
			for i := range nd.n {
				want := *t.vals.at(nd.id[i])
				if nd.key[i] != want.key || nd.a[i] != want.a || nd.b[i] != want.b {
					tb.Fatalf("leaf %d holds %v %v %v for id %d, whose values are %+v", v, nd.key[i], nd.a[i], nd.b[i], nd.id[i], want)
				}
				ids = append(ids, nd.id[i])
			}
			return
		}
		for i := range nd.n {
			c := nd.kid[i]
			walk(c, d+1)
			cn := t.nodes.at(c)
			a, b := t.sums(c)
			if nd.key[i] != cn.key[cn.n-1] || nd.id[i] != cn.id[cn.n-1] || nd.a[i] != a || nd.b[i] != b {
				tb.Fatalf("node %d describes child %d as %v %d %v %v; its last entry is %v %d, its sums %v %v",
					v, c, nd.key[i], nd.id[i], nd.a[i], nd.b[i], cn.key[cn.n-1], cn.id[cn.n-1], a, b)
			}
		}
	}
	if root != 0 {
		walk(root, 1)
	}
	for i := 1; i < len(ids); i++ {
		x, y := *t.vals.at(ids[i-1]), *t.vals.at(ids[i])
		if !less(x.key, ids[i-1], y.key, ids[i]) {
			tb.Fatalf("entries %d and %d out of order", ids[i-1], ids[i])
		}
	}
	return ids, leafDepth
}

// TestBtree: random inserts and removes (with repeated keys, trees that
// fill and empty) keep the tree valid, and split agrees with a scan.
func TestBtree(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	const size = 3000
	var tr btree[int64]
	tr.grow(size + 1)
	var root int32
	in := map[int32]bool{}
	for step := range 60000 {
		x := int32(1 + rng.IntN(size))
		// Phases that mostly insert and mostly remove, so the tree
		// grows deep and shrinks back to empty.
		grow := step/10000%2 == 0
		if in[x] && (!grow || rng.IntN(4) == 0) {
			root = tr.remove(root, x)
			delete(in, x)
		} else if !in[x] && (grow || rng.IntN(4) == 0) {
			tr.set(x, int64(rng.IntN(50)), float64(rng.IntN(100)), float64(1+rng.IntN(3)))
			root = tr.insert(root, x)
			in[x] = true
		}
		if step%250 != 0 {
			continue
		}
		ids, _ := tr.check(t, root)
		if len(ids) != len(in) {
			t.Fatalf("step %d: tree has %d entries, %d inserted", step, len(ids), len(in))
		}
		k := int64(rng.IntN(52) - 1)
		var leA, leB, gtA, gtB float64
		for _, x := range ids {
			if e := *tr.vals.at(x); e.key <= k {
				leA, leB = leA+e.a, leB+e.b
			} else {
				gtA, gtB = gtA+e.a, gtB+e.b
			}
		}
		a, b, c, d := tr.split(root, k)
		if a != leA || b != leB || c != gtA || d != gtB {
			t.Fatalf("split(%d) = %v %v %v %v; scan %v %v %v %v", k, a, b, c, d, leA, leB, gtA, gtB)
		}
	}
	for x := range in {
		root = tr.remove(root, x)
	}
	if root != 0 {
		t.Fatalf("root %d after removing every entry", root)
	}
}

// maxDepth is the most levels a tree of n entries may have: every node but
// the root holds fan/4 entries or more and an internal root two, so depth
// d holds at least 2·(fan/4)^(d-1).
func maxDepth(n int) int {
	return 1 + int(math.Floor(math.Log(float64(n)/2)/math.Log(fan/4)))
}

// TestBtreeDepth: inserted in sorted order and in reverse (each split
// leaves half-full nodes behind), and with most entries removed again,
// a tree stays within the depth its occupancy allows.
func TestBtreeDepth(t *testing.T) {
	t.Parallel()
	n := 1 << 20
	if testing.Short() {
		n = 1 << 16
	}
	for _, reverse := range []bool{false, true} {
		var tr btree[float64]
		tr.grow(n + 1)
		var root int32
		for i := 1; i <= n; i++ {
			x := int32(i)
			if reverse {
				x = int32(n + 1 - i)
			}
			tr.set(x, float64(x), 1, 1)
			root = tr.insert(root, x)
		}
		if _, depth := tr.check(t, root); depth > maxDepth(n) {
			t.Fatalf("depth %d for %d sorted entries (reverse %v), want at most %d", depth, n, reverse, maxDepth(n))
		}
		for x := int32(1); x <= int32(n); x++ {
			if x%64 != 0 {
				root = tr.remove(root, x)
			}
		}
		if _, depth := tr.check(t, root); depth > maxDepth(n/64) {
			t.Fatalf("depth %d after removing all but %d entries (reverse %v), want at most %d", depth, n/64, reverse, maxDepth(n/64))
		}
	}
}
