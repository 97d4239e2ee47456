package ledger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/allot/allot/proto/allotpb"
)

// TestDetailTopAndSearch: with 10,000 claimants a Detail lists only the
// asked number, the largest leases first, counts every match of a
// case-insensitive search, and sums grants and wants over all of them.
func TestDetailTopAndSearch(t *testing.T) {
	const n = 10_000
	set := fairTemplate(1e6)
	now := int64(1e18)
	l := newViewLedger(now)
	for i := range n {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprintf("Client-%05d", i),
			Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: float64(1 + i%100), Priority: int32(i % 3)}}}
		if _, err := l.Get(now, set, req); err != nil {
			t.Fatal(err)
		}
	}
	settleRound(l, now)

	d, ok := l.Detail(now, "r", 20, "")
	if !ok {
		t.Fatal("no detail for r")
	}
	// Capacity 1e6 covers every want (sum 505,000): grants equal wants.
	if d.Claimants != n || d.Matching != n || len(d.Top) != 20 || d.Granted != 505_000 || d.Wants != 505_000 || d.Capacity != 1e6 {
		t.Fatalf("claimants %d matching %d top %d granted %v wants %v capacity %v", d.Claimants, d.Matching, len(d.Top), d.Granted, d.Wants, d.Capacity)
	}
	for k, c := range d.Top {
		if c.Has != 100 || c.Wants != 100 || c.Expiry.UnixNano() <= now || c.Weight != 1 {
			t.Fatalf("top[%d] = %+v, want a lease of 100", k, c)
		}
		if k > 0 && c.ID < d.Top[k-1].ID {
			t.Fatalf("ties not ordered by id: %s after %s", c.ID, d.Top[k-1].ID)
		}
	}
	if d.Top[0].ID != "Client-00099" || d.Top[0].Priority != 0 || d.Top[19].ID != "Client-01999" {
		t.Fatalf("top[0] = %+v, top[19] = %+v, want Client-00099 (priority 0) and Client-01999", d.Top[0], d.Top[19])
	}
	// Search ignores case; ids 09000-09999 contain "t-09".
	d, _ = l.Detail(now, "r", 5, "T-09")
	if d.Matching != 1000 || len(d.Top) != 5 {
		t.Fatalf("search: matching %d top %d, want 1000 and 5", d.Matching, len(d.Top))
	}
	// Asking for more than MaxViewClaimants gets MaxViewClaimants.
	if d, _ = l.Detail(now, "r", 1<<20, ""); len(d.Top) != MaxViewClaimants {
		t.Fatalf("top %d, want %d", len(d.Top), MaxViewClaimants)
	}
	if _, ok := l.Detail(now, "unknown", 10, ""); ok {
		t.Fatal("detail of an unknown resource")
	}
	views, total := l.Resources(now, 10)
	if total != 1 || len(views) != 1 || views[0].ID != "r" || views[0].Algorithm != "FAIR_SHARE" || views[0].Ceiling == nil {
		t.Fatalf("resources %+v total %d", views, total)
	}
	// After the leases end, nothing is granted or wanted any more, though
	// the lapsed records are still counted.
	later := now + int64(time.Hour)
	if v, _ := l.Resources(later, 1); v[0].Granted != 0 || v[0].Wants != 0 {
		t.Fatalf("after expiry: %+v", v[0])
	}
}

// BenchmarkDetail10k is the cost on the round loop of one dashboard
// update of a resource with 10,000 claimants: top 50, with and without a
// search.
func BenchmarkDetail10k(b *testing.B) {
	set := fairTemplate(1e6)
	now := int64(1e18)
	l := newViewLedger(now)
	for i := range 10_000 {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprintf("client-%05d", i),
			Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: float64(1 + i%100)}}}
		if _, err := l.Get(now, set, req); err != nil {
			b.Fatal(err)
		}
	}
	settleRound(l, now)
	for _, q := range []string{"", "-09"} {
		b.Run("search="+q, func(b *testing.B) {
			for b.Loop() {
				l.Detail(now, "r", 50, q)
			}
		})
	}
}

// TestTopK: the kept values are the k smallest, in order, whatever the
// order they are offered in, for k from 0 past the number offered.
func TestTopK(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := rng.IntN(60)
		vals := make([]int, n)
		for i := range vals {
			vals[i] = rng.IntN(1000)*100 + i // distinct
		}
		k := rng.IntN(n + 5)
		top := newTopK(min(k, n), func(a, b int) bool { return a < b })
		for _, v := range vals {
			top.offer(v)
		}
		want := slices.Clone(vals)
		slices.Sort(want)
		want = want[:min(k, n)]
		if got := top.sorted(); !slices.Equal(got, want) {
			t.Fatalf("trial %d: k %d of %v: got %v, want %v", trial, k, vals, got, want)
		}
	}
}

// TestResourcesMostOutstandingFirst: Resources lists the n resources with
// the most outstanding, most first, and counts them all.
func TestResourcesMostOutstandingFirst(t *testing.T) {
	set := fairTemplate(1e6)
	now := int64(1e18)
	l := newViewLedger(now)
	for i := range 30 {
		req := &allotpb.GetCapacityRequest{ClientId: "c", Resource: []*allotpb.ResourceRequest{{ResourceId: fmt.Sprintf("r%02d", i), Wants: float64(1 + (i*7)%30)}}}
		if _, err := l.Get(now, set, req); err != nil {
			t.Fatal(err)
		}
	}
	settleRound(l, now)
	views, total := l.Resources(now, 5)
	if total != 30 || len(views) != 5 {
		t.Fatalf("%d views of %d", len(views), total)
	}
	for k, v := range views {
		if v.Outstanding != float64(30-k) || v.Granted != v.Outstanding {
			t.Fatalf("views[%d] = %+v, want outstanding %d", k, v, 30-k)
		}
	}
}

// newViewLedger is a started ledger of a new deployment.
func newViewLedger(now int64) *Ledger {
	l := New(Config{HolderKey: testHolderKey(), Node: "root", ServerID: "root", Term: 1})
	p, _ := l.Start(now, Prior{Kind: PriorNew})
	l.Commit(now, p, nil)
	return l
}

// settleRound ends a round whose requests were applied: the record is
// stored at once (then the raised ceiling), and everything is allocated.
func settleRound(l *Ledger, now int64) {
	for range 2 {
		if p := l.Propose(now); p != nil {
			l.Commit(now, p, nil)
		}
	}
	l.Allocate(now)
	l.EndRound()
}

// TestViewCountsStarvedWants: claimants granted nothing yet still count
// in Wants, so starvation shows: one whose share is held by another's
// lease, and one whose first request waits for a record write.
func TestViewCountsStarvedWants(t *testing.T) {
	set := fairTemplate(10)
	now := int64(1e18)
	l := newViewLedger(now)
	get := func(id string) {
		req := &allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: 10}}}
		if _, err := l.Get(now, set, req); err != nil {
			t.Fatal(err)
		}
	}
	get("a")
	settleRound(l, now)
	now += int64(time.Millisecond)
	get("b")
	settleRound(l, now)
	now += int64(time.Millisecond)
	get("c")
	if l.Propose(now) == nil { // the record is not stored yet
		t.Fatal("no record to write for a new claimant")
	}
	l.Allocate(now)
	l.EndRound()
	d, _ := l.Detail(now, "r", 10, "")
	if d.Granted != 10 || d.Wants != 30 || len(d.Top) != 3 || d.Top[1].Has != 0 || d.Top[2].Has != 0 {
		t.Fatalf("granted %v wants %v top %+v", d.Granted, d.Wants, d.Top)
	}
}

// TestDetailChildren: a child node's priority bands are summed into one
// child, listed by name beside the claimants.
func TestDetailChildren(t *testing.T) {
	set := fairTemplate(1000)
	now := int64(1e18)
	l := newViewLedger(now)
	for _, child := range []string{"west", "east"} {
		rr := &allotpb.ServerCapacityResourceRequest{ResourceId: "r", Wants: []*allotpb.PriorityBandAggregate{
			{Priority: 0, NumClients: 3, Wants: 30}, {Priority: 2, NumClients: 2, Wants: 20}}}
		if _, err := l.ServerGet(now, set, &allotpb.GetServerCapacityRequest{ServerId: child, Resource: []*allotpb.ServerCapacityResourceRequest{rr}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: "local", Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: 5}}}); err != nil {
		t.Fatal(err)
	}
	settleRound(l, now)
	d, _ := l.Detail(now, "r", 10, "")
	want := []ChildView{{Node: "east", Has: 50, Wants: 50, Clients: 5, Bands: 2}, {Node: "west", Has: 50, Wants: 50, Clients: 5, Bands: 2}}
	if !slices.Equal(d.Children, want) || d.Claimants != 5 {
		t.Fatalf("children %+v, %d claimants", d.Children, d.Claimants)
	}
	if d, _ = l.Detail(now, "r", 10, "wes"); d.Matching != 2 || !d.Top[0].Node || d.Top[0].ID != "west" {
		t.Fatalf("search for a child: %+v", d.Top)
	}
}

// BenchmarkResources100k is the cost on the round loop of the resource
// list of one dashboard update on a node with 10,000 resources of 10
// claimants each.
func BenchmarkResources100k(b *testing.B) {
	set := fairTemplate(1e6)
	now := int64(1e18)
	l := newViewLedger(now)
	for i := range 10 {
		req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("client-", i)}
		for r := range 10_000 {
			req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: fmt.Sprint("r", r), Wants: float64(1 + r%50)})
		}
		if _, err := l.Get(now, set, req); err != nil {
			b.Fatal(err)
		}
	}
	settleRound(l, now)
	for b.Loop() {
		l.Resources(now, 100)
	}
}
