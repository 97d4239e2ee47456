package secure_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/subjects"
	"github.com/nats-io/nats.go"
)

// TestTenantAgentsUseLeasePartitions: with the root's resources spread
// over two lease partitions, each led by a coordinator with the
// coordinator user's rights, tenants' agents get their leases: the first
// request on the plain subject is relayed by partition 0 to the owner,
// then the agents refresh on the owner's own subject. Nobody is refused
// anything on the way.
func TestTenantAgentsUseLeasePartitions(t *testing.T) {
	d, second, direct := startTwoPartitions(t, "allot.t.*.root.capacity.p.*.refresh")
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

// TestLevelUnderLeasePartitions: a child level under a root whose
// resources are spread over two lease partitions, linked with only its
// link user's rights, asks the root's partition that owns the resource on
// that partition's own server.get subject, and a tenant at the child gets
// its lease out of the root's capacity while a tenant at the root holds
// the rest. Nothing on the way is refused.
func TestLevelUnderLeasePartitions(t *testing.T) {
	d, second, direct := startTwoPartitions(t, "allot.root.server.p.*.get.region1")
	l := d.startLevel(t)
	ncChild, childErrs := d.dial(t, l.srv, "tenant_a")
	leaseOf(t, ncChild, agent.WithNode("region1"))
	ncRoot, rootErrs := d.dial(t, d.srv, "tenant_b")
	leaseOfWants(t, ncRoot, 80, 60)
	poll.Until(t, wait, "region1 asking the owner partition on its own subject", func() bool {
		// Its own request, not partition 0 relaying one it sent to the
		// plain subject: the reply goes to region1's inbox.
		m, err := direct.NextMsg(10 * time.Millisecond)
		return err == nil && m.Subject == fmt.Sprintf("allot.root.server.p.%d.get.region1", subjects.LeasePartition(resource, 2)) &&
			strings.HasPrefix(m.Reply, "_INBOX_allot_region1.")
	})
	for who, errs := range map[string]*asyncErrors{"tenant at the child": childErrs, "tenant at the root": rootErrs,
		"child coordinator": l.coordErrs, "root coordinator 0": d.coordErrs, "root coordinator 1": second.errs} {
		if e := errs.all(); len(e) > 0 {
			t.Errorf("%s was refused: %v", who, e)
		}
	}
	noViolations(t, d.log, l.log)
}

// startTwoPartitions starts the secure deployment with the root's
// resources spread over two lease partitions, each led by a coordinator
// with the coordinator user's rights (the deployment's own leads
// partition 0; second leads partition 1), and subscribes the admin to
// subject so a test can see who asks on it.
func startTwoPartitions(t *testing.T, subject string) (d *deployment, second *coord, sub *nats.Subscription) {
	t.Helper()
	d = startDeploymentWith(t, coordinator.Options{Partition: 0, Partitions: 2})
	p1 := d.rootOptions("root-p1")
	p1.Partition, p1.Partitions = 1, 2
	second = d.runCoordinator(t, d.srv, "coordinator", p1)
	admin, _ := d.dial(t, d.srv, "admin")
	sub, err := admin.SubscribeSync(subject)
	if err != nil {
		t.Fatal(err)
	}
	return d, second, sub
}
