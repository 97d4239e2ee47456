// Package keyed maps request keys to an agent's rate limiters, for the
// HTTP and gRPC integrations: one limiter per resource id, created on
// first use, with a bound on how many a process creates.
package keyed

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/time/rate"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/wire"
)

// DefaultMaxKeys bounds the distinct resource ids one Set creates: every
// id is a resource the coordinator keeps state for, so ids taken from
// requests must not grow without limit.
const DefaultMaxKeys = 1000

// Set hands out the rate limiter of each resource id.
type Set struct {
	a        *agent.Agent
	opts     []agent.ResourceOption
	maxKeys  int
	overflow string

	mu   sync.Mutex
	lims map[string]*agent.RateLimiter
}

// New returns a Set over a. Ids beyond maxKeys distinct ones share the
// resource overflow; opts apply to every limiter created.
func New(a *agent.Agent, maxKeys int, overflow string, opts []agent.ResourceOption) (*Set, error) {
	if a == nil {
		return nil, errors.New("nil agent")
	}
	if maxKeys < 1 {
		return nil, fmt.Errorf("max keys %d: want at least 1", maxKeys)
	}
	if err := wire.ValidateID("overflow resource id", overflow); err != nil {
		return nil, err
	}
	return &Set{a: a, opts: opts, maxKeys: maxKeys, overflow: overflow, lims: make(map[string]*agent.RateLimiter)}, nil
}

// Limiter returns the limiter of resource id, creating it on first use.
func (s *Set) Limiter(id string) (*agent.RateLimiter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lims[id]; ok {
		return l, nil
	}
	if len(s.lims) >= s.maxKeys {
		id = s.overflow
		if l, ok := s.lims[id]; ok {
			return l, nil
		}
	}
	l, err := s.a.Rate(id, s.opts...)
	if err != nil {
		return nil, err
	}
	s.lims[id] = l
	return l, nil
}

// Renew returns the limiter to use in place of lim, the limiter Limiter
// gave for id, when lim was closed: by the service (an idle tenant's
// limiter closed to give its capacity back) or with the agent. The Set
// then asks the agent again, which makes a new limiter for the resource,
// or fails with agent.ErrClosed once the agent is closed; without this a
// closed limiter would refuse the key's requests for good. A limiter
// still open is returned as it is. Meant for refused requests only:
// they are the ones a closed limiter gives.
func (s *Set) Renew(id string, lim *agent.RateLimiter) (*agent.RateLimiter, error) {
	if !Closed(lim) {
		return lim, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	key := id
	if _, ok := s.lims[id]; !ok {
		// Limiter served id from the overflow's limiter: the Set was
		// full then, and stays so.
		key = s.overflow
	}
	if cur := s.lims[key]; cur != nil && cur != lim && !Closed(cur) {
		return cur, nil // renewed by another request meanwhile
	}
	l, err := s.a.Rate(key, s.opts...)
	if err != nil {
		return nil, err
	}
	s.lims[key] = l
	return l, nil
}

// DecideWait is DecideWait on lim, the limiter Limiter gave for id, and,
// when that refuses because lim was closed, on the limiter Renew gives in
// its place. It fails only when id has no limiter any more (the agent is
// closed).
func (s *Set) DecideWait(ctx context.Context, id string, lim *agent.RateLimiter, wait time.Duration) (Decision, error) {
	d := DecideWait(ctx, lim, wait)
	if d.Allowed {
		return d, nil
	}
	renewed, err := s.Renew(id, lim)
	if err != nil {
		return Decision{}, err
	}
	if renewed != lim {
		d = DecideWait(ctx, renewed, wait)
	}
	return d, nil
}

// Closed reports whether lim is closed. AwaitCapacity says so first,
// before it would wait, so a context already ended asks without waiting.
func Closed(lim *agent.RateLimiter) bool {
	return errors.Is(lim.AwaitCapacity(ended), agent.ErrClosed)
}

// ended is a context that has ended, for Closed.
var ended = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

// ID turns a request attribute into a valid resource id: prefix followed
// by v, with spaces and control characters replaced by '_' and cut to
// the longest id allowed. An empty v gives prefix followed by "-".
func ID(prefix, v string) string {
	if v == "" {
		v = "-"
	}
	id := prefix + strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.IsSpace(r) || unicode.IsControl(r) || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, v)
	for len(id) > wire.MaxIDLen {
		_, n := utf8.DecodeLastRuneInString(id)
		id = id[:len(id)-n]
	}
	return id
}

// Decision is the outcome of one admission, with what the integrations
// tell the client.
type Decision struct {
	// Allowed reports whether the request may proceed.
	Allowed bool
	// RetryAfter is how long until the limiter has a token again; 0 when
	// one is available.
	RetryAfter time.Duration
	// Limited is false when no finite limit is in force (unlimited, or
	// shadow mode with automatic wants): Quota, Window and Remaining are
	// then meaningless.
	Limited bool
	// Quota requests per Window (whole seconds), Remaining now.
	Quota     int64
	Window    int64
	Remaining int64
}

// DefaultFirstLeaseWait is how long a request may wait for its resource's
// first capacity (see DecideWait) when the integration's options say
// nothing: well under a second, the round trip to a coordinator with
// room to spare.
const DefaultFirstLeaseWait = 250 * time.Millisecond

// Decide takes one token from l if it has one.
func Decide(l *agent.RateLimiter) Decision {
	ok := l.Allow()
	return Describe(l, ok)
}

// DecideWait is Decide, except that a request refused while l has no
// capacity at all (its resource's first use), or refused in a way that
// made the agent ask the coordinator for more (a lease that decayed while
// idle, then a burst of requests; once per capacity granted), waits up to
// wait for the answer, and ctx, then tries again: the first requests of a
// route, and those after an idle spell, are served rather than refused
// while the global capacity is unused. A wait of zero or less does not
// wait.
func DecideWait(ctx context.Context, l *agent.RateLimiter, wait time.Duration) Decision {
	none := l.Limit() == 0
	if l.Allow() {
		return Describe(l, true)
	}
	if wait <= 0 {
		return Describe(l, false)
	}
	if l.Limit() != 0 && !l.Asking() {
		if none {
			// The first capacity landed between the two looks: the
			// request is decided on it, not refused for the lack of it.
			return Decide(l)
		}
		return Describe(l, false)
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if l.AwaitCapacity(wctx) != nil {
		return Describe(l, false)
	}
	return Decide(l)
}

// Describe reports l's state after an admission decided as allowed.
func Describe(l *agent.RateLimiter, allowed bool) Decision {
	if l.Limit() == rate.Inf {
		return Decision{Allowed: allowed}
	}
	var refresh time.Duration
	if l.Tokens() < 1 && !(float64(l.Limit()) >= MinRate) {
		refresh = l.Status().RefreshInterval
	}
	return describe(float64(l.Limit()), l.Tokens(), allowed, refresh)
}

// MinRate is the lowest rate per second described as a quota: one request
// in about 68 years. A lease below it (a floating-point remainder of a
// share) is described as none, so that neither the window nor the wait
// overflows.
const MinRate = 1.0 / (1 << 31)

// describe is Describe of a finite limit of lim per second with tokens
// left; refresh is the limiter's refresh interval, the wait when lim is
// none.
func describe(lim, tokens float64, allowed bool, refresh time.Duration) Decision {
	d := Decision{Allowed: allowed, Limited: true}
	if !(lim >= MinRate) {
		lim = 0
	}
	d.Remaining = int64(math.Max(math.Floor(tokens), 0))
	// The quota is stated over the shortest whole-second window in which
	// at least one request is allowed.
	d.Window = 1
	if lim > 0 && lim < 1 {
		d.Window = int64(math.Ceil(1 / lim))
	}
	d.Quota = int64(math.Floor(lim * float64(d.Window)))
	if tokens < 1 {
		if lim <= 0 {
			d.RetryAfter = time.Second // blocked: no token will come before a lease does
			if refresh > 0 {
				d.RetryAfter = refresh
			}
		} else {
			// At most the longest Duration: tokens reserved ahead (tokens
			// is then negative) on a lease near MinRate take longer.
			d.RetryAfter = math.MaxInt64
			if w := math.Ceil((1 - tokens) / lim * float64(time.Second)); w < math.MaxInt64 {
				d.RetryAfter = time.Duration(w)
			}
		}
	}
	return d
}

// Seconds rounds d up to whole seconds, at least 1: Retry-After and the
// reset of the RateLimit header field are whole seconds, and 0 would
// invite an immediate retry that is refused again.
func Seconds(d time.Duration) int64 {
	return max(int64(math.Ceil(d.Seconds())), 1)
}
