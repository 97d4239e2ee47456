package dashboard

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// TokenCookie is the cookie a visit with ?token= sets, so that the page's
// later requests (its event stream, its script) carry the token.
const TokenCookie = "allot_dashboard_token"

// MinTokenLength is the shortest Options.Token New accepts.
const MinTokenLength = 16

// guard refuses requests whose Host is not one the dashboard answers
// (DNS rebinding) and, with a token, requests that do not carry it.
type guard struct {
	hosts []string // allowed names besides IP addresses and localhost names, lower case
	token string   // required when set
	path  string   // the cookie's: where the dashboard is mounted
	next  http.Handler
}

// allowedHost reports whether a request's Host (host or host:port) may
// reach the dashboard: an IP address (a page of another site cannot get
// its name to be one), localhost or a name under .localhost, or one of
// hosts. A browser sends the name of the site it loaded the page from,
// so a site whose name was made to resolve to this host (DNS rebinding)
// is refused.
func (g *guard) allowedHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	switch {
	case host == "":
		return false
	case net.ParseIP(host) != nil:
		return true
	case host == "localhost" || strings.HasSuffix(host, ".localhost"):
		return true
	}
	return slices.Contains(g.hosts, host)
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.allowedHost(r.Host) {
		http.Error(w, fmt.Sprintf("dashboard: host %q is not one this dashboard answers (IP addresses, localhost, and the names it is told: allot's --dashboard-hosts, dashboard.Options.AllowedHosts)", r.Host), http.StatusForbidden)
		return
	}
	if g.token == "" {
		g.next.ServeHTTP(w, r)
		return
	}
	if q := r.URL.Query(); q.Has("token") {
		if !g.valid(q.Get("token")) {
			http.Error(w, "dashboard: wrong token", http.StatusUnauthorized)
			return
		}
		// Keep the token in a cookie, not in the address bar or history.
		http.SetCookie(w, &http.Cookie{Name: TokenCookie, Value: g.token, Path: g.path, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		q.Del("token")
		u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
		http.Redirect(w, r, u.String(), http.StatusSeeOther)
		return
	}
	if g.carriesToken(r) {
		g.next.ServeHTTP(w, r)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="allot dashboard"`)
	http.Error(w, "dashboard: a token is required: open this address with ?token=TOKEN once (the browser then keeps it in a cookie), or send the header Authorization: Bearer TOKEN", http.StatusUnauthorized)
}

// carriesToken reports whether r has the token in its Authorization
// header or its cookie.
func (g *guard) carriesToken(r *http.Request) bool {
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && g.valid(strings.TrimSpace(auth)) {
		return true
	}
	c, err := r.Cookie(TokenCookie)
	return err == nil && g.valid(c.Value)
}

// valid compares in constant time, so that the time of a refusal says
// nothing of how much of a guess was right.
func (g *guard) valid(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(g.token)) == 1
}

// normalHosts validates and lower-cases Options.AllowedHosts.
func normalHosts(hosts []string) ([]string, error) {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		n := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(h), "."))
		if n == "" || strings.ContainsAny(n, ":/ []@") {
			return nil, fmt.Errorf("dashboard: allowed host %q: want a host name without port or scheme, such as allot.example.com", h)
		}
		out = append(out, n)
	}
	return out, nil
}
