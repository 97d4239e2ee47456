package ledger

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// floorSet is a FAIR_SHARE template with 5 s leases refreshed every
// second and floors of half the fair share lasting floorLease.
func floorSet(capacity float64, floorLease time.Duration, gen uint64) *config.Set {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: capacity, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 5 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 5 * time.Second,
		Floor: config.FloorPolicy{Share: 0.5, Lease: floorLease}}
	return config.NewSet(gen, []*config.Template{tm}, nil)
}

// cutCase is a cut of a link for a while, with the capacity lowered
// during it (lower > 0) some time after it began.
type cutCase struct {
	cut     time.Duration
	lowerAt time.Duration // after the cut began; 0: not lowered
	lower   float64
	// cutAfter is when the cut begins (0: 30 s, once all is settled).
	cutAfter time.Duration
}

func (c cutCase) String() string {
	if c.cutAfter > 0 {
		return fmt.Sprintf("cut %v, %v after the start", c.cut, c.cutAfter)
	}
	if c.lowerAt == 0 {
		return fmt.Sprintf("cut %v", c.cut)
	}
	return fmt.Sprintf("cut %v, capacity %v after %v", c.cut, c.lower, c.lowerAt)
}

// The cases of a cut: short, longer than a lease and what was the safe
// retention (30 s), longer than the floor lease; the capacity lowered
// early in the cut (while the parent still counts the child's lease) and
// later (when it used to forget it, 65 s in).
var cutCases = []cutCase{
	{cut: 5 * time.Second},
	{cut: 120 * time.Second},
	{cut: 10 * time.Minute},
	{cut: 120 * time.Second, lowerAt: 3 * time.Second, lower: 40},
	{cut: 120 * time.Second, lowerAt: 70 * time.Second, lower: 40},
	{cut: 10 * time.Minute, lowerAt: 3 * time.Second, lower: 40},
	{cut: 10 * time.Minute, lowerAt: 70 * time.Second, lower: 40},
	// The child is cut off right after its first answer, whose request
	// carried no lease: once its floor ends the parent must forget it (it
	// kept its demand in the shares for a day, and the root's clients at
	// 50). Its floor is the larger one of the first answer, when it was
	// the only claimant: not confirmed lower before the cut, it is what
	// the parent keeps reserved meanwhile.
	{cut: 10 * time.Minute, cutAfter: 100 * time.Millisecond},
}

// TestChildCutOffNeverOverGrants is a child level cut off from its parent
// for a while (3 clients at the root and 3 at the child, each wanting 30
// of 100; leases of 5 s refreshed every second; floors of half the fair
// share for two minutes): the capacity in force (every client's lease,
// else its floor until that ends) never exceeds the capacity, however
// long the cut, and once the capacity is lowered the clients are within
// it a lease length later (the child's floor, 25, fits in 40). Before
// floors the root forgot the child 65 s into a cut and granted its share
// to its own clients while the child's clients kept their leases' level:
// 140 of 100 in force.
func TestChildCutOffNeverOverGrants(t *testing.T) {
	t.Parallel()
	for _, tc := range cutCases {
		t.Run(tc.String(), func(t *testing.T) { childCutOff(t, tc) })
	}
}

func childCutOff(t *testing.T, tc cutCase) {
	const floorLease = 2 * time.Minute
	capacity, gen := 100.0, uint64(1)
	set := floorSet(capacity, floorLease, gen)
	now := int64(1e18)
	root := newTreeNode(t, "root", nil, now)
	child := newTreeNode(t, "child", root, now)
	for i := range 3 {
		root.clients = append(root.clients, &simClient{id: fmt.Sprint("r", i), wants: 30})
		child.clients = append(child.clients, &simClient{id: fmt.Sprint("c", i), wants: 30})
	}
	all := append(append([]*simClient{}, root.clients...), child.clients...)
	inForce := func(cs []*simClient) float64 {
		sum := 0.0
		for _, c := range cs {
			sum += c.inForce(now)
		}
		return sum
	}
	const step = 50 * time.Millisecond
	start := now
	cutAt := now + int64(tc.cutAfter)
	if tc.cutAfter == 0 {
		cutAt = now + int64(30*time.Second)
	}
	restoreAt := cutAt + int64(tc.cut)
	end := restoreAt + int64(30*time.Second)
	var loweredAt int64
	var nextAsk int64
	worst, rootBest, childLeft := 0.0, 0.0, 0.0
	for now < end {
		now += int64(step)
		if tc.lowerAt > 0 && loweredAt == 0 && now >= cutAt+int64(tc.lowerAt) {
			capacity, gen, loweredAt = tc.lower, gen+1, now
			set = floorSet(capacity, floorLease, gen)
		}
		child.round(t, set, now)
		linked := now < cutAt || now >= restoreAt
		if linked && now >= nextAsk {
			child.askParent(t, set, now)
			nextAsk = now + int64(child.l.UpstreamRefresh())
		}
		root.round(t, set, now)
		held := inForce(all)
		// Leases granted before the capacity was lowered stay out until
		// they are refreshed or end.
		bound := capacity
		if loweredAt != 0 && now < loweredAt+int64(5*time.Second+2*time.Second) {
			bound = 100
		}
		worst = max(worst, held/bound)
		if held > bound*(1+1e-9)+1e-9 {
			t.Fatalf("t=%v: %.2f in force against a capacity of %v (root's clients %.2f, child's %.2f)",
				time.Duration(now-start), held, bound, inForce(root.clients), inForce(child.clients))
		}
		if now > cutAt && now < restoreAt {
			if loweredAt == 0 {
				rootBest = max(rootBest, inForce(root.clients))
			}
			childLeft = inForce(child.clients)
		}
	}
	t.Logf("%v: max in force ÷ capacity %.3f; root's clients reached %.1f during the cut; the child's held %.1f at its end", tc, worst, rootBest, childLeft)
	// Availability: once the child's lease has ended, the root hands its
	// own clients what the child's floor (25) leaves, up to their wants;
	// once the floor has ended too, their wants.
	if tc.cut > 10*time.Second && tc.lowerAt == 0 && tc.cutAfter == 0 && rootBest < 75-1e-6 {
		t.Errorf("root's clients held at most %.2f during the cut; want 75 (100 less the child's floor of 25)", rootBest)
	}
	if tc.cut > floorLease+20*time.Second && tc.lowerAt == 0 && rootBest < 90-1e-6 {
		t.Errorf("root's clients held at most %.2f during a cut longer than the child's floor; want their wants, 90", rootBest)
	}
	// A cut longer than the floor lease leaves the child nothing.
	if tc.cut > floorLease+10*time.Second && childLeft > 1e-9 {
		t.Errorf("the child's clients hold %.2f at the end of a cut longer than the floor lease", childLeft)
	}
	// After the cut, the tree converges again: fair shares of the capacity.
	share := math.Min(30, capacity/6)
	for _, c := range all {
		if math.Abs(c.inForce(now)-share) > 0.5 {
			t.Errorf("%s holds %.2f after the cut; want %.2f", c.id, c.inForce(now), share)
		}
	}
}

// TestClientCutOffNeverOverGrants is the same at one level: a client cut
// off from every coordinator (capacity 100, 3 clients wanting 50).
func TestClientCutOffNeverOverGrants(t *testing.T) {
	t.Parallel()
	for _, tc := range cutCases {
		t.Run(tc.String(), func(t *testing.T) { clientCutOff(t, tc) })
	}
}

func clientCutOff(t *testing.T, tc cutCase) {
	const floorLease = 2 * time.Minute
	capacity, gen := 100.0, uint64(1)
	set := floorSet(capacity, floorLease, gen)
	now := int64(1e18)
	n := newTreeNode(t, "root", nil, now)
	for i := range 3 {
		n.clients = append(n.clients, &simClient{id: fmt.Sprint("c", i), wants: 50})
	}
	cutOff := n.clients[0]
	cutAt := now + int64(30*time.Second)
	restoreAt := cutAt + int64(tc.cut)
	end := restoreAt + int64(30*time.Second)
	var loweredAt int64
	worst, othersBest, cutLeft := 0.0, 0.0, 0.0
	for now < end {
		now += int64(50 * time.Millisecond)
		if tc.lowerAt > 0 && loweredAt == 0 && now >= cutAt+int64(tc.lowerAt) {
			capacity, gen, loweredAt = tc.lower, gen+1, now
			set = floorSet(capacity, floorLease, gen)
		}
		if now >= cutAt && now < restoreAt {
			cutOff.next = max(cutOff.next, now+1) // asks nothing
		}
		n.round(t, set, now)
		held, others := 0.0, 0.0
		for _, c := range n.clients {
			held += c.inForce(now)
			if c != cutOff {
				others += c.inForce(now)
			}
		}
		bound := capacity
		if loweredAt != 0 && now < loweredAt+int64(7*time.Second) {
			bound = 100
		}
		worst = max(worst, held/bound)
		if held > bound*(1+1e-9)+1e-9 {
			t.Fatalf("t=%v into the cut: %.2f in force against %v (the cut-off client %.2f)", time.Duration(now-cutAt), held, bound, cutOff.inForce(now))
		}
		if now > cutAt && now < restoreAt {
			if loweredAt == 0 {
				othersBest = max(othersBest, others)
			}
			cutLeft = cutOff.inForce(now)
		}
	}
	t.Logf("%v: max in force ÷ capacity %.3f; the others reached %.1f; the cut-off client held %.1f at the end of the cut", tc, worst, othersBest, cutLeft)
	// The cut-off client's floor is half its fair share (100/3): the
	// others get the rest once its lease has ended.
	if want := 100 - 0.5*100.0/3; tc.cut > 10*time.Second && tc.lowerAt == 0 && othersBest < want-1e-6 {
		t.Errorf("the others held at most %.2f during the cut; want %.2f", othersBest, want)
	}
	if tc.cut > floorLease+10*time.Second && cutLeft > 1e-9 {
		t.Errorf("the cut-off client holds %.2f at the end of a cut longer than the floor lease", cutLeft)
	}
}
