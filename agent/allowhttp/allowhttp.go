// Package allowhttp lets a service in any language ask an allot agent
// whether it may proceed, over local HTTP: the sidecar (`allot agent`)
// serves it beside its Envoy rate limit service.
//
//	GET /v1/allow?resource=mysql/main            one token now, or 429
//	GET /v1/allow?resource=mysql/main&n=5        five tokens
//	GET /v1/allow?resource=mysql/main&wait=200ms wait up to 200ms for them
//
// Every answer is decided by the agent's rate limiter of the resource, in
// process, from this process's lease: the coordinator divides each
// resource's capacity (its template, docs/configuration.md) among every
// agent that asks. The reply is JSON, with the RateLimit headers of
// draft-ietf-httpapi-ratelimit-headers, and Retry-After when refused:
//
//	{"allowed":true,"resource":"mysql/main","limit":50,"remaining":49,"retry_after_ms":0,"burst":50}
//
// burst is the most tokens one request can be granted on the lease in
// force; a larger n is refused with a retry at the lease's next refresh,
// when a larger lease may come.
//
// A resource's first request creates it; until its first lease comes
// (one round trip to the coordinator) it has no capacity, so ask with a
// wait the first time, or expect a 429.
package allowhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/keyed"
	"github.com/allot/allot/internal/wire"
)

// Path is where the handler answers.
const Path = "/v1/allow"

// Defaults and limits of Options and of the query.
const (
	// DefaultMaxResources bounds the resources one handler creates.
	DefaultMaxResources = 10000
	// DefaultMaxWait bounds the wait a request may ask for.
	DefaultMaxWait = 10 * time.Second
	// MaxTokens bounds n.
	MaxTokens = 1 << 30
)

// Options configure a Handler.
type Options struct {
	// MaxResources bounds the distinct resources asked for; a new one
	// beyond it is answered 503. Default DefaultMaxResources.
	MaxResources int
	// MaxWait bounds the wait parameter. Default DefaultMaxWait.
	MaxWait time.Duration
}

// Handler answers GET (or POST) /v1/allow. Safe for concurrent use.
type Handler struct {
	a    *agent.Agent
	opts Options

	mu   sync.Mutex
	lims map[string]*agent.RateLimiter
}

// New returns a Handler deciding with a's leases.
func New(a *agent.Agent, opts Options) (*Handler, error) {
	if a == nil {
		return nil, errors.New("allowhttp: nil agent")
	}
	if opts.MaxResources == 0 {
		opts.MaxResources = DefaultMaxResources
	}
	if opts.MaxWait == 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.MaxResources < 0 || opts.MaxWait < 0 {
		return nil, fmt.Errorf("allowhttp: MaxResources %d and MaxWait %v must not be negative", opts.MaxResources, opts.MaxWait)
	}
	return &Handler{a: a, opts: opts, lims: map[string]*agent.RateLimiter{}}, nil
}

// Answer is the JSON body of a decision.
type Answer struct {
	Allowed  bool   `json:"allowed"`
	Resource string `json:"resource"`
	// Limit is the rate in force, per second (-1: unlimited); Remaining the
	// whole tokens left now.
	Limit     float64 `json:"limit"`
	Remaining int64   `json:"remaining"`
	// RetryAfterMS is how long until a refused request may succeed.
	RetryAfterMS int64 `json:"retry_after_ms"`
	// Burst is the most tokens one request can be granted on the lease in
	// force (0 unlimited, or before a lease): a refused n above it waits
	// for a larger lease, and RetryAfterMS is then the lease's next
	// refresh.
	Burst int64 `json:"burst"`
}

// errorBody is the JSON body of a bad request.
type errorBody struct {
	Error string `json:"error"`
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		reply(w, http.StatusMethodNotAllowed, errorBody{"use GET or POST " + Path + "?resource=ID"})
		return
	}
	q := r.URL.Query()
	id := q.Get("resource")
	if err := wire.ValidateID("resource", id); err != nil {
		reply(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	n, err := intParam(q.Get("n"), 1)
	if err != nil {
		reply(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		if wait, err = time.ParseDuration(v); err != nil || wait < 0 || wait > h.opts.MaxWait {
			reply(w, http.StatusBadRequest, errorBody{fmt.Sprintf("wait %q: want a duration such as 200ms, at most %v", v, h.opts.MaxWait)})
			return
		}
	}
	lim, err := h.limiter(id)
	if err != nil {
		reply(w, http.StatusServiceUnavailable, errorBody{err.Error()})
		return
	}
	allowed := false
	if wait > 0 {
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		allowed = lim.WaitN(ctx, n) == nil
		cancel()
	} else {
		allowed = lim.AllowN(n)
	}
	ans := describe(id, lim, allowed, n)
	if !allowed && ans.Burst > 0 && int64(n) > ans.Burst {
		// No wait makes n fit the lease in force: the next refresh may
		// bring a larger one.
		ans.RetryAfterMS = max(lim.Status().RefreshInterval, time.Second).Milliseconds()
	}
	setHeaders(w.Header(), ans)
	code := http.StatusOK
	if !allowed {
		code = http.StatusTooManyRequests
		w.Header().Set("Retry-After", strconv.FormatInt(max(int64(math.Ceil(float64(ans.RetryAfterMS)/1000)), 1), 10))
	}
	reply(w, code, ans)
}

// limiter returns id's rate limiter, creating it on first use.
func (h *Handler) limiter(id string) (*agent.RateLimiter, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.lims[id]; l != nil {
		return l, nil
	}
	if len(h.lims) >= h.opts.MaxResources {
		return nil, fmt.Errorf("allowhttp: already %d resources; this one is not served", h.opts.MaxResources)
	}
	l, err := h.a.Rate(id)
	if err != nil {
		return nil, err
	}
	h.lims[id] = l
	return l, nil
}

// intParam reads a token count in [1, MaxTokens]; empty is def.
func intParam(v string, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxTokens {
		return 0, fmt.Errorf("n %q: want a whole number of tokens in [1, %d]", v, MaxTokens)
	}
	return n, nil
}

// describe is the answer for a decision of n tokens on lim.
func describe(id string, lim *agent.RateLimiter, allowed bool, n int) Answer {
	a := Answer{Allowed: allowed, Resource: id, Limit: -1}
	l := lim.Limit()
	if l == rate.Inf {
		return a
	}
	a.Limit = float64(l)
	a.Burst = int64(lim.Burst())
	tokens := lim.Tokens()
	a.Remaining = int64(max(math.Floor(tokens), 0))
	if !allowed {
		switch {
		case !(float64(l) >= keyed.MinRate):
			// No token comes before a lease does (a lease of almost
			// nothing included: its wait would overflow).
			a.RetryAfterMS = 1000
		default:
			// At most the longest wait an int64 holds: n tokens on a
			// lease just above MinRate take longer.
			ms := math.Ceil(max(float64(n)-tokens, 0) / float64(l) * 1000)
			a.RetryAfterMS = math.MaxInt64
			if ms < math.MaxInt64 {
				a.RetryAfterMS = int64(ms)
			}
		}
	}
	return a
}

// setHeaders sets the RateLimit-Policy and RateLimit fields: the quota
// per second and what is left of it.
func setHeaders(h http.Header, a Answer) {
	if a.Limit < 0 {
		return
	}
	policy := strconv.Quote(a.Resource)
	h.Set("RateLimit-Policy", fmt.Sprintf("%s;q=%d;w=1", policy, int64(a.Limit)))
	reset := max(int64(math.Ceil(float64(a.RetryAfterMS)/1000)), 0)
	h.Set("RateLimit", fmt.Sprintf("%s;r=%d;t=%d", policy, a.Remaining, reset))
}

func reply(w http.ResponseWriter, code int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
