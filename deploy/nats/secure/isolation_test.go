package secure_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// putDoc puts the template document doc under name as admin.
func (d *deployment) putDoc(t *testing.T, name, doc string) {
	t.Helper()
	admin, _ := d.dial(t, d.srv, "admin")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := configkv.OpenBucket(ctx, js, "", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, config.Key(name), []byte(doc)); err != nil {
		t.Fatal(err)
	}
}

// coordStats asks the serving coordinator for its micro STATS, as admin.
func (d *deployment) coordStats(t *testing.T) coordinator.Stats {
	t.Helper()
	admin, _ := d.dial(t, d.srv, "admin")
	return coordtest.Stats(t, admin)
}

// grants is a JSON GetCapacity reply, per resource.
type grants struct {
	Response []struct {
		ResourceID string `json:"resource_id"`
		Gets       struct {
			Capacity float64 `json:"capacity"`
		} `json:"gets"`
		Error     string `json:"error"`
		ErrorCode int    `json:"error_code"`
	} `json:"response"`
}

// askJSON sends a JSON GetCapacity of client for resources (wanting 1
// each) and returns the reply's error code ("" none), its error and its
// grants.
func askJSON(t *testing.T, nc *nats.Conn, client string, resources ...string) (string, string, grants) {
	t.Helper()
	items := make([]string, len(resources))
	for i, r := range resources {
		items[i] = fmt.Sprintf(`{"resource_id":%q,"wants":1}`, r)
	}
	m, err := nc.Request("allot.root.capacity.get", fmt.Appendf(nil, `{"client_id":%q,"resource":[%s]}`, client, strings.Join(items, ",")), wait)
	if err != nil {
		t.Fatal(err)
	}
	var g grants
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		return code, m.Header.Get("Nats-Service-Error"), g
	}
	if err := json.Unmarshal(m.Data, &g); err != nil {
		t.Fatalf("reply %s: %v", m.Data, err)
	}
	return "", "", g
}

// TestTenantCannotFillTheNode: the secure setup's coordinator refuses
// resources no template matches (--unmatched reject), so a tenant cannot
// make the node keep state for made-up ids through the built-in default
// template; and where a template matches any id, one tenant may have
// clients on at most its share of the node's resources
// (--tenant-max-resources, here 5 of 100): its next new resource gets
// 429, another tenant's new resource is served. Seen before: one tenant filled the
// node's 100,000 resources through the default template in 26 s, and
// every other tenant got 429 for any new resource.
func TestTenantCannotFillTheNode(t *testing.T) {
	d := startDeploymentWith(t, coordinator.Options{MaxResources: 100, TenantMaxResources: 5})
	a, _ := d.dial(t, d.srv, "tenant_a")
	// No template matches: 404, and the node keeps nothing of it.
	before := d.coordStats(t).Resources
	if code, msg, _ := askJSON(t, a, "filler", "made-up/0"); code != "404" || !strings.Contains(msg, "matches no template") {
		t.Fatalf("an unmatched resource: %s %q, want 404", code, msg)
	}
	if st := d.coordStats(t); st.Resources != before {
		t.Fatalf("the node keeps %d resources after an unmatched one, %d before", st.Resources, before)
	}
	// A template for any id under t/: 5 resources each.
	d.putDoc(t, "t", `{"identifier_glob": "t/*", "capacity": 100, "algorithm": {"kind": "FAIR_SHARE", "lease_length": "30s", "refresh_interval": "1s"}}`)
	poll.For(t, wait, 20*time.Millisecond, func() error {
		if code, _, _ := askJSON(t, a, "filler", "t/0"); code != "" {
			return fmt.Errorf("the template never served: %s", code)
		}
		return nil
	})
	ids := make([]string, 6)
	for i := range ids {
		ids[i] = fmt.Sprint("t/", i)
	}
	_, _, g := askJSON(t, a, "filler", ids...)
	for i, r := range g.Response[:5] {
		if r.ErrorCode != 0 || r.Gets.Capacity != 1 {
			t.Fatalf("resource %d of 5: %+v", i, r)
		}
	}
	if r := g.Response[5]; r.ErrorCode != 429 || !strings.Contains(r.Error, `tenant "TENANT_A" has clients on 5 resources of this node and the limit per tenant is 5 (--tenant-max-resources)`) {
		t.Fatalf("the 6th resource: %+v", r)
	}
	b, _ := d.dial(t, d.srv, "tenant_b")
	if code, msg, _ := askJSON(t, b, "other", "t/5"); code != "" {
		t.Fatalf("another tenant's new resource: %s %q", code, msg)
	}
	if st := d.coordStats(t); st.TenantCapped != 1 {
		t.Fatalf("tenant_capped %d, want 1", st.TenantCapped)
	}
}

// TestChildLevelClaimBounded: a compromised child level (its
// coordinator's credentials, at the child's server) claims to stand for
// 1e12 clients on its own server.get subject. The root counts it at the
// bound the operator set for region1 (--child-clients region1=1), so
// against the root's one agent it gets half of the capacity, not all
// (seen before: 100 of 100), and the claim is counted in child_capped.
func TestChildLevelClaimBounded(t *testing.T) {
	d := startDeploymentWith(t, coordinator.Options{ChildClients: map[string]int64{"region1": 1}})
	nc, _ := d.dial(t, d.srv, "tenant_a")
	_, lim := leaseOfWants(t, nc, 100, 100)
	l := d.startLevelServer(t)
	child, errs := d.dial(t, l.srv, "region1_coordinator")
	var has *allotpb.Lease
	poll.For(t, 3*wait, 200*time.Millisecond, func() error {
		data, err := proto.Marshal(&allotpb.GetServerCapacityRequest{ServerId: "region1", Resource: []*allotpb.ServerCapacityResourceRequest{{
			ResourceId: resource, Has: has, Wants: []*allotpb.PriorityBandAggregate{{NumClients: 1e12, Wants: 100}}}}})
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("allot.root.server.get.region1")
		m.Data = data
		m.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
		reply, err := child.RequestMsg(m, wait)
		if err != nil {
			t.Fatalf("server.get: %v (refused: %v)", err, errs.all())
		}
		var resp allotpb.GetServerCapacityResponse
		if err := proto.Unmarshal(reply.Data, &resp); err != nil || len(resp.GetResponse()) != 1 {
			t.Fatalf("server.get reply %q: %v", reply.Data, err)
		}
		has = resp.GetResponse()[0].GetGets()
		if has.GetCapacity() != 50 || lim.Capacity() != 50 {
			return fmt.Errorf("the child holds %v and the root's agent %v, want 50 each", has.GetCapacity(), lim.Capacity())
		}
		return nil
	})
	if st := d.coordStats(t); st.ChildCapped == 0 {
		t.Fatal("child_capped is 0")
	}
}
