package bench

import (
	"context"
	"testing"
	"time"
)

// TestSimulationInvariants runs a short scenario with a join, a spike and
// a leave and checks the invariants that must hold whatever the timing:
// leases were handed out, none negative, and their unexpired sum never
// above capacity. Utilization and convergence times are reported, not
// asserted.
func TestSimulationInvariants(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real agents for a few seconds")
	}
	sc := SimScenario{Key: "test", Title: "invariants", Duration: 5 * time.Second, Clients: 4, Wants: 150, Seed: 7,
		Events: []SimEvent{
			{At: 1500 * time.Millisecond, What: "join", Clients: []int{4}, Wants: 100},
			{At: 2500 * time.Millisecond, What: "spike", Clients: []int{0}, Factor: 10},
			{At: 3500 * time.Millisecond, What: "leave", Clients: []int{1}},
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	out, err := Simulate(ctx, &Env{}, sc)
	if err != nil {
		t.Fatal(err)
	}
	if out.Leases == 0 {
		t.Fatal("no leases observed")
	}
	if out.NegativeGrants != 0 {
		t.Errorf("%d negative grants", out.NegativeGrants)
	}
	if out.OvershootEvents != 0 {
		t.Errorf("%d overshoots, sum of unexpired leases up to %.4f× capacity", out.OvershootEvents, out.MaxLeaseRatio)
	}
	t.Logf("utilization %.4f, max leases %.4f× capacity, Jain %.4f, %d leases, shifts %+v",
		out.Utilization, out.MaxLeaseRatio, out.Jain, out.Leases, out.Shifts)
}
