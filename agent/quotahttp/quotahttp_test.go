package quotahttp

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/quota"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/quotatest"
)

func TestName(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"":          "_",
		"alice":     "alice",
		"Bob42":     "Bob42",
		"a_b":       "a_5fb",
		"a.b":       "a_2eb",
		"ü":         "_c3_bc",
		"key:1/2 3": "key_3a1_2f2_203",
	}
	seen := map[string]string{}
	for in, want := range cases {
		got := Name(in)
		if got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
		if prev, ok := seen[got]; ok {
			t.Errorf("Name(%q) = Name(%q)", in, prev)
		}
		seen[got] = in
	}
	long := Name(string(make([]byte, 100)))
	if len(long) != 34 || long[:2] != "_h" {
		t.Errorf("long name = %q", long)
	}
}

func TestKeys(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("GET", "/", nil)
	for addr, want := range map[string]string{
		"10.0.0.1:1234":         "api:10_0_0_1",
		"[::1]:80":              "api:__1",
		"[::ffff:10.0.0.1]:80":  "api:10_0_0_1",
		"[fe80::1%eth0]:80":     "api:fe80__1",
		"not an address":        "api:not_20an_20address",
		"[2001:db8::2]:443":     "api:2001_db8__2",
		"192.168.100.200:65535": "api:192_168_100_200",
	} {
		r.RemoteAddr = addr
		if got := RemoteIP("api")(r); got != want {
			t.Errorf("RemoteIP(%q) = %q, want %q", addr, got, want)
		}
	}
	if got := Header("keys", "X-Api-Key")(r); got != "keys:_" {
		t.Errorf("missing header keys %q, want keys:_", got)
	}
	r.Header.Set("X-Api-Key", "k-1")
	if got := Header("keys", "X-Api-Key")(r); got != "keys:k_2d1" {
		t.Errorf("header keys %q", got)
	}
}

// newQuota returns a quota client of a quiet agent on nc, both closed
// when the test ends.
func newQuota(t *testing.T, nc *nats.Conn, opts ...quota.Option) *quota.Client {
	t.Helper()
	a, err := agent.New(nc, agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	q, err := quota.New(a, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

// TestUnavailable: with no quota service (and no fallback), the
// middleware answers 503 by default and passes with FailOpen; an empty key
// exempts the request and a malformed one is a 500.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	q := newQuota(t, natstest.Conn(t, s))
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	get := func(h http.Handler) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w
	}
	key := RemoteIP("api")
	if w := get(New(q, key)(ok)); w.Code != http.StatusServiceUnavailable {
		t.Errorf("fail closed: %d %s", w.Code, w.Body)
	}
	if w := get(New(q, key, WithUnavailable(FailOpen))(ok)); w.Code != http.StatusOK || w.Body.String() != "ok" {
		t.Errorf("fail open: %d %s", w.Code, w.Body)
	}
	if w := get(New(q, func(*http.Request) string { return "" })(ok)); w.Code != http.StatusOK {
		t.Errorf("exempt: %d %s", w.Code, w.Body)
	}
	if w := get(New(q, func(*http.Request) string { return "no bucket" })(ok)); w.Code != http.StatusInternalServerError {
		t.Errorf("malformed key: %d %s", w.Code, w.Body)
	}
	if w := get(New(q, key, WithTokens(func(*http.Request) int64 { return -1 }))(ok)); w.Code != http.StatusBadRequest {
		t.Errorf("negative tokens: %d %s", w.Code, w.Body)
	}
	// A count from the request above the most a take may ask for is the
	// client's mistake too, not a service outage to fail open or closed on.
	for _, u := range []OnUnavailable{FailClosed, FailOpen} {
		if w := get(New(q, key, WithUnavailable(u), WithTokens(func(*http.Request) int64 { return 1e12 + 1 }))(ok)); w.Code != http.StatusBadRequest {
			t.Errorf("10^12+1 tokens, %v: %d %s", u, w.Code, w.Body)
		}
	}
}

// TestSlowService: a service slower than the quota timeout (an in-test
// responder that never answers: a real server cannot be made this slow)
// is "unavailable", also for a request whose context is live, and not
// mistaken for the client going away.
func TestSlowService(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	if _, err := nc.Subscribe("allot.root.quota.take.>", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	q := newQuota(t, natstest.Conn(t, s), quota.WithTimeout(30*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := httptest.NewRecorder()
	New(q, RemoteIP("api"))(http.NotFoundHandler()).ServeHTTP(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "quota service unavailable") {
		t.Errorf("slow service: %d %q", w.Code, w.Body)
	}
}

// TestService drives the middleware through the real quota service: each
// address has its own bucket of 2; the third request from one is refused
// with 429 and the headers, another address still passes; a bucket that
// answers OK_WAIT holds the request, unless WithMaxWait forbids it. The
// service's clock moves only when the test moves it: on the real one, a
// second between two requests on a loaded machine refilled a bucket, and
// a request the test expects refused was served.
func TestService(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	var mu sync.Mutex
	at := time.Now()
	advance := func(d time.Duration) { mu.Lock(); at = at.Add(d); mu.Unlock() }
	quotatest.StartClocked(t, natstest.Conn(t, s), func() time.Time { mu.Lock(); defer mu.Unlock(); return at }, map[string]string{
		"api":  `{"dynamic_bucket_template": {"size": 2, "fill_rate": 0.5, "wait_timeout": "0s"}}`,
		"slow": `{"default_bucket": {"size": 1, "fill_rate": 1, "wait_timeout": "2s"}}`,
		"shed": `{"default_bucket": {"size": 4, "fill_rate": 0.01, "max_tokens_per_request": 4, "critical_reserve": 0.5}}`,
	})
	// Every decision below must be the service's: the default quota
	// timeout (250ms) may pass under -race on a loaded machine, and the
	// middleware would then answer 503.
	q := newQuota(t, natstest.Conn(t, s), quota.WithTimeout(10*time.Second))
	var served atomic.Int64
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served.Add(1); _, _ = io.WriteString(w, "ok") })
	h := New(q, RemoteIP("api"))(ok)
	get := func(h http.Handler, addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i, want := range []string{"1", "0"} {
		w := get(h, "198.51.100.1:4000")
		if w.Code != http.StatusOK || w.Header().Get(HeaderLimit) != "2" || w.Header().Get(HeaderRemaining) != want ||
			w.Header().Get(HeaderReset) != "0" || w.Header().Get(HeaderRetryAfter) != "" {
			t.Fatalf("request %d: %d %v", i, w.Code, w.Header())
		}
	}
	w := get(h, "198.51.100.1:4001")
	// The next token is 2s away at 0.5/s.
	if w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderLimit) != "2" || w.Header().Get(HeaderRemaining) != "0" ||
		w.Header().Get(HeaderRetryAfter) != "2" || w.Header().Get(HeaderReset) != "2" {
		t.Fatalf("third request: %d %v %q", w.Code, w.Header(), w.Body)
	}
	if served.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", served.Load())
	}
	if w := get(h, "198.51.100.2:4000"); w.Code != http.StatusOK || w.Header().Get(HeaderRemaining) != "1" {
		t.Fatalf("another address: %d %v", w.Code, w.Header())
	}

	// OK_WAIT: the second request waits for the next token (up to 1s at
	// 1/s).
	slow := New(q, Header("slow", "X-Api-Key"))(ok)
	if w := get(slow, "192.0.2.1:1"); w.Code != http.StatusOK {
		t.Fatalf("slow first: %d", w.Code)
	}
	start := time.Now()
	w = get(slow, "192.0.2.1:1")
	if w.Code != http.StatusOK || w.Header().Get(HeaderReset) != "1" || time.Since(start) < 500*time.Millisecond {
		t.Fatalf("slow second: %d %v after %v; want held about 1s, then passed", w.Code, w.Header(), time.Since(start))
	}
	advance(time.Second) // the service's clock, by the wait sat out: the bucket is back to 0
	noWait := New(q, Header("slow", "X-Api-Key"), WithMaxWait(0))(ok)
	if w := get(noWait, "192.0.2.1:1"); w.Code != http.StatusTooManyRequests || w.Header().Get(HeaderRetryAfter) != "1" {
		t.Fatalf("no wait allowed: %d %v", w.Code, w.Header())
	}

	// Two tokens per request; requests marked sheddable cannot use the
	// half of the bucket kept for critical ones.
	shed := New(q, Header("shed", "X-Api-Key"), WithTokens(func(*http.Request) int64 { return 2 }),
		WithSheddable(func(r *http.Request) bool { return r.RemoteAddr == "192.0.2.9:1" }))(ok)
	if w := get(shed, "192.0.2.9:1"); w.Code != http.StatusOK || w.Header().Get(HeaderRemaining) != "2" {
		t.Fatalf("sheddable first: %d %v", w.Code, w.Header())
	}
	if w := get(shed, "192.0.2.9:1"); w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "reserved") {
		t.Fatalf("sheddable into the reserve: %d %v %q", w.Code, w.Header(), w.Body)
	}
	if w := get(shed, "192.0.2.8:1"); w.Code != http.StatusOK || w.Header().Get(HeaderRemaining) != "0" {
		t.Fatalf("critical into the reserve: %d %v", w.Code, w.Header())
	}
}
