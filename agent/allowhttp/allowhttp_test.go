package allowhttp_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/agent/allowhttp"
	"github.com/allot/allot/agent/internal/demo"
	"github.com/allot/allot/internal/poll"
)

// get asks h at query and decodes the answer.
func get(t *testing.T, h http.Handler, method, query string) (*httptest.ResponseRecorder, allowhttp.Answer) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(method, allowhttp.Path+"?"+query, nil))
	var a allowhttp.Answer
	if w.Code == http.StatusOK || w.Code == http.StatusTooManyRequests {
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatalf("%s: %v", w.Body, err)
		}
	}
	return w, a
}

// TestAllow: a coordinator grants "db" 2 per second; the handler admits
// what the agent's lease admits and refuses the rest with 429, Retry-After
// and the RateLimit fields, and refuses bad requests with 400.
func TestAllow(t *testing.T) {
	a, stop, err := demo.Agent(map[string]float64{"db": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	h, err := allowhttp.New(a, allowhttp.Options{MaxResources: 2})
	if err != nil {
		t.Fatal(err)
	}
	// The first request waits for the first lease.
	w, ans := get(t, h, http.MethodGet, "resource=db&wait=5s")
	if w.Code != http.StatusOK || !ans.Allowed || ans.Resource != "db" {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	lim, _ := a.Rate("db")
	poll.Until(t, 10*time.Second, "the lease of 2 per second", func() bool { return lim.Limit() == 2 })
	// Drain the bucket, then one more is refused.
	for lim.Tokens() >= 1 {
		if w, _ := get(t, h, http.MethodPost, "resource=db"); w.Code != http.StatusOK {
			break
		}
	}
	w, ans = get(t, h, http.MethodGet, "resource=db&n=2")
	if w.Code != http.StatusTooManyRequests || ans.Allowed || ans.Limit != 2 || ans.RetryAfterMS <= 0 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("refused: %d %s %v", w.Code, w.Body, w.Header())
	}
	if p := w.Header().Get("RateLimit-Policy"); p != `"db";q=2;w=1` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	for _, tc := range []struct {
		method, query string
		code          int
		want          string
	}{
		{http.MethodGet, "", 400, "resource"},
		{http.MethodGet, "resource=a%20b", 400, "resource"},
		{http.MethodGet, "resource=db&n=0", 400, "tokens in [1,"},
		{http.MethodGet, "resource=db&n=x", 400, "whole number"},
		{http.MethodGet, "resource=db&wait=1h", 400, "wait"},
		{http.MethodDelete, "resource=db", 405, "GET"},
		{http.MethodGet, "resource=other", 200, ""},
		{http.MethodGet, "resource=third", 503, "already 2 resources"},
	} {
		w, _ := get(t, h, tc.method, tc.query)
		if w.Code != tc.code && !(tc.code == 200 && w.Code == http.StatusTooManyRequests) || !strings.Contains(w.Body.String(), tc.want) {
			t.Errorf("%s ?%s: %d %s; want %d with %q", tc.method, tc.query, w.Code, w.Body, tc.code, tc.want)
		}
	}
}

// leasedHandler is a handler on an agent that a coordinator granted
// capacity per second of "db", once the agent holds that lease.
func leasedHandler(t *testing.T, capacity float64) http.Handler {
	t.Helper()
	a, stop, err := demo.Agent(map[string]float64{"db": capacity})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	h, err := allowhttp.New(a, allowhttp.Options{MaxResources: 2})
	if err != nil {
		t.Fatal(err)
	}
	get(t, h, http.MethodGet, "resource=db&wait=5s")
	lim, _ := a.Rate("db")
	poll.Until(t, 10*time.Second, "the lease", func() bool { return lim.Limit() > 0 })
	return h
}

// TestAllowTinyLease: a lease of almost nothing refuses with a wait that
// is a positive number of milliseconds, as a lease of none does; it once
// overflowed to a negative one.
func TestAllowTinyLease(t *testing.T) {
	h := leasedHandler(t, 1e-300)
	w, ans := get(t, h, http.MethodGet, "resource=db&n=5")
	if w.Code != http.StatusTooManyRequests || ans.Allowed || ans.RetryAfterMS <= 0 || ans.RetryAfterMS > 60_000 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("refused: %d %s %v", w.Code, w.Body, w.Header())
	}
}

// TestAllowManyOnSmallLease: a refusal of the most tokens a request may
// ask for on a small lease (one in about three years, above
// keyed.MinRate) waits a positive number of milliseconds: n over the
// rate, in milliseconds, once overflowed an int64 to a negative wait.
func TestAllowManyOnSmallLease(t *testing.T) {
	h := leasedHandler(t, 1e-8)
	w, ans := get(t, h, http.MethodGet, "resource=db&n="+strconv.Itoa(allowhttp.MaxTokens))
	if w.Code != http.StatusTooManyRequests || ans.Allowed || ans.RetryAfterMS <= 0 {
		t.Fatalf("refused: %d %s %v", w.Code, w.Body, w.Header())
	}
	if ra, err := strconv.ParseInt(w.Header().Get("Retry-After"), 10, 64); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
}

// TestAllowAboveBurst: n above the most one request can be granted on the
// lease in force (its burst, a second's worth) is refused, with the burst
// in the answer and a retry time of the lease's next refresh, when a
// larger lease may come: not the time n tokens take to accrue, after which
// the same request was refused again, for ever.
func TestAllowAboveBurst(t *testing.T) {
	a, stop, err := demo.Agent(map[string]float64{"db": 2})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	h, err := allowhttp.New(a, allowhttp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := get(t, h, http.MethodGet, "resource=db&wait=5s"); w.Code != http.StatusOK {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	lim, _ := a.Rate("db")
	poll.Until(t, 10*time.Second, "a full bucket on the lease of 2 per second", func() bool { return lim.Limit() == 2 && lim.Tokens() >= 2 })
	refresh := lim.Status().RefreshInterval
	w, ans := get(t, h, http.MethodGet, "resource=db&n=3")
	if w.Code != http.StatusTooManyRequests || ans.Allowed || ans.Burst != 2 {
		t.Fatalf("3 tokens on a burst of 2: %d %s", w.Code, w.Body)
	}
	if want := max(refresh, time.Second).Milliseconds(); refresh <= 0 || ans.RetryAfterMS != want {
		t.Fatalf("retry_after_ms %d, want the lease's refresh interval %v", ans.RetryAfterMS, refresh)
	}
	if w, ans := get(t, h, http.MethodGet, "resource=db&n=2"); w.Code != http.StatusOK || ans.Burst != 2 {
		t.Fatalf("2 tokens on a burst of 2: %d %s", w.Code, w.Body)
	}
}
