package planet

import (
	"context"
	"testing"
)

// TestShortNeverOverGrants runs the short planet (2 regions × 10 clusters
// × 100 clients, the full timeline: a 10-minute cut, a root failover,
// demand waves): Σ in force never exceeds the capacity at any sample, the
// tree hands out most of what demand allows, and every level comes back
// after the cut and the takeover.
func TestShortNeverOverGrants(t *testing.T) {
	cfg := Short()
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("wall %.1fs; max in force %.6f; utilization %.4f (min %.4f, useful %.4f); during the cut %.4f (useful %.4f); cut region lowest %v",
		res.WallSeconds, res.MaxInForce, res.Utilization, res.UtilizationMin, res.Useful, res.UtilizationCut, res.UsefulCut, res.CutLowest)
	for _, ev := range res.Events {
		t.Logf("%s at %.0fs (%s): before %v lowest %v reconverged %v", ev.Name, ev.At, ev.Scope, ev.Before, ev.Lowest, ev.Reconverged)
	}
	for _, lv := range res.Levels {
		t.Logf("%s: %d requests, %.1f/s, %.2f/s per server", lv.Name, lv.Requests, lv.PerSecond, lv.PerServer)
	}
	t.Logf("root: %+v", res.Root)
	if res.OverGrants != 0 || res.MaxInForce > 1+1e-9 {
		t.Fatalf("over-grant: max Σ in force %.6f× capacity", res.MaxInForce)
	}
	// Demand moves in waves that the tree follows a refresh behind
	// (95.8% when written); well below means shares stopped flowing.
	if res.Utilization < 0.9 {
		t.Errorf("utilization %.4f outside the cut, want ≥ 0.9", res.Utilization)
	}
	// The cut region's floor ended before the cut did: its subtree held
	// nothing by the end of it.
	if res.CutLowest[2] > 0.01 {
		t.Errorf("the cut region's clients kept %.3f of their fair shares through a cut longer than lease and floor", res.CutLowest[2])
	}
	// Clients ask about as often as their refresh interval says (nodes
	// ask sooner on purpose when demand moves). A cluster used to pass
	// the short interval its region asked it back with (to confirm a
	// shrink) on to all its clients, which then asked 5.6 times as often
	// as their interval (1.13/s at 5 s), mostly at the shortest refresh.
	clients := res.Levels[len(res.Levels)-1]
	nominal := 1 / clients.RefreshEach
	if per := clients.PerServer / float64(clients.Claimants); per > 1.5*nominal {
		t.Errorf("%s: %.3f requests/s per claimant, %.1f× the %.0f s refresh interval's", clients.Name, per, per/nominal, clients.RefreshEach)
	}
	for _, ev := range res.Events {
		for l, back := range ev.Reconverged {
			if back < 0 {
				t.Errorf("%s: level %d did not reconverge within the run", ev.Name, l)
			}
		}
	}
}
