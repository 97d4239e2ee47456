package httplimit

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/agent/internal/limittest"
	"github.com/allot/allot/internal/poll"
)

func get(t *testing.T, url string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })

// TestRefuses: through a real coordinator granting 1/s, the first request
// takes the one token and the next ones get 429 with Retry-After and the
// RateLimit fields. The agent's clock stands still but when the test
// moves it: on the real clock, a second between two requests on a
// loaded machine earned the next one a token.
func TestRefuses(t *testing.T) {
	t.Parallel()
	clk := clocktest.At(time.Now())
	a := limittest.AgentWith(t, []agent.Option{agent.WithClock(clk)}, limittest.Template("api", 1, false))
	lim, err := a.Rate("api", agent.WithWants(10))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := New(a, Options{Key: Fixed("api"), Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(ok))
	defer srv.Close()
	poll.Until(t, 10*time.Second, "a lease of 1/s", func() bool { return lim.Status().Granted == 1 })
	clk.Advance(time.Second)
	if n := lim.Tokens(); n < 1 {
		t.Fatalf("%v tokens a second into a lease of 1/s", n)
	}

	resp := get(t, srv.URL)
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Policy") != `"api";q=1;w=1` || resp.Header.Get("RateLimit") == "" {
		t.Fatalf("first request: %d, headers %v", resp.StatusCode, resp.Header)
	}
	resp = get(t, srv.URL)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second request within the second: %d, want 429", resp.StatusCode)
	}
	if got := resp.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	if got := resp.Header.Get("RateLimit"); got != `"api";r=0;t=1` {
		t.Errorf("RateLimit %q", got)
	}
	if st := lim.Status(); st.Shadow || st.WouldRefuse != 0 {
		t.Errorf("status %+v: not in shadow mode", st)
	}

	// A Refused handler writes the refusal, after the headers are set.
	custom, err := New(a, Options{Key: Fixed("api"), Refused: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	})})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(custom.Handler(ok))
	defer srv2.Close()
	resp = get(t, srv2.URL)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Errorf("custom refusal: %d, headers %v", resp.StatusCode, resp.Header)
	}
}

// TestKeys: Route names a resource per pattern, Header one per value up
// to MaxKeys, then the overflow resource; "" is not limited.
func TestKeys(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("*", 100, false))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", ok)
	mux.Handle("/", ok)
	mw, err := New(a, Options{Key: Route("http/", mux), Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(mux))
	defer srv.Close()
	get(t, srv.URL+"/items/7")
	get(t, srv.URL+"/other")

	tenants, err := New(a, Options{Key: Header("tenant/", "X-Tenant"), MaxKeys: 2, Overflow: "tenant-overflow", Logger: limittest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv2 := httptest.NewServer(tenants.Handler(ok))
	defer srv2.Close()
	get(t, srv2.URL, "X-Tenant", "acme corp")
	get(t, srv2.URL, "X-Tenant", "globex")
	get(t, srv2.URL, "X-Tenant", "initech")
	get(t, srv2.URL)

	exempt, err := New(a, Options{Key: func(*http.Request) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	srv3 := httptest.NewServer(exempt.Handler(ok))
	defer srv3.Close()
	if resp := get(t, srv3.URL); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
		t.Errorf("exempt request: %d %v", resp.StatusCode, resp.Header)
	}

	var ids []string
	for _, st := range a.Status() {
		ids = append(ids, st.ResourceID)
	}
	want := []string{"http//", "http/GET_/items/{id}", "tenant-overflow", "tenant/acme_corp", "tenant/globex"}
	if len(ids) != len(want) {
		t.Fatalf("resources %q, want %q", ids, want)
	}
	for i := range want {
		if ids[i] != want[i] {
			t.Fatalf("resources %q, want %q", ids, want)
		}
	}
}

// TestShadow: a shadow template lets every request through, with no
// RateLimit fields (nothing is enforced), and the agent counts what the
// grant would have refused.
func TestShadow(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("watched", 1, true))
	// The first request must wait for the first lease however slow a
	// loaded machine is (the default wait, 250ms, is not that): one that
	// gives up is admitted before shadow mode is known, and not counted.
	mw, err := New(a, Options{Key: Fixed("watched"), Logger: limittest.Quiet, FirstLeaseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(ok))
	defer srv.Close()
	get(t, srv.URL) // creates the resource, waiting for its first lease
	lim, _ := a.Rate("watched")
	poll.Until(t, 10*time.Second, "shadow mode", func() bool { return lim.Status().Shadow })
	start := time.Now()
	for i := range 30 {
		if resp := get(t, srv.URL); resp.StatusCode != 200 || resp.Header.Get("RateLimit") != "" {
			t.Fatalf("request %d in shadow mode: %d %v", i, resp.StatusCode, resp.Header)
		}
	}
	// At 1/s the shadow bucket has a token for a few of the 31 requests,
	// and one more for each second the requests took.
	want := 25 - int(time.Since(start)/time.Second)
	if st := lim.Status(); st.ShadowAdmitted != 31 || int(st.WouldRefuse) < want {
		t.Errorf("ShadowAdmitted %d, WouldRefuse %d; want 31 (the first request waited for the lease) and at least %d at 1/s", st.ShadowAdmitted, st.WouldRefuse, want)
	}
}

func TestBadOptions(t *testing.T) {
	a := limittest.Agent(t)
	for _, o := range []Options{{}, {Key: Fixed("x"), MaxKeys: -1}, {Key: Fixed("x"), Overflow: "has space"}} {
		if _, err := New(a, o); err == nil {
			t.Errorf("New(%+v) succeeded", o)
		}
	}
	if _, err := New(nil, Options{Key: Fixed("x")}); err == nil {
		t.Error("New(nil agent) succeeded")
	}
}

// TestNewRouteServedWhileCapacityIsUnused: a route's first requests, sent
// at once as a page load or a script would, are served while the global
// capacity (100/s) sits unused: the first waits for the route's first
// lease, and when the requests outrun that lease (asked for before any
// demand was known) the agent asks again at once and the refused request
// waits for the answer. Before, the first request got 429 (capacity 0
// until the first lease) and, after idling, 8 of 20 requests in the first
// second were refused with 100 of 100 unused.
func TestNewRouteServedWhileCapacityIsUnused(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("route", 100, false))
	// A generous wait: the test checks that requests wait for capacity,
	// not how fast a loaded machine answers (the default is 250ms).
	mw, err := New(a, Options{Key: Fixed("route"), Logger: limittest.Quiet, FirstLeaseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(ok))
	defer srv.Close()
	for i := range 20 {
		if resp := get(t, srv.URL); resp.StatusCode != 200 {
			t.Fatalf("request %d of a new route with 100/s unused: %d", i, resp.StatusCode)
		}
	}
}

// TestNoWaitRefusesFirstRequest: with FirstLeaseWait negative, a new
// route's first request is refused until its lease arrives, as before.
func TestNoWaitRefusesFirstRequest(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("nowait", 100, false))
	mw, err := New(a, Options{Key: Fixed("nowait"), Logger: limittest.Quiet, FirstLeaseWait: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(ok))
	defer srv.Close()
	if resp := get(t, srv.URL); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("first request without waiting: %d, want 429", resp.StatusCode)
	}
}

// TestClosedLimiter: a key whose limiter the service closed (an idle
// tenant's, to give its capacity back) is served by a new limiter on its
// next request, as Agent.Rate makes one once the old is closed; once the
// agent itself is closed, a key served before gets the 500 of a service
// without a limiter, as a new key does, not a 429 that blames the client.
// Before, the middleware kept the closed limiter: 429 with Retry-After 1
// on every request of that key, for good.
func TestClosedLimiter(t *testing.T) {
	t.Parallel()
	a := limittest.Agent(t, limittest.Template("tenant/*", 100, false))
	// A generous wait: the new limiter's first request waits for its first
	// lease however slow a loaded machine is (the default is 250ms).
	mw, err := New(a, Options{Key: Header("tenant/", "X-Tenant"), Logger: limittest.Quiet, FirstLeaseWait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw.Handler(ok))
	defer srv.Close()
	if resp := get(t, srv.URL, "X-Tenant", "acme"); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	lim, err := a.Rate("tenant/acme")
	if err != nil {
		t.Fatal(err)
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	if resp := get(t, srv.URL, "X-Tenant", "acme"); resp.StatusCode != 200 {
		t.Fatalf("request after the service closed the key's limiter: %d %v, want 200 from a new limiter", resp.StatusCode, resp.Header)
	}
	if st := a.Status(); len(st) != 1 || st[0].ResourceID != "tenant/acme" || st[0].Source != agent.SourceLease {
		t.Errorf("agent status %+v: want tenant/acme open again, on a lease", st)
	}

	a.Close()
	for _, tenant := range []string{"acme", "globex"} {
		if resp := get(t, srv.URL, "X-Tenant", tenant); resp.StatusCode != http.StatusInternalServerError || resp.Header.Get("Retry-After") != "" {
			t.Errorf("tenant %s after the agent closed: %d %v, want 500 without Retry-After", tenant, resp.StatusCode, resp.Header)
		}
	}
}

// TestContextEndsWhileWaiting: a request whose context ends while it
// waits for its key's first capacity (its client gone) is not refused as
// over the limit: no 429, no Retry-After, no Refused handler, but the 503
// quotahttp gives a request that ended while it waited. Before, it was
// answered as a refusal, and a Refused handler counting refusals counted
// clients that had gone.
func TestContextEndsWhileWaiting(t *testing.T) {
	t.Parallel()
	a := limittest.Unserved(t) // no lease ever arrives
	var refused atomic.Int32
	mw, err := New(a, Options{Key: Fixed("first"), Logger: limittest.Quiet, FirstLeaseWait: time.Minute,
		Refused: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { refused.Add(1) })})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	w := httptest.NewRecorder()
	mw.Handler(ok).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") != "" || refused.Load() != 0 {
		t.Errorf("request whose context ended while it waited: %d, Retry-After %q, Refused called %d times; want 503, none, 0",
			w.Code, w.Header().Get("Retry-After"), refused.Load())
	}
}
