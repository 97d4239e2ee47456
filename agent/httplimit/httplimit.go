// Package httplimit is net/http middleware that keeps a service within its
// share of allot rate limits: each request takes a token from the agent's
// rate limiter for its key (a route, a tenant header, one resource for
// everything), decided locally without touching the network. A refused
// request gets 429 Too Many Requests with Retry-After, and every response
// of a limited key carries the RateLimit-Policy and RateLimit header
// fields of draft-ietf-httpapi-ratelimit-headers.
//
// Putting a handler under a global limit is one more line and its error
// check, given an agent a:
//
//	mw, err := httplimit.New(a, httplimit.Options{Key: httplimit.Fixed("api/requests")})
//	…
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// The coordinator divides each resource's capacity among every instance
// of the service; configure the resources with templates (see
// docs/configuration.md). In shadow mode (a template's "shadow": true,
// or allot coordinator --shadow) the middleware admits what the agent
// admits, everything with automatic wants, and the agent counts what would
// have been refused (agent.Status.WouldRefuse).
package httplimit

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/keyed"
)

// A KeyFunc names the allot resource a request is counted against. The
// empty string exempts the request from limiting.
type KeyFunc func(r *http.Request) string

// Fixed counts every request against resource id.
func Fixed(id string) KeyFunc {
	return func(*http.Request) string { return id }
}

// Route counts each route against its own resource: prefix followed by
// the ServeMux pattern that serves the request, with spaces as '_'
// ("http/GET_/items/{id}"). Inside a ServeMux (a handler the mux
// routes to) the pattern is the request's own; outside one, pass the mux
// to look the pattern up. A request no pattern matches counts against
// prefix followed by "-".
func Route(prefix string, mux *http.ServeMux) KeyFunc {
	return func(r *http.Request) string {
		p := r.Pattern
		if p == "" && mux != nil {
			_, p = mux.Handler(r)
		}
		return keyed.ID(prefix, p)
	}
}

// Header counts requests against prefix followed by the value of header
// name (a tenant or API key, say), made a valid resource id; requests
// without it share prefix followed by "-". Every distinct value is a
// resource: Options.MaxKeys bounds how many.
func Header(prefix, name string) KeyFunc {
	return func(r *http.Request) string { return keyed.ID(prefix, r.Header.Get(name)) }
}

// Options configure the middleware.
type Options struct {
	// Key names each request's resource. Required.
	Key KeyFunc
	// MaxKeys bounds the distinct resources the middleware creates;
	// requests for keys beyond it share the resource Overflow. Default
	// 1000.
	MaxKeys int
	// Overflow is the resource of keys beyond MaxKeys. Default
	// "httplimit/overflow".
	Overflow string
	// Resource options apply to every limiter created (agent.WithWants,
	// agent.WithBurst, agent.WithPriority).
	Resource []agent.ResourceOption
	// Refused, if set, writes the response to a refused request instead of
	// a plain-text 429; the rate-limit headers are already set.
	Refused http.Handler
	// FirstLeaseWait is how long a request may wait for its key's first
	// capacity (a new key, or one whose lease decayed while idle; the
	// agent asks for it at once) instead of being refused: well under a
	// second, so a new route's first requests are served while the global
	// capacity is unused. Default 250ms; negative does not wait.
	FirstLeaseWait time.Duration
	// Logger receives errors (a key the agent refuses). Default
	// slog.Default().
	Logger *slog.Logger
}

// Middleware limits requests; create it with New.
type Middleware struct {
	set     *keyed.Set
	key     KeyFunc
	refused http.Handler
	log     *slog.Logger
	wait    time.Duration // Options.FirstLeaseWait
}

// New returns middleware that limits requests with a's rate limiters. It
// reports invalid options: a nil agent or Key, a negative MaxKeys, an
// invalid Overflow id.
func New(a *agent.Agent, o Options) (*Middleware, error) {
	if o.Key == nil {
		return nil, fmt.Errorf("httplimit: Options.Key is nil: use Fixed, Route, Header or a KeyFunc of your own")
	}
	if o.MaxKeys < 0 {
		return nil, fmt.Errorf("httplimit: Options.MaxKeys %d is negative", o.MaxKeys)
	}
	set, err := keyed.New(a, cmp.Or(o.MaxKeys, keyed.DefaultMaxKeys), cmp.Or(o.Overflow, "httplimit/overflow"), o.Resource)
	if err != nil {
		return nil, fmt.Errorf("httplimit: %w", err)
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	wait := o.FirstLeaseWait
	if wait == 0 {
		wait = keyed.DefaultFirstLeaseWait
	}
	return &Middleware{set: set, key: o.Key, refused: o.Refused, log: log, wait: wait}, nil
}

// Handler returns next behind the limit. A request whose context ends
// while it waits for its key's first capacity gets a 503, not a refusal:
// its client has gone.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := m.key(r)
		if id == "" {
			next.ServeHTTP(w, r)
			return
		}
		lim, err := m.set.Limiter(id)
		if err != nil {
			m.unavailable(w, id, err)
			return
		}
		d, err := m.set.DecideWait(r.Context(), id, lim, m.wait)
		if err != nil {
			m.unavailable(w, id, err)
			return
		}
		if !d.Allowed && r.Context().Err() != nil {
			// It ended while the request waited for its first capacity,
			// or before: the client has gone, and this is no refusal to
			// count or to advise a retry of (quotahttp answers the same).
			http.Error(w, "request ended while waiting for capacity", http.StatusServiceUnavailable)
			return
		}
		setHeaders(w.Header(), id, d)
		if d.Allowed {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", strconv.FormatInt(keyed.Seconds(d.RetryAfter), 10))
		if m.refused != nil {
			m.refused.ServeHTTP(w, r)
			return
		}
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
	})
}

// unavailable answers a request whose key has no limiter: a key of the
// service's own making that allot refuses, or a closed agent, is the
// service's fault, not the client's.
func (m *Middleware) unavailable(w http.ResponseWriter, id string, err error) {
	m.log.Error("httplimit: no rate limiter for the request's key", "key", id, "error", err)
	http.Error(w, "rate limiter unavailable", http.StatusInternalServerError)
}

// setHeaders writes the RateLimit-Policy and RateLimit fields
// (draft-ietf-httpapi-ratelimit-headers): the policy is named after the
// resource, its quota is the limiter's rate over the shortest window of
// whole seconds that holds one request, and the reset is the time until
// the next token. An unlimited key gets neither.
func setHeaders(h http.Header, id string, d keyed.Decision) {
	if !d.Limited {
		return
	}
	name := sfString(id)
	h.Set("RateLimit-Policy", name+";q="+strconv.FormatInt(d.Quota, 10)+";w="+strconv.FormatInt(d.Window, 10))
	v := name + ";r=" + strconv.FormatInt(d.Remaining, 10)
	if d.RetryAfter > 0 {
		v += ";t=" + strconv.FormatInt(keyed.Seconds(d.RetryAfter), 10)
	}
	h.Set("RateLimit", v)
}

// sfString writes s as a Structured Field string (RFC 9651): printable
// ASCII only, with '"' and '\' escaped; other characters become '_'.
func sfString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c > 0x7e:
			b.WriteByte('_')
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
