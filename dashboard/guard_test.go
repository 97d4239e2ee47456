package dashboard_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/dashboard"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/webtest"
)

// guarded serves a dashboard of a real coordinator with opts' hosts and
// token, and returns its page's URL.
func guarded(t *testing.T, opts dashboard.Options) string {
	t.Helper()
	nc := natstest.Conn(t, natstest.Server(t))
	opts.Source = coordtest.Start(t, nc, coordinator.Options{})
	opts.Interval = 100 * time.Millisecond
	url, _ := serveDashboard(t, opts)
	return url
}

// TestHostChecked: the dashboard answers requests naming an IP address,
// localhost (or a name under .localhost) or one of its allowed hosts, and
// refuses any other Host with 403: a page of another site whose name was
// made to resolve to this host (DNS rebinding) cannot read it.
func TestHostChecked(t *testing.T) {
	url := guarded(t, dashboard.Options{AllowedHosts: []string{"Dash.Example.com"}})
	for _, tc := range []struct {
		host string
		code int
	}{
		{"", http.StatusOK}, // 127.0.0.1:port
		{"localhost:9464", http.StatusOK},
		{"localhost", http.StatusOK},
		{"app.localhost:9464", http.StatusOK},
		{"[::1]:9464", http.StatusOK},
		{"10.1.2.3:9464", http.StatusOK},
		{"dash.example.com:9464", http.StatusOK},
		{"DASH.example.com.", http.StatusOK},
		{"evil.example:9464", http.StatusForbidden},
		{"localhost.evil.example", http.StatusForbidden},
		{"dash.example.com.evil.example", http.StatusForbidden},
	} {
		for _, path := range []string{"", "snapshot", "app.js"} {
			if resp, _ := webtest.Get(t, url+path, tc.host); resp.StatusCode != tc.code {
				t.Errorf("Host %q, /%s: %s, want %d", tc.host, path, resp.Status, tc.code)
			}
		}
	}
}

// TestTokenRequired: with a token, a request without it, or with another,
// is refused (401); the header Authorization: Bearer or the cookie are
// let through; a visit with ?token= sets the cookie and is redirected to
// the address without the token; a foreign Host is refused even with the
// token.
func TestTokenRequired(t *testing.T) {
	const token = "0123456789abcdef0123"
	url := guarded(t, dashboard.Options{Token: token})
	for _, tc := range []struct {
		name string
		path string
		hdr  []string
		code int
	}{
		{"no token", "", nil, http.StatusUnauthorized},
		{"no token, snapshot", "snapshot", nil, http.StatusUnauthorized},
		{"no token, events", "events", nil, http.StatusUnauthorized},
		{"wrong bearer", "snapshot", []string{"Authorization: Bearer 0123456789abcdef0124"}, http.StatusUnauthorized},
		{"a prefix of it", "snapshot", []string{"Authorization: Bearer 0123456789"}, http.StatusUnauthorized},
		{"bearer", "snapshot", []string{"Authorization: Bearer " + token}, http.StatusOK},
		{"cookie", "", []string{"Cookie: " + dashboard.TokenCookie + "=" + token}, http.StatusOK},
		{"wrong cookie", "", []string{"Cookie: " + dashboard.TokenCookie + "=x"}, http.StatusUnauthorized},
		{"wrong query", "?token=nope", nil, http.StatusUnauthorized},
	} {
		resp, _ := webtest.Get(t, url+tc.path, "", tc.hdr...)
		if resp.StatusCode != tc.code {
			t.Errorf("%s: %s, want %d", tc.name, resp.Status, tc.code)
		}
		if tc.code == http.StatusUnauthorized && tc.path != "?token=nope" && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: 401 without WWW-Authenticate", tc.name)
		}
	}
	resp, _ := webtest.Get(t, url+"?resource=db&token="+token, "")
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || strings.Contains(loc, "token") || !strings.Contains(loc, "resource=db") {
		t.Fatalf("visit with the token: %s, Location %q", resp.Status, loc)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == dashboard.TokenCookie {
			cookie = c
		}
	}
	if cookie == nil || cookie.Value != token || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Path != "/dashboard/" {
		t.Fatalf("cookie %+v", cookie)
	}
	if resp, _ := webtest.Get(t, url+"snapshot", "evil.example", webtest.Bearer(token)...); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Host with the token: %s", resp.Status)
	}
}

// TestGuardOptionsRefused: a short token and an allowed host that is not
// a bare name are refused by New.
func TestGuardOptionsRefused(t *testing.T) {
	nc := natstest.Conn(t, natstest.Server(t))
	src := coordtest.Start(t, nc, coordinator.Options{})
	for _, tc := range []struct {
		opts dashboard.Options
		want string
	}{
		{dashboard.Options{Source: src, Token: "short"}, "the token has 5 characters: want at least 16"},
		{dashboard.Options{Source: src, AllowedHosts: []string{"dash.example:9464"}}, `allowed host "dash.example:9464": want a host name without port or scheme`},
		{dashboard.Options{Source: src, AllowedHosts: []string{"http://dash.example"}}, "want a host name"},
		{dashboard.Options{Source: src, AllowedHosts: []string{" "}}, "want a host name"},
	} {
		if _, err := dashboard.New(tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.opts, err, tc.want)
		}
	}
}
