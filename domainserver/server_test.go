package domainserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/domainserver"
	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/domainwire"
	"github.com/allot/allot/internal/embed"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/sources"
)

// clock is a settable clock for deterministic decisions.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// config is a settable configuration source: set swaps the namespaces as a
// watcher publishing a new generation would.
type config struct {
	mu  sync.Mutex
	nss map[string]*domainlimit.Namespace
}

func (c *config) get() map[string]*domainlimit.Namespace {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nss
}
func (c *config) set(nss ...*domainlimit.Namespace) {
	m := map[string]*domainlimit.Namespace{}
	for _, ns := range nss {
		m[ns.Name] = ns
	}
	c.mu.Lock()
	c.nss = m
	c.mu.Unlock()
}

// testNamespace is namespace "app": a rate resource "api" (hard 5/s, one
// tier of 3 per second active 10s cooldown 10s, a second tier of 2 more)
// and a copy resource "sandbox" (domain limit 5, global 8, group "free"
// of domains a and b limited to 6).
func testNamespace() *domainlimit.Namespace {
	return &domainlimit.Namespace{Name: "app", Resources: map[string]domainlimit.Resource{
		"api": {Name: "api", Kind: domainlimit.KindRate, Rate: domainlimit.RateSpec{Hard: 5, Global: domainlimit.Unlimited,
			Tiers: []domainlimit.Tier{{Limit: 3, Window: time.Second, Active: 10 * time.Second, Cooldown: 10 * time.Second},
				{Limit: 5, Window: time.Second, Active: 2 * time.Second, Cooldown: 10 * time.Second}}}},
		"sandbox": {Name: "sandbox", Kind: domainlimit.KindCopies, Copies: domainlimit.CopySpec{DomainLimit: 5, GlobalLimit: 8,
			Groups: []domainlimit.Group{{Name: "free", Limit: 6, Domains: []string{"a", "b"}}}}},
	}}
}

type env struct {
	nc  *nats.Conn
	srv *domainserver.Server
	clk *clock
	cfg *config
}

func start(t *testing.T, mod func(*domainserver.Options)) *env {
	t.Helper()
	s := natstest.Server(t)
	e := &env{nc: natstest.Conn(t, s), clk: &clock{t: time.Unix(1_800_000_000, 0)}, cfg: &config{}}
	e.cfg.set(testNamespace())
	opts := domainserver.Options{Config: sources.DomainsFunc(e.cfg.get), Now: e.clk.now, HoldTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	e.srv = run(t, natstest.Conn(t, s), opts, mod)
	return e
}

// run starts a server with opts changed by mod, stopped when the test
// ends.
func run(t *testing.T, nc *nats.Conn, opts domainserver.Options, mod func(*domainserver.Options)) *domainserver.Server {
	t.Helper()
	if mod != nil {
		mod(&opts)
	}
	srv, err := domainserver.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

// call sends a JSON body to op on app:res and decodes the reply into out;
// it returns the error code header ("" on success).
func (e *env) call(t *testing.T, op, res, body string, out any) string {
	t.Helper()
	m, err := e.nc.Request(domainwire.Subject("root", op, "app", res), []byte(body), 30*time.Second)
	if err != nil {
		t.Fatalf("%s %s %s: %v", op, res, body, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		var er domainwire.ErrorReply
		if err := json.Unmarshal(m.Data, &er); err != nil || er.Error == "" {
			t.Fatalf("error reply without an ErrorReply body: %s", m.Data)
		}
		return code
	}
	if out != nil {
		// Fields left out of a reply (omitempty) must not keep a previous
		// reply's values.
		switch v := out.(type) {
		case *domainwire.RateReply:
			*v = domainwire.RateReply{}
		case *domainwire.ReserveReply:
			*v = domainwire.ReserveReply{}
		}
		if err := json.Unmarshal(m.Data, out); err != nil {
			t.Fatalf("reply %s: %v", m.Data, err)
		}
	}
	return ""
}

func TestRequestBurstsThroughTiers(t *testing.T) {
	e := start(t, nil)
	var r domainwire.RateReply
	// Tier 1 (3 per second) then a burst into tier 2; the hard limit of 5
	// per second binds the sixth hit.
	for i, want := range []int64{1, 1, 1, 1, 1, 0} {
		if code := e.call(t, domainwire.OpRequest, "api", `{"domain":"a"}`, &r); code != "" {
			t.Fatalf("request %d: error %s", i, code)
		}
		if r.Granted != want {
			t.Fatalf("request %d: granted %d, want %d (%+v)", i, r.Granted, want, r)
		}
		if i == 3 && (!r.Burst || r.Tier != 2) {
			t.Errorf("request 4 should burst into tier 2: %+v", r)
		}
	}
	if !r.HardLimited || r.HardLimit != 5 || r.GlobalLimit != domainwire.Unlimited || r.DomainHitsLastSecond != 5 {
		t.Errorf("last reply %+v: want hard-limited, hard 5, global unlimited, 5 hits in the last second", r)
	}
	// Another domain has a log of its own.
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"b","copies":3}`, &r); r.Granted != 3 || r.GlobalHitsLastSecond != 8 {
		t.Errorf("domain b: %+v", r)
	}
	// min_copies: 4 asked, at least 1: the largest n allowed is granted.
	e.clk.add(1100 * time.Millisecond)
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"b","copies":9,"min_copies":1}`, &r); r.Granted < 1 || r.Granted > 5 {
		t.Errorf("copies 9 min 1: granted %d", r.Granted)
	}
}

// TestMinCopiesZero: an explicit min_copies of 0 is the paper's range
// [0, copies]: the largest n that fits is granted, where leaving
// min_copies out is all or nothing.
func TestMinCopiesZero(t *testing.T) {
	e := start(t, nil)
	var r domainwire.ReserveReply
	// Domain c (no group) takes 5 of the global 8: 3 left.
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"c","copies":5,"client_id":"c1"}`, &r); r.Granted != 5 {
		t.Fatalf("reserve 5: %+v", r)
	}
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"d","copies":5,"client_id":"c2"}`, &r); r.Granted != 0 || r.GlobalHolds != 5 {
		t.Fatalf("all or nothing by default: %+v", r)
	}
	// Through both decoders (the escape sends the second body to the
	// strict one); the first hold is released before the second try.
	for i, body := range []string{`{"domain":"d","copies":5,"min_copies":0,"client_id":"c2"}`, `{"domain":"\u0064","copies":5,"min_copies":0,"client_id":"c2"}`} {
		if code := e.call(t, domainwire.OpReserve, "sandbox", body, &r); code != "" || r.Granted != 3 || r.HoldID == "" || r.GlobalHolds != 8 {
			t.Fatalf("reserve %s with 3 left: %s %+v; want 3 granted", body, code, r)
		}
		if i == 0 {
			if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c2","hold_id":"`+r.HoldID+`"}`, nil); code != "" {
				t.Fatalf("release: %s", code)
			}
		}
	}
	// Nothing left: granted 0 and no hold, as with min_copies 1.
	if code := e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"d","copies":5,"min_copies":0,"client_id":"c2"}`, &r); code != "" ||
		r.Granted != 0 || r.HoldID != "" || r.GlobalHolds != 8 {
		t.Fatalf("reserve with nothing left: %s %+v", code, r)
	}
	// Hits: the hard limit of 5 per second leaves 2 after 3.
	var rr domainwire.RateReply
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"a","copies":3}`, &rr); rr.Granted != 3 {
		t.Fatalf("request 3: %+v", rr)
	}
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"a","copies":5}`, &rr); rr.Granted != 0 {
		t.Fatalf("all or nothing by default: %+v", rr)
	}
	if code := e.call(t, domainwire.OpRequest, "api", `{"domain":"a","copies":5,"min_copies":0}`, &rr); code != "" || rr.Granted != 2 || rr.DomainHitsLastSecond != 5 {
		t.Fatalf("request 5 min 0 with 2 left: %s %+v; want 2 granted", code, rr)
	}
}

func TestHoldLifecycle(t *testing.T) {
	e := start(t, nil)
	var r domainwire.ReserveReply
	if code := e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":3,"client_id":"c1"}`, &r); code != "" || r.Granted != 3 || r.HoldID == "" {
		t.Fatalf("reserve 3: %s %+v", code, r)
	}
	if len(r.Groups) != 1 || r.Groups[0] != "free" || r.GroupHolds[0].Holds != 3 || r.GroupHolds[0].Limit != 6 || r.DomainLimit != 5 || r.GlobalLimit != 8 {
		t.Errorf("context data: %+v", r)
	}
	h1 := r.HoldID
	// a may hold 5: 3 more asked, at least 1, gets 2.
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":3,"min_copies":1,"client_id":"c1"}`, &r); r.Granted != 2 {
		t.Fatalf("reserve 3 min 1: %+v", r)
	}
	h2 := r.HoldID
	// All or nothing by default: nothing, and no hold.
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":1,"client_id":"c1"}`, &r); r.Granted != 0 || r.HoldID != "" {
		t.Fatalf("reserve above the domain limit: %+v", r)
	}
	// b shares the group's 6: 1 left.
	if e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"b","copies":2,"min_copies":1,"client_id":"c2"}`, &r); r.Granted != 1 {
		t.Fatalf("group pool: %+v", r)
	}
	var rel domainwire.ReleaseReply
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c2","hold_id":"`+h1+`"}`, nil); code != "403" {
		t.Errorf("release of another client's hold: %q, want 403", code)
	}
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"`+h1+`","copies":4}`, nil); code != "409" {
		t.Errorf("over-release: %q, want 409", code)
	}
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"`+h1+`","copies":1}`, &rel); code != "" || rel.Remaining != 2 {
		t.Errorf("partial release: %s %+v", code, rel)
	}
	// Transfer 2 of h2 (all it has) and seize them as another client.
	var tr domainwire.TransferReply
	if code := e.call(t, domainwire.OpTransfer, "sandbox", `{"client_id":"c1","hold_id":"`+h2+`","ttl":"1m"}`, &tr); code != "" || tr.Remaining != 0 {
		t.Fatalf("transfer: %s %+v", code, tr)
	}
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"`+h2+`"}`, nil); code != "404" {
		t.Errorf("release of a fully transferred hold: %q, want 404", code)
	}
	if st := e.srv.Stats(); st.CopiesHeld != 2+2+1 || st.Transfers != 1 {
		t.Errorf("staged copies stay held: %+v", st)
	}
	var sz domainwire.SeizeReply
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+tr.TransferID+`"}`, &sz); code != "" ||
		sz.Copies != 2 || sz.Domain != "a" || sz.Namespace != "app" || sz.Resource != "sandbox" || len(sz.Groups) != 1 {
		t.Fatalf("seize: %s %+v", code, sz)
	}
	// A seize is idempotent for its seizer (whose reply may have been
	// lost), and refused to anyone else.
	var again domainwire.SeizeReply
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+tr.TransferID+`"}`, &again); code != "" ||
		again.HoldID != sz.HoldID || again.Copies != 2 || again.Resource != "sandbox" {
		t.Errorf("the seizer's second seize: %q %+v, want the same hold %+v", code, again, sz)
	}
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c4","transfer_id":"`+tr.TransferID+`"}`, nil); code != "409" {
		t.Errorf("another client's seize of a seized transfer: %q, want 409", code)
	}
	if st := e.srv.Stats(); st.CopiesHeld != 2+2+1 || st.Transfers != 0 || st.Holds != 3 {
		t.Errorf("after the seize: %+v", st)
	}
	if code := e.call(t, domainwire.OpRelease, "sandbox", `{"client_id":"c3","hold_id":"`+sz.HoldID+`"}`, &rel); code != "" || rel.Remaining != 0 {
		t.Errorf("release of the seized hold: %s %+v", code, rel)
	}
	if code := e.call(t, domainwire.OpSeize, "sandbox", `{"client_id":"c3","transfer_id":"`+tr.TransferID+`"}`, nil); code != "404" {
		t.Errorf("seize again after releasing the seized hold: %q, want 404", code)
	}
	if st := e.srv.Stats(); st.CopiesHeld != 3 || st.Holds != 2 {
		t.Errorf("after the releases: %+v", st)
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	e := start(t, nil)
	var r domainwire.ReserveReply
	e.call(t, domainwire.OpReserve, "sandbox", `{"domain":"a","copies":2,"client_id":"c1"}`, &r)
	before := e.srv.Stats()
	for _, c := range []struct {
		op, res, body, code string
	}{
		{domainwire.OpReserve, "nope", `{"domain":"a","client_id":"c"}`, "404"},
		{domainwire.OpRequest, "sandbox", `{"domain":"a"}`, "409"},
		{domainwire.OpReserve, "api", `{"domain":"a","client_id":"c"}`, "409"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":-1,"client_id":"c"}`, "400"},
		// An explicit copies of 0 asks for nothing: both decoders (the
		// escape sends the second body to the strict one) refuse it.
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":0,"client_id":"c"}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"\u0061","copies":0,"client_id":"c"}`, "400"},
		{domainwire.OpRequest, "api", `{"domain":"a","copies":0}`, "400"},
		{domainwire.OpRequest, "api", `{"domain":"\u0061","copies":0,"min_copies":0}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":2,"min_copies":3,"client_id":"c"}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":NaN,"client_id":"c"}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":1e300,"client_id":"c"}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","client_id":"c","extra":1}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"","client_id":"c"}`, "400"},
		// A field named twice is refused, as on the other subjects,
		// whichever decoder reads the body (an escape or another case
		// sends it to the strict one), rather than the last one counting.
		{domainwire.OpRequest, "api", `{"domain":"a","domain":"b"}`, "400"},
		{domainwire.OpRequest, "api", `{"domain":"a","domain":"\u0062"}`, "400"},
		{domainwire.OpRequest, "api", `{"domain":"a","Domain":"b"}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","client_id":"c","client_id":"c1"}`, "400"},
		{domainwire.OpReserve, "sandbox", `{"domain":"a","copies":1,"copies":2,"client_id":"c"}`, "400"},
		{domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"` + r.HoldID + `","copies":1,"copies":2}`, "400"},
		{domainwire.OpRefresh, "sandbox", `{"client_id":"c1","client_id":"c2","holds":[]}`, "400"},
		{domainwire.OpRefresh, "sandbox", `{"client_id":"c1","holds":[{"hold_id":"` + r.HoldID + `","hold_id":"x","domain":"a","copies":2}]}`, "400"},
		{domainwire.OpRequest, "api", `{"domain":"a","copies":6}`, ""}, // above the hard limit: refused, not an error
		{domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"nosuchhold"}`, "404"},
		{domainwire.OpRelease, "sandbox", `{"client_id":"c1","hold_id":"` + r.HoldID + `","copies":3}`, "409"},
		{domainwire.OpTransfer, "sandbox", `{"client_id":"c1","hold_id":"` + r.HoldID + `","ttl":"-1s"}`, "400"},
		{domainwire.OpSeize, "sandbox", `{"client_id":"c1","transfer_id":"app.sandbox.nosuch"}`, "404"},
		{domainwire.OpSeize, "sandbox", `{"client_id":"c1","transfer_id":"app.api.nosuch"}`, "400"},
		{"grab", "sandbox", `{}`, "400"},
	} {
		if code := e.call(t, c.op, c.res, c.body, nil); code != c.code {
			t.Errorf("%s %s %s: code %q, want %q", c.op, c.res, c.body, code, c.code)
		}
	}
	after := e.srv.Stats()
	if after.CopiesHeld != before.CopiesHeld || after.Holds != before.Holds || after.HitsGranted != before.HitsGranted || after.Transfers != 0 {
		t.Errorf("bad input changed state: before %+v, after %+v", before, after)
	}
	if code := e.call(t, domainwire.OpReserve, "nope", `{"domain":"a","client_id":"c"}`, nil); code != "404" {
		t.Error("unknown namespace resource")
	}
	m, err := e.nc.Request(domainwire.Subject("root", domainwire.OpReserve, "other", "x"), []byte(`{"domain":"a","client_id":"c"}`), 30*time.Second)
	if err != nil || m.Header.Get("Nats-Service-Error-Code") != "404" {
		t.Errorf("unknown namespace: %v %v", m, err)
	}
}

func TestNamespaceSwitches(t *testing.T) {
	e := start(t, nil)
	ns := testNamespace()
	ns.IgnoreConfigured = true
	e.cfg.set(ns)
	var r domainwire.RateReply
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"a","copies":50}`, &r); r.Granted != 50 || !r.Ignored {
		t.Errorf("ignore_configured: %+v", r)
	}
	if code := e.call(t, domainwire.OpRequest, "unknown", `{"domain":"a"}`, nil); code != "404" {
		t.Errorf("unconfigured resource without allow_unconfigured: %q", code)
	}
	ns = testNamespace()
	ns.AllowUnconfigured = true
	e.cfg.set(ns)
	if e.call(t, domainwire.OpRequest, "api", `{"domain":"c","copies":50}`, &r); r.Granted != 0 || r.Ignored {
		t.Errorf("limits back on after the reload: %+v", r)
	}
	if e.call(t, domainwire.OpRequest, "unknown", `{"domain":"a","copies":1000}`, &r); r.Granted != 1000 || !r.Unconfigured || r.DomainHitsLastSecond != 1000 {
		t.Errorf("allow_unconfigured: granted and counted: %+v", r)
	}
	var res domainwire.ReserveReply
	if e.call(t, domainwire.OpReserve, "pool", `{"domain":"a","copies":1000,"client_id":"c"}`, &res); res.Granted != 1000 || !res.Unconfigured || res.GlobalHolds != 1000 {
		t.Errorf("allow_unconfigured copies: %+v", res)
	}
}

// TestTenantsOfANamespace: a namespace that lists its tenants refuses
// (403) the requests of any other tenant, as the tenant's subject names
// it (allot.t.<tenant>.…, which its service import fills with its account
// name), and changes nothing for them; a Nats-Request-Info header naming
// a listed tenant changes nothing either. Requests on the plain subjects
// (the service's own account) and from a listed tenant are served.
func TestTenantsOfANamespace(t *testing.T) {
	e := start(t, nil)
	ns := testNamespace()
	ns.Tenants = []string{"TENANT_A"}
	e.cfg.set(ns)
	ask := func(subject string) string {
		t.Helper()
		msg := nats.NewMsg(subject)
		msg.Data = []byte(`{"domain":"a","copies":1,"client_id":"c"}`)
		msg.Header.Set("Nats-Request-Info", `{"acc":"TENANT_A","user":"forged"}`)
		m, err := e.nc.RequestMsg(msg, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return m.Header.Get("Nats-Service-Error-Code")
	}
	if code := ask(domainwire.TenantSubject("TENANT_B", "root", domainwire.OpReserve, "app", "sandbox")); code != "403" {
		t.Errorf("TENANT_B's reserve: code %q, want 403", code)
	}
	if st := e.srv.Stats(); st.CopiesHeld != 0 || st.Reserves != 0 {
		t.Fatalf("a refused request changed the state: %+v", st)
	}
	for _, subject := range []string{domainwire.TenantSubject("TENANT_A", "root", domainwire.OpReserve, "app", "sandbox"),
		domainwire.Subject("root", domainwire.OpReserve, "app", "sandbox")} {
		if code := ask(subject); code != "" {
			t.Errorf("reserve on %s: code %s, want served", subject, code)
		}
	}
	if st := e.srv.Stats(); st.CopiesHeld != 2 {
		t.Fatalf("served requests: %+v", st)
	}
}

// TestTenantSubjectsReachTheSamePartition: with three partitions behind
// the subject mappings, a tenant's operations on a resource reach the
// partition that serves the plain subjects of that resource, so one
// leader counts both.
func TestTenantSubjectsReachTheSamePartition(t *testing.T) {
	s, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: domainwire.Mappings("root", 3)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	cfg := &config{}
	ns := testNamespace()
	ns.AllowUnconfigured = true
	cfg.set(ns)
	var parts []*domainserver.Server
	for i := range 3 {
		parts = append(parts, run(t, natstest.Conn(t, s), domainserver.Options{Partition: i, Partitions: 3, Config: sources.DomainsFunc(cfg.get),
			HoldTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}, nil))
	}
	nc := natstest.Conn(t, s)
	// which reports the partition whose count a reserve raised.
	held := func() []int64 {
		var out []int64
		for _, p := range parts {
			out = append(out, p.Stats().CopiesHeld)
		}
		return out
	}
	seen := map[int]bool{}
	for r := range 12 {
		res := fmt.Sprint("pool", r)
		got := []int{}
		for _, subject := range []string{domainwire.Subject("root", domainwire.OpReserve, "app", res),
			domainwire.TenantSubject("TENANT_A", "root", domainwire.OpReserve, "app", res)} {
			before := held()
			m, err := nc.Request(subject, []byte(`{"domain":"a","copies":1,"client_id":"c"}`), 30*time.Second)
			if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
				t.Fatalf("reserve on %s: %v %s", subject, err, m.Data)
			}
			after := held()
			for i := range after {
				if after[i] != before[i] {
					got = append(got, i)
				}
			}
		}
		if len(got) != 2 || got[0] != got[1] {
			t.Fatalf("%s: the plain and the tenant reserve raised partitions %v; want one partition twice", res, got)
		}
		seen[got[0]] = true
	}
	if len(seen) < 2 {
		t.Fatalf("12 resources all on partitions %v: the mapping does not spread them", seen)
	}
}

// TestUnknownOperationAcrossPartitions: with partitions behind the
// mappings, an operation the service does not know reaches a leader and
// is answered 400 naming it, as with one partition, not "no responders".
func TestUnknownOperationAcrossPartitions(t *testing.T) {
	s, err := embed.Start(embed.Options{StoreDir: t.TempDir(), Mappings: domainwire.Mappings("root", 3)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	cfg := &config{}
	cfg.set(testNamespace())
	for i := range 3 {
		run(t, natstest.Conn(t, s), domainserver.Options{Partition: i, Partitions: 3, Config: sources.DomainsFunc(cfg.get),
			HoldTTL: time.Hour, Logger: slog.New(slog.DiscardHandler)}, nil)
	}
	nc := natstest.Conn(t, s)
	for r := range 6 {
		res := fmt.Sprint("pool", r)
		for _, subject := range []string{domainwire.Subject("root", "reserv", "app", res),
			domainwire.TenantSubject("TENANT_A", "root", "reserv", "app", res)} {
			m, err := nc.Request(subject, []byte(`{"domain":"a","copies":1,"client_id":"c"}`), 30*time.Second)
			if err != nil {
				t.Fatalf("%s: %v, want a 400 from a partition's leader", subject, err)
			}
			if code := m.Header.Get("Nats-Service-Error-Code"); code != "400" || !strings.Contains(string(m.Data), `unknown operation \"reserv\"`) {
				t.Fatalf("%s: code %q %s, want 400 naming the operation", subject, code, m.Data)
			}
		}
	}
}
