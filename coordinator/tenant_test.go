package coordinator_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/intake"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// tenantEnv is a server with the tenant accounts of subjects.md and a
// coordinator in the allot account.
type tenantEnv struct {
	*env // the coordinator's connection
	s    *server.Server
}

func startTenants(t *testing.T, tenants map[string][]string, tmpls ...*config.Template) *tenantEnv {
	// The sybil tests send 1,001 requests at once: none may be refused
	// for overload.
	return startTenantsLimited(t, tenants, intake.Limits{MaxInFlight: 4096}, tmpls...)
}

func startTenantsLimited(t *testing.T, tenants map[string][]string, lim intake.Limits, tmpls ...*config.Template) *tenantEnv {
	t.Helper()
	s := natstest.TenantServer(t, tenants)
	nc := natstest.Conn(t, s, nats.UserInfo("allot", "allot"))
	c := coordtest.Start(t, nc, coordinator.Options{
		RoundInterval: 5 * time.Millisecond,
		Templates:     sources.StaticTemplates(config.NewSet(1, tmpls, nil)),
		Intake:        lim,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	return &tenantEnv{env: &env{t: t, nc: nc, c: c}, s: s}
}

// agentHolding starts an agent of user with client id and a limiter of
// "db" (opts), and waits until it holds want.
func (e *tenantEnv) agentHolding(user, id string, want float64, opts ...agent.ResourceOption) *agent.RateLimiter {
	e.t.Helper()
	a, err := agent.New(e.as(user), agent.WithClientID(id), agent.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = a.Close() })
	lim, err := a.Rate("db", opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	poll.For(e.t, 10*time.Second, poll.Interval, func() error {
		if got := lim.Capacity(); got != want {
			return fmt.Errorf("%s's agent %s got %v, want %v (%v)", user, id, got, want, a.LastError())
		}
		return nil
	})
	return lim
}

// as connects as user (TenantServer's password is the user name).
func (e *tenantEnv) as(user string) *nats.Conn {
	return natstest.Conn(e.t, e.s, nats.UserInfo(user, user))
}

// request sends a JSON request on the plain subject of endpoint and
// decodes the reply into out, failing on an error reply.
func request(t *testing.T, nc *nats.Conn, endpoint, body string, out any) {
	t.Helper()
	m, err := nc.Request(coordinator.Subject("root", endpoint), []byte(body), answerWithin)
	if err != nil {
		t.Fatalf("%s %s: %v", endpoint, body, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s %s: error %s: %s", endpoint, body, code, m.Header.Get("Nats-Service-Error"))
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		t.Fatalf("%s reply %s: %v", endpoint, m.Data, err)
	}
}

// jsonGrant is the part of a JSON GetCapacity reply the tests read.
type jsonGrant struct {
	Response []struct {
		Gets struct {
			Capacity float64 `json:"capacity"`
		} `json:"gets"`
	} `json:"response"`
}

// A client id is bound to the identity that sent it (otherwise a
// release or `wants: 0` sent with a victim's client_id frees its lease,
// and the capacity is granted twice: 200 of 100). An agent of TENANT_A holds
// the whole capacity; another tenant, another user of TENANT_A, and a
// client of the allot account itself each release and ask for nothing
// under the victim's client id, then ask for the whole capacity under
// their own: they reach records of their own, the victim's lease stays,
// and nothing more is granted than the capacity.
func TestClientIDBoundToTenantIdentity(t *testing.T) {
	tm := tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)
	// The victim does not come back during the test: its lease is what
	// it was granted first.
	tm.LeaseLength, tm.RefreshInterval = time.Minute, 30*time.Second
	e := startTenants(t, map[string][]string{"TENANT_A": {"a1", "a2"}, "TENANT_B": {"b1"}}, tm)

	lim := e.agentHolding("a1", "victim", 100, agent.WithWants(100))

	for _, attacker := range []struct{ name, user, pass string }{
		{"another tenant", "b1", "b1"},
		{"another user of the tenant", "a2", "a2"},
		{"the allot account", "allot", "allot"},
	} {
		t.Run(attacker.name, func(t *testing.T) {
			nc := natstest.Conn(t, e.s, nats.UserInfo(attacker.user, attacker.pass))
			var rel struct {
				Released int32 `json:"released"`
			}
			request(t, nc, "capacity.release", `{"client_id":"victim","resource_id":["db"]}`, &rel)
			if rel.Released != 0 {
				t.Fatalf("a release under the victim's id released %d leases", rel.Released)
			}
			var g jsonGrant
			request(t, nc, "capacity.get", `{"client_id":"victim","resource":[{"resource_id":"db","wants":0}]}`, &g)
			request(t, nc, "capacity.get", `{"client_id":"thief","resource":[{"resource_id":"db","wants":100}]}`, &g)
			if got := g.Response[0].Gets.Capacity; got+lim.Capacity() > 100 {
				t.Fatalf("the thief got %v while the victim holds %v of 100", got, lim.Capacity())
			}
		})
	}
	snap, err := e.c.Snapshot(t.Context(), "db", 10, "victim")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Resource == nil || snap.Resource.Granted > 100 {
		t.Fatalf("granted in all: %+v", snap.Resource)
	}
	found := false
	for _, cv := range snap.Resource.Top {
		// The victim's record, shown as tenant/user hash/id.
		found = found || cv.Has == 100 && strings.HasPrefix(cv.ID, "TENANT_A/u") && strings.HasSuffix(cv.ID, "/victim")
	}
	if !found {
		t.Fatalf("the victim's lease of 100 is gone: %+v", snap.Resource.Top)
	}
	// Tenant requests count under their endpoint (metrics labels stay
	// the fixed set; no tenant or user becomes one).
	for _, call := range e.c.Observe().Calls {
		if call.Subject == "other" {
			t.Fatalf("requests counted as other: %+v", e.c.Observe().Calls)
		}
	}
}

// The binding holds for what clients report in learning mode too: after a
// takeover, another user of the tenant who reports the victim's lease
// under the victim's client id is not credited with it (it is not among
// the recorded holders: over_claims), while the victim's own report is.
func TestTenantReportsBoundInLearning(t *testing.T) {
	s := natstest.TenantServer(t, map[string][]string{"TENANT_A": {"a1", "a2"}})
	nc := natstest.Conn(t, s, nats.UserInfo("allot", "allot"))
	tm := tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)
	tm.LearningModeDuration = 10 * time.Second
	opts := coordinator.Options{Templates: sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil)),
		RoundInterval: coordinator.NoRoundInterval, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	first := coordtest.Start(t, nc, opts)
	victim, thief := natstest.Conn(t, s, nats.UserInfo("a1", "a1")), natstest.Conn(t, s, nats.UserInfo("a2", "a2"))
	ask := func(nc *nats.Conn, wants float64, has *allotpb.Lease) *allotpb.Lease {
		t.Helper()
		body, err := protojson.Marshal(&allotpb.GetCapacityRequest{ClientId: "victim", Resource: []*allotpb.ResourceRequest{{ResourceId: "db", Wants: wants, Has: has}}})
		if err != nil {
			t.Fatal(err)
		}
		var resp allotpb.GetCapacityResponse
		m, err := nc.Request(coordinator.Subject("root", "capacity.get"), body, answerWithin)
		if err != nil {
			t.Fatal(err)
		}
		if err := protojson.Unmarshal(m.Data, &resp); err != nil {
			t.Fatalf("%v: %s", err, m.Data)
		}
		return resp.GetResponse()[0].GetGets()
	}
	lease := ask(victim, 70, nil)
	if lease.GetCapacity() != 70 {
		t.Fatalf("the victim got %v, want 70", lease.GetCapacity())
	}
	first.Stop()
	second := coordtest.Start(t, nc, opts)
	stolen := ask(thief, 100, lease)
	mine := ask(victim, 70, lease)
	if stolen.GetCapacity() > 30 || mine.GetCapacity() != 70 {
		t.Fatalf("after the takeover the thief reporting the victim's lease got %v, the victim %v (of 100)", stolen.GetCapacity(), mine.GetCapacity())
	}
	e := &env{t: t, nc: nc, c: second}
	if got := e.stats().OverClaims; got != 1 {
		t.Fatalf("over_claims = %d, want 1", got)
	}
}

// A client writing the protocol by hand forges a Nats-Request-Info header
// naming another user of its tenant, on a line after a bare "\n" (which
// nats-server does not take for a header line and nats.go does), and
// either leaves the server's header beside it, hides it after an early
// end of the block, or glues it to a line of its own. The coordinator
// refuses each request (400) and the victim's lease stays.
func TestSmuggledRequestInfoRefused(t *testing.T) {
	tm := tmpl("db", 100, allotpb.Algorithm_FAIR_SHARE)
	tm.LeaseLength, tm.RefreshInterval = time.Minute, 30*time.Second
	e := startTenants(t, map[string][]string{"TENANT_A": {"a1", "a2"}}, tm)
	lim := e.agentHolding("a1", "victim", 100, agent.WithWants(100))
	forged := "Nats-Request-Info: {\"acc\":\"TENANT_A\",\"user\":\"a1\"}"
	for _, hdr := range []string{
		// a second header, which nats-server does not replace
		"NATS/1.0\r\nX-A: 1\n" + forged + "\r\n\r\n",
		// an early end: nats.go stops before the server's header
		"NATS/1.0\r\nX-A: 1\n" + forged + "\n\nX-B: 2\r\n\r\n",
		"NATS/1.0\n" + forged + "\n\n\r\n",
		// no "\r\n" at the end: the server's header is glued to X-B
		"NATS/1.0\r\nX-A: 1\n" + forged + "\nX-B: 2\n\n",
		"NATS/1.0\r\nX-A: 1\n" + forged + "\nX-B\n\n",
	} {
		if code := natstest.RawRequest(t, e.s.Addr(), "a2", coordinator.Subject("root", "capacity.release"), hdr,
			`{"client_id":"victim","resource_id":["db"]}`); code != "400" {
			t.Fatalf("release with the forged header block %q: code %q, want 400", hdr, code)
		}
	}
	// A release of a2's own, answered by a round: any release applied
	// from the forged requests (each answered before it was sent) would
	// have been applied by that round or an earlier one.
	var rel struct {
		Released int32 `json:"released"`
	}
	request(t, e.as("a2"), "capacity.release", `{"client_id":"a2","resource_id":["db"]}`, &rel)
	if got := lim.Capacity(); got != 100 {
		t.Fatalf("the victim holds %v after the smuggled release, want 100", got)
	}
	snap, err := e.c.Snapshot(t.Context(), "db", 10, "victim")
	if err != nil || snap.Resource == nil || len(snap.Resource.Top) != 1 || snap.Resource.Top[0].Has != 100 {
		t.Fatalf("the victim's record: %+v, %v", snap.Resource, err)
	}
}
