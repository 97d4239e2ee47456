package quotahttp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/natstest"
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

// TestUnavailable: with no quota service (and no fallback), the
// middleware answers 503 by default and passes with FailOpen; an empty key
// exempts the request and a malformed one is a 500.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	s := natstest.Server(t)
	a, err := agent.New(natstest.Conn(t, s), agent.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	get := func(h http.Handler) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		return w
	}
	key := RemoteIP("api")
	if w := get(New(a, key)(ok)); w.Code != http.StatusServiceUnavailable {
		t.Errorf("fail closed: %d %s", w.Code, w.Body)
	}
	if w := get(New(a, key, WithUnavailable(FailOpen))(ok)); w.Code != http.StatusOK || w.Body.String() != "ok" {
		t.Errorf("fail open: %d %s", w.Code, w.Body)
	}
	if w := get(New(a, func(*http.Request) string { return "" })(ok)); w.Code != http.StatusOK {
		t.Errorf("exempt: %d %s", w.Code, w.Body)
	}
	if w := get(New(a, func(*http.Request) string { return "no bucket" })(ok)); w.Code != http.StatusInternalServerError {
		t.Errorf("malformed key: %d %s", w.Code, w.Body)
	}
	if w := get(New(a, key, WithTokens(func(*http.Request) int64 { return -1 }))(ok)); w.Code != http.StatusBadRequest {
		t.Errorf("negative tokens: %d %s", w.Code, w.Body)
	}
}
