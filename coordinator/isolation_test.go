package coordinator_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// TestIsolationOptionsRefused: caps per tenant above the node's limits,
// negative bounds, and per-child bounds that are not positive or do not
// name a child are refused with an error naming the option.
func TestIsolationOptionsRefused(t *testing.T) {
	nc := natstest.Conn(t, natstest.Server(t))
	for _, tc := range []struct {
		opts coordinator.Options
		want string
	}{
		{coordinator.Options{MaxResources: 100, TenantMaxResources: 101}, "tenant max resources 101 is above the node's max resources 100"},
		{coordinator.Options{TenantMaxResources: coordinator.DefaultMaxResources + 1}, "is above the node's max resources 100000"},
		{coordinator.Options{MaxClients: 10, TenantMaxClients: 11}, "tenant max clients 11 is above the node's max clients 10"},
		{coordinator.Options{TenantMaxResources: -1}, "tenant max resources -1 is negative"},
		{coordinator.Options{TenantMaxClients: -1}, "tenant max clients -1 is negative"},
		{coordinator.Options{ChildMaxClients: -1}, "child max clients -1 is negative"},
		{coordinator.Options{ChildClients: map[string]int64{"eu": 0}}, `child clients: "eu": bound 0 is not positive`},
		{coordinator.Options{ChildClients: map[string]int64{"eu": -5}}, `child clients: "eu": bound -5 is not positive`},
		{coordinator.Options{ChildClients: map[string]int64{"e u": 5}}, `child clients: "e u"`},
		{coordinator.Options{ChildClients: map[string]int64{"root": 5}}, `child clients: "root" is this node or its parent`},
		{coordinator.Options{Node: "eu", Parent: "global", ChildClients: map[string]int64{"global": 5}}, `child clients: "global" is this node or its parent`},
	} {
		if _, err := coordinator.New(nc, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error with %q", tc.opts, err, tc.want)
		}
	}
	// At the limits, and the default a tenth of them, they are accepted.
	for _, o := range []coordinator.Options{
		{MaxResources: 100, TenantMaxResources: 100, MaxClients: 10, TenantMaxClients: 10},
		{MaxResources: 5, MaxClients: 5},
		{ChildMaxClients: 1, ChildClients: map[string]int64{"eu": 1e12}},
	} {
		if _, err := coordinator.New(nc, o); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// serverGet sends a child's GetServerCapacity for resource "db", claiming
// clients, and fails the test on an error reply.
func serverGet(t *testing.T, nc *nats.Conn, child string, clients int64) {
	t.Helper()
	data, err := proto.Marshal(&allotpb.GetServerCapacityRequest{ServerId: child, Resource: []*allotpb.ServerCapacityResourceRequest{{
		ResourceId: "db", Wants: []*allotpb.PriorityBandAggregate{{NumClients: clients, Wants: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(coordinator.Subject("root", "server.get."+child))
	m.Data = data
	m.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	reply, err := nc.RequestMsg(m, answerWithin)
	if err != nil {
		t.Fatal(err)
	}
	if code := reply.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("server.get of %s: error %s: %s", child, code, reply.Header.Get("Nats-Service-Error"))
	}
}

// TestChildClaimBoundsAreTheNodes: a child's claim is bounded by the
// coordinator's ChildClients for it, else by ChildMaxClients; each claim
// above its bound is counted in STATS child_capped, one at or below it is
// not.
func TestChildClaimBoundsAreTheNodes(t *testing.T) {
	e := start(t, coordinator.Options{ChildMaxClients: 100, ChildClients: map[string]int64{"eu": 5},
		Templates: sources.StaticTemplates(config.NewSet(1, nil, config.DefaultTemplate()))})
	for _, c := range []struct {
		child   string
		clients int64
	}{{"eu", 5}, {"eu", 6}, {"ap", 100}, {"ap", 101}, {"ap", 1e12}} {
		serverGet(t, e.nc, c.child, c.clients)
	}
	// A round publishes its counters to STATS after it answers, and
	// before the next round: once this claim (within its bound) is
	// answered, STATS count every claim above.
	serverGet(t, e.nc, "eu", 1)
	if got := e.stats().ChildCapped; got != 3 {
		t.Fatalf("child_capped %d, want 3 (eu claiming 6 of 5, ap claiming 101 and 1e12 of 100)", got)
	}
}
