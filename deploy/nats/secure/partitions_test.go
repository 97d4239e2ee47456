package secure_test

import (
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/poll"
)

// TestTenantAgentsUseLeasePartitions: with the root's resources spread
// over two lease partitions, each led by a coordinator with the
// coordinator user's rights, tenants' agents get their leases: the first
// request on the plain subject is relayed by partition 0 to the owner,
// then the agents refresh on the owner's own subject. Nobody is refused
// anything on the way.
func TestTenantAgentsUseLeasePartitions(t *testing.T) {
	d := startDeploymentWith(t, coordinator.Options{Partition: 0, Partitions: 2})
	p1 := d.rootOptions("root-p1")
	p1.Partition, p1.Partitions = 1, 2
	second := d.runCoordinator(t, d.srv, "coordinator", p1)

	admin, _ := d.dial(t, d.srv, "admin")
	direct, err := admin.SubscribeSync("allot.t.*.root.capacity.p.*.refresh")
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{"tenant_a", "tenant_b"} {
		nc, errs := d.dial(t, d.srv, user)
		leaseOf(t, nc)
		poll.Until(t, wait, user+"'s agent refreshing on its partition's own subject", func() bool {
			_, err := direct.NextMsg(10 * time.Millisecond)
			return err == nil
		})
		if e := errs.all(); len(e) > 0 {
			t.Fatalf("%s was refused: %v", user, e)
		}
	}
	for _, c := range []*coord{d.coord, second} {
		if e := c.errs.all(); len(e) > 0 {
			t.Fatalf("coordinator %s was refused: %v", c.id, e)
		}
	}
}
