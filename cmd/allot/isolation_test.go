package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// TestIsolationFlagsRefused: bad caps per tenant and child bounds, and
// bad intake and round figures, are refused before anything starts,
// naming the flag, on `allot coordinator` and `allot up`.
func TestIsolationFlagsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant-max-resources", "0"}, `invalid argument "0" for "--tenant-max-resources" flag: want a positive whole number`},
		{[]string{"--tenant-max-clients", "-3"}, `invalid argument "-3" for "--tenant-max-clients" flag: want a positive whole number`},
		{[]string{"--tenant-max-resources", "x"}, `invalid argument "x" for "--tenant-max-resources" flag`},
		{[]string{"--tenant-max-resources", "100001"}, "--tenant-max-resources 100001 is above --max-resources 100000"},
		{[]string{"--max-resources", "50", "--tenant-max-resources", "60"}, "--tenant-max-resources 60 is above --max-resources 50"},
		{[]string{"--tenant-max-clients", "2000001"}, "--tenant-max-clients 2000001 is above --max-clients 2000000"},
		{[]string{"--max-resources", "0"}, "--max-resources 0, --max-clients 2000000: want positive numbers"},
		{[]string{"--tenant-rate", "NaN"}, "--tenant-rate NaN: want a number of requests per second, 0 (no limit) or more"},
		{[]string{"--tenant-rate", "Inf"}, "--tenant-rate +Inf: want a number of requests per second, 0 (no limit) or more"},
		{[]string{"--tenant-rate", "-1"}, "--tenant-rate -1: want a number of requests per second, 0 (no limit) or more"},
		{[]string{"--tenant-burst", "-1"}, "--tenant-burst -1: want 0 (twice the rate) or more"},
		{[]string{"--max-in-flight", "-1"}, "--max-in-flight -1: want 0 (the default, 1024) or more"},
		{[]string{"--heap-floor", "64MB"}, `--heap-floor: heap floor "64MB": want a whole number of bytes up to 1TiB`},
		{[]string{"--heap-floor", "-1"}, `--heap-floor: heap floor "-1": want a whole number of bytes`},
		{[]string{"--round", "-1s"}, "--round -1s: want 0 (each request at once) to 50ms"},
		{[]string{"--server-id", "a b"}, `--server-id "a b" contains a space or control character`},
		{[]string{"--round", "51ms"}, "--round 51ms: want 0 (each request at once) to 50ms"},
		{[]string{"--child-max-clients", "0"}, "--child-max-clients 0: want a positive number of clients"},
		{[]string{"--child-clients", "eu"}, `"eu": want NODE=N pairs, comma-separated, such as eu=5000,ap=2000`},
		{[]string{"--child-clients", "eu=0"}, "eu=0: want a positive number of clients"},
		{[]string{"--child-clients", "eu=many"}, "eu=many: want a positive number of clients"},
		{[]string{"--child-clients", "e.u=5"}, `"e.u"`},
		{[]string{"--child-clients", "eu=5,eu=6"}, `child "eu" is given twice`},
		{[]string{"--child-clients", "eu=5", "--child-clients", "ap=1,eu=6"}, `child "eu" is given twice`},
		{[]string{"--child-clients", "root=5"}, `--child-clients root: "root" is this node or its parent`},
		{[]string{"--node", "eu", "--parent-node", "global", "--child-clients", "global=5"}, `"global" is this node or its parent`},
	} {
		for _, cmd := range [][]string{{"coordinator", "--nats", "nats://127.0.0.1:1"}, {"up", "--data-dir", t.TempDir()}} {
			if cmd[0] == "up" && strings.Contains(strings.Join(tc.args, " "), "--parent-node") {
				continue // up wants --parent-url first
			}
			args := append(append([]string{}, cmd...), tc.args...)
			// A deadline, so that a flag taken by mistake fails the test
			// instead of leaving `allot up` serving.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			code, out := runCtx(ctx, args...)
			cancel()
			if code == 0 || !strings.Contains(out, tc.want) {
				t.Errorf("%q: code %d, %s; want an error with %q", args, code, out, tc.want)
			}
		}
	}
}

// TestIsolationFlags: `allot coordinator --tenant-max-resources 2
// --child-clients eu=1` on a server with tenant accounts: a tenant's
// third resource gets 429 naming the flag while another tenant's is
// served, and a child claiming more clients than its bound is counted in
// STATS child_capped.
func TestIsolationFlags(t *testing.T) {
	s := natstest.TenantServer(t, map[string][]string{"TENANT_A": {"a1"}, "TENANT_B": {"b1"}})
	url := s.ClientURL()
	allot := []string{"--nats", url, "--user", "allot", "--password", "allot"}
	startCoordinator(t, append([]string{"--tenant-max-resources", "2", "--child-clients", "eu=1"}, allot...), allot)
	ctx := context.Background()
	code, out := runCtx(ctx, "get", "--user", "a1", "--password", "a1", "--nats", url, "r1", "r2", "r3")
	if code != 0 || !strings.Contains(out, `tenant \"TENANT_A\" has clients on 2 resources of this node and the limit per tenant is 2 (--tenant-max-resources); \"r3\" would be one more`) {
		t.Fatalf("TENANT_A's three resources: exit %d, %s", code, out)
	}
	if code, out := runCtx(ctx, "get", "--user", "b1", "--password", "b1", "--nats", url, "r3"); code != 0 {
		t.Fatalf("TENANT_B's resource: exit %d, %s", code, out)
	}

	nc := natstest.Conn(t, s, nats.UserInfo("allot", "allot"))
	data, err := proto.Marshal(&allotpb.GetServerCapacityRequest{ServerId: "eu", Resource: []*allotpb.ServerCapacityResourceRequest{{
		ResourceId: "db", Wants: []*allotpb.PriorityBandAggregate{{NumClients: 1e12, Wants: 10}}}}})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(coordinator.Subject("root", "server.get.eu"))
	m.Data = data
	m.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	if reply, err := nc.RequestMsg(m, 30*time.Second); err != nil || reply.Header.Get("Nats-Service-Error-Code") != "" {
		t.Fatalf("server.get of eu: %v %v", err, reply)
	}
	poll.For(t, 10*time.Second, 20*time.Millisecond, func() error {
		if st := coordtest.Stats(t, nc); st.ChildCapped != 1 || st.TenantCapped != 1 {
			return fmt.Errorf("child_capped %d, tenant_capped %d; want 1 and 1", st.ChildCapped, st.TenantCapped)
		}
		return nil
	})
}
