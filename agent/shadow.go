package agent

import (
	"math"
	"time"

	"github.com/allot/allot/agent/internal/clock"
	"golang.org/x/time/rate"
)

// Shadow mode. A coordinator marks a resource's leases shadow (its
// template says "shadow": true, or the coordinator runs with --shadow)
// when an operator wants to watch a limit before it refuses anything. The
// agent then enforces the wants instead of the capacity it would enforce
// otherwise (the grant, or the failure mode's capacity once the lease has
// expired), and measures every admission against that capacity in a
// second bucket that never blocks: what it would have refused is counted
// in Status.WouldRefuse. The wants are the value set with SetWants; with
// automatic wants the limiter does not limit at all, because the estimate
// follows demand and enforcing it would refuse the very growth it is
// there to measure.

// shadowEnforcedLocked is the capacity a resource in shadow mode enforces.
func (r *resource) shadowEnforcedLocked() float64 {
	if r.auto {
		return math.Inf(1)
	}
	return r.wants
}

// shadowRate measures a rate limiter's admissions against the capacity
// that would be in force, without ever holding one back.
type shadowRate struct {
	on       bool
	limit    rate.Limit
	burst    int
	tokens   float64
	last     time.Time
	admitted uint64 // events admitted while on
	would    uint64 // of those, events the limit had no token for
}

// setShadow turns shadow measurement on (at limit) or off. A bucket that
// comes on starts full: it should not count the first burst against a
// limit that only just began to be watched.
func (l *RateLimiter) setShadow(on bool, limit rate.Limit) {
	if !(limit >= 0) {
		limit = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := &l.shadow
	t := clock.Now(l.clock)
	if !on {
		s.on = false
		return
	}
	burst := autoBurst(limit)
	if l.fixedBurst {
		burst = l.burst
	}
	if !s.on {
		s.tokens, s.last = float64(burst), t
	} else {
		s.advance(t)
	}
	s.on, s.limit, s.burst = true, limit, burst
	switch {
	case limit == 0:
		s.tokens = min(s.tokens, 0)
	case s.tokens > float64(burst):
		s.tokens = float64(burst)
	}
}

func (s *shadowRate) advance(t time.Time) {
	if !t.After(s.last) {
		return
	}
	if s.limit != rate.Inf {
		s.tokens = min(s.tokens+float64(s.limit)*t.Sub(s.last).Seconds(), float64(s.burst))
	}
	s.last = t
}

// shadowTakeLocked measures an admission of n events, at t (zero: read
// the clock), against the shadow bucket, if it is on.
func (l *RateLimiter) shadowTakeLocked(t time.Time, n int) {
	s := &l.shadow
	if !s.on {
		return
	}
	s.admitted += uint64(n)
	if s.limit == rate.Inf {
		return
	}
	if t.IsZero() {
		t = clock.Now(l.clock)
	}
	s.advance(t)
	if n <= s.burst && s.tokens >= float64(n) {
		s.tokens -= float64(n)
		return
	}
	s.would += uint64(n)
}

// shadowCounts returns the events admitted in shadow mode and, of those,
// the ones the shadowed capacity would have refused.
func (l *RateLimiter) shadowCounts() (admitted, would uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.shadow.admitted, l.shadow.would
}

// shadowGauge measures a gauge's acquisitions against the limit that
// would be in force.
type shadowGauge struct {
	on       bool
	limit    int
	admitted uint64 // units acquired while on
	would    uint64 // of those, units beyond the limit when acquired
}

func (g *Gauge) setShadow(on bool, limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shadow.on, g.shadow.limit = on, max(limit, 0)
}

// shadowTakeLocked measures an acquisition of n units, made while held
// units were held before it.
func (g *Gauge) shadowTakeLocked(held, n int) {
	s := &g.shadow
	if !s.on {
		return
	}
	s.admitted += uint64(n)
	if s.limit != Unlimited && (held > s.limit || n > s.limit-held) {
		s.would += uint64(n)
	}
}

func (g *Gauge) shadowCounts() (admitted, would uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.shadow.admitted, g.shadow.would
}

// installShadowLocked sets the shadow measurement of r's limiter: on at
// capacity c (what would be in force) when r runs in shadow mode.
func (r *resource) installShadowLocked(c float64) {
	if r.rate != nil {
		lim := rate.Limit(c)
		if math.IsInf(c, 1) {
			lim = rate.Inf
		}
		r.rate.setShadow(r.shadow, lim)
	} else {
		r.gauge.setShadow(r.shadow, capacityToLimit(c))
	}
}

// shadowCountsLocked returns r's shadow counters.
func (r *resource) shadowCountsLocked() (admitted, would uint64) {
	if r.rate != nil {
		return r.rate.shadowCounts()
	}
	return r.gauge.shadowCounts()
}
