// Package rlqs is the decision core of allot's rate limit quota service
// (Envoy's envoy.service.rate_limit_quota.v3.RateLimitQuotaService, the
// rate_limit_quota filter): what one Envoy's bucket claims from allot's
// allocation rounds and what it is told to enforce.
//
// Each Envoy stream is a lease claimant, and each of its buckets claims
// the lease resource its bucket id names (Resource). A Bucket turns the
// usage Envoy reports into the capacity to ask for (Wants), a lease into
// the strategy Envoy enforces (Assignment: a token bucket filled at the
// leased rate, for as long as the lease lasts), and keeps counting an
// assignment Envoy may still enforce until Envoy has reported since it
// was replaced (Has), so that what every Envoy enforces adds up to at
// most the resource's capacity. The package does no I/O and reads no
// clock.
package rlqs

import (
	"math"
	"slices"
	"strings"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot/allot/internal/wire"
)

// Prefix starts the lease resource of every RLQS bucket, and the
// identifier_glob of every template that governs RLQS buckets.
const Prefix = "rlqs/"

// Resource is the lease resource of a bucket of domain: rlqs/<domain>/
// then the bucket id's key=value pairs, sorted by key and joined by "/"
// (the order of a bucket id's keys does not matter). ok is false when the
// bucket id is empty or the name is not a valid resource id.
func Resource(domain string, bucket map[string]string) (id string, ok bool) {
	if len(bucket) == 0 {
		return "", false
	}
	keys := make([]string, 0, len(bucket))
	for k := range bucket {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(Prefix)
	b.WriteString(domain)
	for _, k := range keys {
		b.WriteByte('/')
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(bucket[k])
	}
	id = b.String()
	return id, wire.ValidateID("resource id", id) == nil
}

// Options tune the buckets.
type Options struct {
	// Decay is the time constant with which the wants follow falling
	// demand (rising demand is followed at once). Default DefaultDecay.
	Decay time.Duration
	// AbandonAfter is how long a bucket may report no requests before it
	// is abandoned. Default DefaultAbandonAfter.
	AbandonAfter time.Duration
	// Window is the shortest time demand is measured over: reports are
	// added up until they cover it, since a few requests in a short
	// report say little about the rate. Default DefaultWindow.
	Window time.Duration
}

// Defaults of Options.
const (
	DefaultDecay        = 20 * time.Second
	DefaultAbandonAfter = time.Minute
	DefaultWindow       = time.Second
)

func (o *Options) fill() {
	if o.Decay <= 0 {
		o.Decay = DefaultDecay
	}
	if o.AbandonAfter <= 0 {
		o.AbandonAfter = DefaultAbandonAfter
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
}

// Lease is what the coordinator last granted a bucket.
type Lease struct {
	// Capacity per second, until Expiry.
	Capacity float64
	Expiry   time.Time
	// Safe is the floor, until SafeUntil (zero: none).
	Safe      float64
	SafeUntil time.Time
}

// enforced is an assignment told to Envoy: a rate until a time.
type enforced struct {
	rate  float64
	until time.Time
}

// Bucket is one bucket of one Envoy stream.
type Bucket struct {
	opts Options
	// Resource is the lease resource the bucket claims.
	Resource string

	wants   float64
	sampled bool
	// The reports not yet measured: requests, whether some were
	// denied, and the time they cover.
	pending   float64
	held      bool
	covering  time.Duration
	lease     Lease
	leased    bool
	lastUsage time.Time

	// sent is the assignment last told; prev an earlier, larger one Envoy
	// may still enforce until it has reported twice since sent went out
	// (a report may cross the assignment in flight; the second cannot).
	sent, prev   enforced
	reportsSince int
}

// NewBucket returns the bucket claiming resource, first reported at now.
func NewBucket(resource string, now time.Time, opts Options) *Bucket {
	opts.fill()
	return &Bucket{opts: opts, Resource: resource, lastUsage: now}
}

// Report folds a usage report in: allowed and denied requests over
// elapsed (Envoy's time_elapsed; at most the time since the last report
// when not set).
func (b *Bucket) Report(now time.Time, allowed, denied uint64, elapsed time.Duration) {
	if b.reportsSince < 2 {
		b.reportsSince++
		if b.reportsSince == 2 {
			b.prev = enforced{}
		}
	}
	n := float64(allowed) + float64(denied)
	if n > 0 {
		b.lastUsage = now
	}
	if elapsed <= 0 {
		if n == 0 {
			return
		}
		elapsed = time.Second
	}
	b.pending += n
	b.held = b.held || denied > 0
	b.covering += elapsed
	// The first report is measured at once, so that a new bucket asks
	// for something; later ones once they cover the window.
	if b.sampled && b.covering < b.opts.Window {
		return
	}
	x := b.pending / b.covering.Seconds()
	elapsed, held := b.covering, b.held
	b.pending, b.held, b.covering = 0, false, 0
	if held && b.leased {
		// Demand was held back: ask for more than is held, so that a
		// closed loop still discovers its share.
		x = max(x, 1.25*b.lease.Capacity)
	}
	x = min(max(x, 0), wire.MaxWants)
	switch {
	case !b.sampled || x >= b.wants:
		b.wants = x
	default:
		b.wants += (x - b.wants) * (1 - math.Exp(-elapsed.Seconds()/b.opts.Decay.Seconds()))
	}
	if b.wants < 1e-9 {
		b.wants = 0
	}
	b.sampled = true
}

// Wants is the capacity per second to ask for.
func (b *Bucket) Wants() float64 { return b.wants }

// Idle reports whether the bucket has reported no requests for
// AbandonAfter: the server abandons it (Envoy forgets it, and starts it
// afresh on its next request).
func (b *Bucket) Idle(now time.Time) bool { return now.Sub(b.lastUsage) >= b.opts.AbandonAfter }

// Grant installs a lease from the coordinator.
func (b *Bucket) Grant(l Lease) { b.lease, b.leased = l, true }

// Has is the lease to report holding: the granted one, or an earlier
// larger assignment that Envoy may still enforce, with its end. A lease
// that shrank so counts at its old size until Envoy has applied the new
// one.
func (b *Bucket) Has(now time.Time) (capacity float64, expiry time.Time) {
	if !b.leased {
		return 0, time.Time{}
	}
	capacity, expiry = b.lease.Capacity, b.lease.Expiry
	if b.prev.until.After(now) && b.prev.rate > capacity {
		capacity, expiry = b.prev.rate, b.prev.until
	}
	return capacity, expiry
}

// Lease returns the lease last granted, and whether there is one.
func (b *Bucket) Lease() (Lease, bool) { return b.lease, b.leased }

// Assignment is what Envoy should enforce from now: the lease while it
// lasts, then the floor while that lasts; ok is false when neither
// (Envoy's expired assignment behaviour then applies).
func (b *Bucket) Assignment(now time.Time) (rate float64, until time.Time, ok bool) {
	switch {
	case !b.leased:
		return 0, time.Time{}, false
	case now.Before(b.lease.Expiry):
		return b.lease.Capacity, b.lease.Expiry, true
	case b.lease.Safe >= 0 && now.Before(b.lease.SafeUntil):
		return b.lease.Safe, b.lease.SafeUntil, true
	}
	return 0, time.Time{}, false
}

// Sent records that rate until until was told to Envoy at now. A lower
// rate than before leaves the earlier one counted (Has) until Envoy has
// reported twice.
func (b *Bucket) Sent(now time.Time, rate float64, until time.Time) {
	if old := b.sent; old.rate > rate && old.until.After(now) {
		if !(b.prev.until.After(now) && b.prev.rate > old.rate) {
			b.prev = old
		}
		b.reportsSince = 0
	}
	b.sent = enforced{rate, until}
}

// MinRate is the lowest rate per second a token bucket enforces: one
// token per half the longest interval a time.Duration holds (about 146
// years), so that the fill interval never overflows. Strategy denies
// all below it, which enforces less than was leased, never more.
const MinRate = 2 * float64(time.Second) / math.MaxInt64

// Strategy is the rate limiting strategy that enforces rate per second:
// DENY_ALL for none (or less than MinRate), ALLOW_ALL for an unbounded
// rate, else a token bucket filling at most rate per second that holds
// one second of it.
func Strategy(rate float64) *typev3.RateLimitStrategy {
	switch {
	case !(rate >= MinRate):
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	case math.IsInf(rate, 1) || rate >= math.MaxUint32:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
	}
	// tokens per fill over the interval, rounded up to the nanosecond, is
	// at most rate: what every Envoy enforces adds up to at most what
	// was leased.
	perFill := max(math.Floor(rate), 1)
	interval := time.Duration(math.Ceil(perFill / rate * float64(time.Second)))
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(max(math.Ceil(rate), 1)),
		TokensPerFill: wrapperspb.UInt32(uint32(perFill)),
		FillInterval:  durationpb.New(interval),
	}}}
}

// Rate is the rate per second a strategy enforces: 0 for DENY_ALL (or
// none), +Inf for ALLOW_ALL, tokens per fill over the fill interval for a
// token bucket, requests per time unit for that strategy.
func Rate(s *typev3.RateLimitStrategy) float64 {
	switch st := s.GetStrategy().(type) {
	case *typev3.RateLimitStrategy_BlanketRule_:
		if st.BlanketRule == typev3.RateLimitStrategy_ALLOW_ALL {
			return math.Inf(1)
		}
	case *typev3.RateLimitStrategy_TokenBucket:
		per := 1.0
		if st.TokenBucket.GetTokensPerFill() != nil {
			per = float64(st.TokenBucket.GetTokensPerFill().GetValue())
		}
		if d := st.TokenBucket.GetFillInterval().AsDuration(); d > 0 {
			return per / d.Seconds()
		}
	case *typev3.RateLimitStrategy_RequestsPerTimeUnit_:
		if sec := unitSeconds(st.RequestsPerTimeUnit.GetTimeUnit()); sec > 0 {
			return float64(st.RequestsPerTimeUnit.GetRequestsPerTimeUnit()) / sec
		}
	}
	return 0
}

func unitSeconds(u typev3.RateLimitUnit) float64 {
	switch u {
	case typev3.RateLimitUnit_SECOND:
		return 1
	case typev3.RateLimitUnit_MINUTE:
		return 60
	case typev3.RateLimitUnit_HOUR:
		return 3600
	case typev3.RateLimitUnit_DAY:
		return 86400
	case typev3.RateLimitUnit_MONTH:
		return 30 * 86400
	case typev3.RateLimitUnit_YEAR:
		return 365 * 86400
	}
	return 0
}
