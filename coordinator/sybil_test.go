package coordinator_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// sybils are many client ids of one tenant, asking from one connection:
// each request reports the lease its id holds, as an agent would.
type sybils struct {
	t      *testing.T
	nc     *nats.Conn
	ids    []string
	leases []*allotpb.Lease
	codes  []string // error code of each id's last reply ("" none)
	errs   []string
}

func newSybils(t *testing.T, nc *nats.Conn, prefix string, n int) *sybils {
	s := &sybils{t: t, nc: nc, leases: make([]*allotpb.Lease, n), codes: make([]string, n), errs: make([]string, n)}
	for i := range n {
		s.ids = append(s.ids, fmt.Sprintf("%s-%04d", prefix, i))
	}
	return s
}

// ask sends every id's GetCapacity for resource "db" at once (wanting
// wants), waits for all replies, and returns the sum of the leases.
func (s *sybils) ask(wants float64) float64 {
	s.t.Helper()
	inbox := s.nc.NewRespInbox()
	replies := make(chan *nats.Msg, len(s.ids))
	sub, err := s.nc.ChanSubscribe(strings.TrimSuffix(inbox, "*")+".*", replies) // NewRespInbox ends in a token of its own
	if err != nil {
		s.t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for i, id := range s.ids {
		data, err := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: wants, Has: s.leases[i]}}})
		if err != nil {
			s.t.Fatal(err)
		}
		m := nats.NewMsg(coordinator.Subject("root", "capacity.get"))
		m.Reply, m.Data = fmt.Sprintf("%s.%d", inbox, i), data
		m.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
		if err := s.nc.PublishMsg(m); err != nil {
			s.t.Fatal(err)
		}
	}
	deadline := time.After(10 * time.Second)
	for range s.ids {
		select {
		case m := <-replies:
			var i int
			if _, err := fmt.Sscanf(m.Subject[strings.LastIndexByte(m.Subject, '.')+1:], "%d", &i); err != nil || i < 0 || i >= len(s.ids) {
				s.t.Fatalf("reply on %s", m.Subject)
			}
			s.codes[i], s.errs[i] = m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error")
			if s.codes[i] != "" {
				continue
			}
			var resp allotpb.GetCapacityResponse
			if err := proto.Unmarshal(m.Data, &resp); err != nil {
				s.t.Fatal(err)
			}
			s.leases[i] = resp.GetResponse()[0].GetGets()
		case <-deadline:
			s.t.Fatal("replies to the sybils' requests did not all come within 10s")
		}
	}
	var sum float64
	for _, l := range s.leases {
		if l.GetExpiryTime().AsTime().After(time.Now()) {
			sum += l.GetCapacity()
		}
	}
	return sum
}

// sybilTemplate is "db" with capacity 100 and the given tenants block.
func sybilTemplate(t *testing.T, tenants string) *config.Template {
	t.Helper()
	doc := `{"identifier_glob":"db","capacity":100,"algorithm":{"kind":"FAIR_SHARE","lease_length":"10s","refresh_interval":"500ms"}` + tenants + `}`
	tm, _, err := config.ParseAndCompile("db", 1, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// The Sybil case: TENANT_A opens 1,000 client ids, TENANT_B
// runs one agent that wants the whole capacity. With the tenant fairness
// level the two tenants get half each (A's 1,000 ids share their half);
// without it B gets a 1,001st. At no time do the leases sum above the
// capacity.
func TestSybilTenantFairness(t *testing.T) {
	for _, tc := range []struct {
		name    string
		tenants string
		b       float64 // B's share
	}{
		{"fair", `,"tenants":{"fair":true}`, 50},
		{"off", ``, 100.0 / 1001},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startTenants(t, map[string][]string{"TENANT_A": {"a"}, "TENANT_B": {"b"}}, sybilTemplate(t, tc.tenants))
			lim := e.agentHolding("b", "honest", 100, agent.WithWants(100))
			s := newSybils(t, e.as("a"), "sybil", 1000)
			var sumA, b float64
			poll.For(t, time.Minute, 200*time.Millisecond, func() error {
				sumA, b = s.ask(100), lim.Capacity()
				snap, err := e.c.Snapshot(t.Context(), "db", 0, "")
				if err != nil {
					t.Fatal(err)
				}
				if snap.Resource.Granted > 100*(1+1e-9) || snap.Resource.Outstanding > 100*(1+1e-9) {
					t.Fatalf("granted %v, outstanding %v of 100", snap.Resource.Granted, snap.Resource.Outstanding)
				}
				if math.Abs(b-tc.b) < 1e-3*max(1, tc.b) && math.Abs(sumA-(100-tc.b)) < 1e-3*(100-tc.b) {
					return nil
				}
				return fmt.Errorf("B holds %v (want %v), A's 1,000 ids %v", b, tc.b, sumA)
			})
			t.Logf("tenants %s: B's one agent holds %.4f, A's 1,000 ids %.4f in all (%.4f each at most)", tc.name, b, sumA, maxLease(s.leases))
		})
	}
}

func maxLease(ls []*allotpb.Lease) float64 {
	var m float64
	for _, l := range ls {
		m = max(m, l.GetCapacity())
	}
	return m
}

// A tenant capped at 1,000 client ids per resource gets 429 for its
// 1,001st, with the reason, and the coordinator keeps no record of it;
// another tenant is not affected.
func TestTenantClientCap(t *testing.T) {
	e := startTenants(t, map[string][]string{"TENANT_A": {"a"}, "TENANT_B": {"b"}}, sybilTemplate(t, `,"tenants":{"fair":true,"max_clients":1000}`))
	s := newSybils(t, e.as("a"), "sybil", 1001)
	s.ask(1)
	for i, code := range s.codes[:1000] {
		if code != "" {
			t.Fatalf("id %d of 1,000 refused: %s %s", i, code, s.errs[i])
		}
	}
	// The requests race one another: exactly one of the 1,001 is refused.
	var refused []int
	for i, code := range s.codes {
		if code != "" {
			refused = append(refused, i)
		}
	}
	if len(refused) != 1 {
		t.Fatalf("%d of 1,001 ids refused: %v", len(refused), refused)
	}
	k := refused[0]
	if s.codes[k] != "429" || !strings.Contains(s.errs[k], `tenant "TENANT_A" has 1000 client ids on resource "db" and the limit is 1000 (tenants.max_clients of template "db")`) {
		t.Fatalf("the 1,001st id got %s %q", s.codes[k], s.errs[k])
	}
	// A round answers its requests before it publishes its counters to
	// STATS: the last round's may lag its replies by a moment.
	poll.For(t, 30*time.Second, poll.Interval, func() error {
		if st := e.stats(); st.Clients != 1000 || st.TenantCapped != 1 {
			return fmt.Errorf("clients %d, tenant_capped %d; want 1000 and 1", st.Clients, st.TenantCapped)
		}
		return nil
	})
	// Another tenant is served (request fails the test on an error).
	var g jsonGrant
	request(t, e.as("b"), "capacity.get", `{"client_id":"sybil-0000","resource":[{"resource_id":"db","wants":10}]}`, &g)
}

// A tenant's priority bound holds through the imports: TENANT_B, bound by
// default_max_priority 0, asks for priority 1000 and gets nothing from
// TENANT_A's agent at its own bound 5.
func TestTenantPriorityBoundThroughImports(t *testing.T) {
	e := startTenants(t, map[string][]string{"TENANT_A": {"a"}, "TENANT_B": {"b"}},
		sybilTemplate(t, `,"tenants":{"default_max_priority":0,"accounts":[{"name":"TENANT_A","max_priority":5}]}`))
	lim := e.agentHolding("a", "a", 100, agent.WithWants(100), agent.WithPriority(5))
	b := e.as("b")
	for i := range 2 {
		var g jsonGrant
		request(t, b, "capacity.get", `{"client_id":"b","resource":[{"resource_id":"db","wants":100,"priority":1000}]}`, &g)
		if got := g.Response[0].Gets.Capacity; got != 0 {
			t.Fatalf("B asking for priority 1000 got %v (request %d)", got, i+1)
		}
		// A's lease is computed anew with B's claim known: were B served
		// at priority 1000, A's share would shrink now, and B's next
		// request would get what A gave up.
		refreshedTwice(t, lim)
		if lim.Capacity() != 100 {
			t.Fatalf("A's agent holds %v", lim.Capacity())
		}
	}
}

// refreshedTwice waits until lim's agent has had two answers to its
// lease refreshes: the second was asked after the call began, so it
// reflects what the coordinator knew then.
func refreshedTwice(t *testing.T, lim *agent.RateLimiter) {
	t.Helper()
	for range 2 {
		last := lim.Status().LastRefresh
		poll.Until(t, 10*time.Second, "a lease refresh", func() bool { return lim.Status().LastRefresh.After(last) })
	}
}
