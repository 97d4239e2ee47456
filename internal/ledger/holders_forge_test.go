package ledger

import (
	"fmt"
	"hash/fnv"
	"slices"
	"testing"
	"time"
)

// fnv64a is the public, unkeyed hash a holder digest once summed: what
// a forger can compute for any id.
func fnv64a(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// forgeSum finds one id from each of the eight lists (named by forgeID) such that the sum of the hashes of those of pos, minus
// those of neg, is target mod 2^64: Wagner's generalized birthday
// algorithm (CRYPTO 2002). Each of three levels joins lists pairwise on
// 16, then 32 more bits of the sum being zero, then the last 32; with
// 2^17 ids a list that leaves about 2^8 solutions, at a cost of about
// 2^20 hashes and sorts of 2^20 sums: well under a second, where a
// single id of a given 64-bit hash would take 2^64 tries.
func forgeSum(hash func(string) uint64, target uint64, pos, neg []string, perList int) (posIDs, negIDs []string, ok bool) {
	type node struct {
		sum  uint64
		l, r int32 // children in the level below (leaves: l is the id's number)
	}
	prefixes := append(slices.Clone(pos), neg...)
	if len(prefixes) != 8 {
		panic("forgeSum takes eight lists")
	}
	levels := [4][][]node{}
	for k, p := range prefixes {
		list := make([]node, perList)
		for i := range list {
			h := hash(forgeID(p, i))
			if k >= len(pos) {
				h = -h
			}
			if k == 0 {
				h -= target
			}
			list[i] = node{sum: h, l: int32(i)}
		}
		levels[0] = append(levels[0], list)
	}
	// join returns the pairs of a and b whose sums are 0 under mask.
	join := func(a, b []node, mask uint64) []node {
		key := func(x uint64) uint64 { return x & mask }
		slices.SortFunc(a, func(x, y node) int { return cmpU64(key(x.sum), key(y.sum)) })
		var out []node
		for j, y := range b {
			want := key(-y.sum)
			i, _ := slices.BinarySearchFunc(a, want, func(x node, w uint64) int { return cmpU64(key(x.sum), w) })
			for ; i < len(a) && key(a[i].sum) == want; i++ {
				out = append(out, node{sum: a[i].sum + y.sum, l: int32(i), r: int32(j)})
			}
		}
		return out
	}
	for lv, mask := range []uint64{1<<16 - 1, 1<<32 - 1, ^uint64(0)} {
		below := levels[lv]
		for k := 0; k < len(below); k += 2 {
			levels[lv+1] = append(levels[lv+1], join(below[k], below[k+1], mask))
		}
	}
	if len(levels[3][0]) == 0 {
		return nil, nil, false
	}
	// Walk a solution down to its eight leaves, left to right.
	var ids []string
	var walk func(lv, list int, n node)
	walk = func(lv, list int, n node) {
		if lv == 0 {
			ids = append(ids, forgeID(prefixes[list], int(n.l)))
			return
		}
		walk(lv-1, 2*list, levels[lv-1][2*list][n.l])
		walk(lv-1, 2*list+1, levels[lv-1][2*list+1][n.r])
	}
	walk(3, 0, levels[3][0][0])
	return slices.Clip(ids[:len(pos)]), ids[len(pos):], true
}

// forgeID is a forger's candidate id number i of a list: the list's
// name and a scrambled number. The scrambling matters: FNV-1a hashes of
// ids that differ in a few decimal digits differ by small multiples of
// powers of its prime, so their sums cover too small a set for the
// search to find a given target.
func forgeID(list string, i int) string {
	z := uint64(i) + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return fmt.Sprintf("%s-%016x", list, z^z>>31)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// The forged ids of TestForgedHolderDigestDoesNotEndLearning: the
// fake ones (x), and the tenant's own holders (m) they stand for with
// victim v. forgeSum found them (TestForgeSumFindsForgery).
var (
	forgedX = []string{"x0-77767fcbc06a8c0a", "x1-fb60252bf63de920", "x2-03f9b3b3f04bbde7", "x3-728bc1fcdd42eb59", "x4"}
	forgedM = []string{"m0-fbd622e9a787b8a2", "m1-4fe2a1fb226849c2", "m2-605fd1b61e380714", "m3-ab041e61dab873f9"}
)

// forgeTarget is what the eight searched ids must sum to: victim v's
// hash (its id is known, and so is the hash) less that of x4, which is
// fixed, so that sum(x) = H(v) + sum(m).
func forgeTarget() uint64 { return fnv64a("v") - fnv64a("x4") }

// The search finds the forged ids in about a second (several under the
// race detector): an attack anyone can run.
func TestForgeSumFindsForgery(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a search of 2^20 hashes")
	}
	x, m, ok := forgeSum(fnv64a, forgeTarget(), []string{"x0", "x1", "x2", "x3"}, []string{"m0", "m1", "m2", "m3"}, 1<<17)
	if !ok {
		t.Fatal("no forgery found")
	}
	if !slices.Equal(append(x, "x4"), forgedX) || !slices.Equal(m, forgedM) {
		t.Fatalf("found %v for %v, the test's ids are %v for %v", x, m, forgedX, forgedM)
	}
}

// A tenant forges the holder digest: its own four holders and a
// victim's stay away after a takeover (the victim's refresh is late, or
// it is cut off; the tenant's simply keep using their leases), while
// five ids it made up report tiny leases. The ids are chosen so that
// their count and hash sum equal the promise's, which is easy for any
// unkeyed hash summed mod 2^64: choose the tenant's own holder ids and
// the fake ones together (Wagner's algorithm, forgeSum). With the
// holders' ids not in the record (the tenant opens enough idle client
// records for that) only the count and digest tell, and a successor that
// took them at their word would end learning at once and lease out the
// whole capacity again while the silent holders' leases still run. It
// must not: at any time the leases in force stay within the capacity.
func TestForgedHolderDigestDoesNotEndLearning(t *testing.T) {
	x, m := forgedX, forgedM
	var fake, promised uint64
	for _, id := range x {
		fake += fnv64a(id)
	}
	for _, id := range append([]string{"v"}, m...) {
		promised += fnv64a(id)
	}
	if fake != promised {
		t.Fatalf("forged ids %v sum to %x, the holders' %x", x, fake, promised)
	}

	start := int64(1e18)
	lead := newHolderHarness(t, 1, start, Prior{Kind: PriorNew})
	for i := range 200 {
		lead.enqueue(fmt.Sprintf("idle-%d", i), 0) // so the record lists no ids
	}
	held := map[string]float64{}
	if held["v"] = lead.ask("v", 30, 0); held["v"] != 30 {
		t.Fatalf("v got %v", held["v"])
	}
	for _, id := range m {
		if held[id] = lead.ask(id, 10, 0); held[id] != 10 {
			t.Fatalf("%s got %v", id, held[id])
		}
	}
	e := lead.last.GetResources()["r"]
	if e.GetHolders() != 5 || e.GetHoldersUntil() == nil || len(e.GetHolderIds()) != 0 {
		t.Fatalf("record entry %v: the test needs a promise of 5 holders without their ids", e)
	}
	leaseEnd := lead.now + int64(10*time.Second) // the lease length: every lease above runs until at least then

	// The leader dies; nobody of the holders comes back to the successor
	// yet, the forged ids do.
	succ := newHolderHarness(t, 2, lead.now+int64(time.Second), Prior{Kind: PriorRecord, Record: lead.last})
	for _, id := range x {
		held[id] = succ.ask(id, 0.001, 0.001)
	}
	held["c"] = succ.ask("c", 100, 0)
	if succ.now >= leaseEnd {
		t.Fatalf("the test took too long: the holders' leases have ended")
	}
	var sum float64
	for _, c := range held {
		sum += c
	}
	if sum > 100+1e-9 {
		t.Fatalf("%v in force out of a capacity of 100: the successor ended learning on forged ids %v (%v for newcomer c)", sum, x, held["c"])
	}
	if r := succ.l.resources["r"]; !r.learning(succ.now) {
		t.Fatal("the successor ended learning on forged ids")
	}
}

// BenchmarkHolderHash compares the keyed hash of a client id with the
// unkeyed FNV-1a the digest once summed, on a realistic agent id.
func BenchmarkHolderHash(b *testing.B) {
	id := "host-0042.example:10042:1a2b3c4d"
	key := testHolderKey()
	var sink uint64
	b.Run("fnv1a", func(b *testing.B) {
		for b.Loop() {
			sink += fnv64a(id)
		}
	})
	b.Run("keyed", func(b *testing.B) {
		for b.Loop() {
			sink += holderHash(&key, id)
		}
	})
	_ = sink
}
