package bench

import (
	"context"
	"math"
	"testing"
	"time"
)

// TestTreeNoOvershoot runs a short scenario 7 (13 nats-servers joined by
// leaf nodes, 45 agents) with a spike, a middle node's leader lost and a
// region's leaf link cut and restored, and checks what must hold whatever
// the timing: leases were handed out at every level, none negative, and
// the sum of unexpired client leases never above the root's capacity.
// Utilization and reconvergence are reported, not asserted.
func TestTreeNoOvershoot(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 13 nats-servers and 45 agents for about 20 s")
	}
	sc := Scenario7(true)
	sc.Duration = 16 * time.Second
	sc.Events = []TreeEvent{
		{At: 3 * time.Second, What: "spike", Client: 4},
		{At: 5 * time.Second, What: "leader-lost", Node: sc.ReplicaNode},
		{At: 9 * time.Second, What: "cut", Node: treeNodeName(1, 2, -1)},
		{At: 12 * time.Second, What: "restore", Node: treeNodeName(1, 2, -1)},
		{At: 13 * time.Second, What: "unspike", Client: 4},
	}
	// The scenario is 16s of virtual events on real servers; its setup of
	// a dozen servers and coordinators took the test to 165s at load 18.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := SimulateTree(ctx, &Env{}, sc)
	if err != nil {
		t.Fatal(err)
	}
	for _, lv := range out.Levels {
		if lv.Leases == 0 {
			t.Errorf("no leases observed at level %s", lv.Level)
		}
		t.Logf("%s: %d leases, %d overshoots, max %.4f× capacity", lv.Level, lv.Leases, lv.OvershootEvents, lv.MaxLeaseRatio)
	}
	if out.NegativeGrants != 0 {
		t.Errorf("%d negative grants", out.NegativeGrants)
	}
	if out.MaxLeaseRatio > 1+simOverTol {
		t.Errorf("%d overshoots: the sum of unexpired client leases reached %.4f× the root's capacity", out.OvershootEvents, out.MaxLeaseRatio)
	}
	t.Logf("setup %.1fs, run %.1fs; utilization %.4f, Jain %.4f (tree %.4f), failover %.2fs, in force max %.4f×, safe samples %d",
		out.SetupS, out.RunS, out.Utilization, out.Jain, out.JainTree, out.FailoverS, out.MaxInForceRatio, out.SafeSamples)
	t.Logf("longest underuse %+v; nodes leasing out more than their lease in %d samples, by up to %.2f", out.Underuse, out.ShortfallSamples, out.MaxShortfall)
	for _, sh := range out.Shifts {
		t.Logf("shift %s %s at %.1fs: reconverged %v", sh.What, sh.On, sh.AtS, sh.ReconvergeS)
	}
}

// The overshoot check counts a lease from when it arrives until it
// expires or its holder's next lease replaces it, per level: two clients
// whose leases overlap above capacity are one overshoot; a shrink that
// arrives first, or a lease that expired, is none.
func TestTreeOvershootCounted(t *testing.T) {
	const sec = int64(time.Second)
	at := func(level int, who string, arrival, expiry int64, capacity float64) leaseSeen {
		return leaseSeen{level: level, who: who, arrival: arrival * sec, expiry: expiry * sec, capacity: capacity}
	}
	client := treeLevels - 1
	o := &TreeOutcome{}
	o.analyze([]leaseSeen{
		at(client, "0", 1, 10, 300),
		at(client, "1", 2, 10, 200),  // 500: at capacity
		at(client, "0", 3, 10, 250),  // 450
		at(client, "1", 4, 10, 260),  // 510: over
		at(client, "2", 5, 10, 10),   // 520: still the same overshoot
		at(client, "1", 6, 10, 100),  // 360
		at(client, "3", 11, 20, 499), // the others expired
		at(0, "region-0", 1, 10, 400),
		at(0, "region-1", 2, 10, 100),
	})
	lv := o.Levels[client]
	if lv.OvershootEvents != 1 || math.Abs(lv.MaxLeaseRatio-520.0/treeCapacity) > 1e-12 || lv.Leases != 7 {
		t.Errorf("client level: %+v, want 1 overshoot up to %v over 7 leases", lv, 520.0/treeCapacity)
	}
	if o.OvershootEvents != 1 || o.MaxLeaseRatio != lv.MaxLeaseRatio {
		t.Errorf("headline %d overshoots, max %v; want the client level's", o.OvershootEvents, o.MaxLeaseRatio)
	}
	if root := o.Levels[0]; root.OvershootEvents != 0 || root.MaxLeaseRatio != 1 {
		t.Errorf("root level: %+v, want no overshoot, max 1", root)
	}
}

// A scenario naming what the tree does not have is refused before
// anything starts.
func TestTreeScenarioChecked(t *testing.T) {
	good := Scenario7(true)
	if err := good.check(); err != nil {
		t.Fatalf("scenario 7: %v", err)
	}
	for name, edit := range map[string]func(*TreeScenario){
		"no regions":       func(sc *TreeScenario) { sc.Regions = 0 },
		"too many":         func(sc *TreeScenario) { sc.Clients = 1000 },
		"unknown replica":  func(sc *TreeScenario) { sc.ReplicaNode = "region-9" },
		"unknown client":   func(sc *TreeScenario) { sc.Events = []TreeEvent{{What: "spike", Client: 45}} },
		"loss, no replica": func(sc *TreeScenario) { sc.Events = []TreeEvent{{What: "leader-lost", Node: "region-0"}} },
		"cut the root":     func(sc *TreeScenario) { sc.Events = []TreeEvent{{What: "cut", Node: "root"}} },
		"unknown event":    func(sc *TreeScenario) { sc.Events = []TreeEvent{{What: "meteor"}} },
	} {
		sc := Scenario7(true)
		edit(&sc)
		if _, err := SimulateTree(context.Background(), &Env{}, sc); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
