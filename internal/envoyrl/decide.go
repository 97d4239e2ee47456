package envoyrl

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Options select how a Limiter decides. The zero value decides as the
// reference does with its default settings.
type Options struct {
	// KeyPrefix starts every counter key (the reference's CACHE_KEY_PREFIX).
	KeyPrefix string
	// GlobalShadowMode answers OK overall even when a descriptor is over
	// its limit; the descriptors still say OVER_LIMIT (SHADOW_MODE).
	GlobalShadowMode bool
	// GlobalQuotaMode treats every limit as if it had quota_mode
	// (QUOTA_MODE).
	GlobalQuotaMode bool
	// StopIncrementWhenOverLimit is the reference's
	// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: counters are read first,
	// and when some descriptor would go over its limit only the counters
	// that would go over are incremented.
	StopIncrementWhenOverLimit bool
	// Headers, when set, adds the rate limit headers of the descriptor
	// closest to its limit to the response (LIMIT_RESPONSE_HEADERS_ENABLED).
	Headers *HeaderNames
	// Reference decides as envoyproxy/ratelimit where allot deliberately
	// differs: a request's limit override has its unit_multiplier ignored.
	Reference bool
}

// HeaderNames names the three response headers.
type HeaderNames struct {
	// Limit carries the limit's requests per unit.
	Limit string
	// Remaining carries the hits left in the window.
	Remaining string
	// Reset carries the seconds until the window ends.
	Reset string
}

// DefaultHeaderNames are the reference's default header names.
func DefaultHeaderNames() *HeaderNames {
	return &HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
}

// XRateLimitHeaderNames are the x-ratelimit-* names Envoy's own rate limit
// filters use.
func XRateLimitHeaderNames() *HeaderNames {
	return &HeaderNames{Limit: "x-ratelimit-limit", Remaining: "x-ratelimit-remaining", Reset: "x-ratelimit-reset"}
}

// Limiter answers ShouldRateLimit requests from a Config and a Store. It is
// safe for concurrent use when its Store is.
type Limiter struct {
	cfg   *Config
	store Store
	opts  Options
}

// NewLimiter returns a Limiter deciding by cfg, counting in store. A nil
// cfg refuses every request, as the reference does before it has loaded
// a configuration.
func NewLimiter(cfg *Config, store Store, opts Options) *Limiter {
	return &Limiter{cfg: cfg, store: store, opts: opts}
}

// RequestError is a request the reference also refuses: no domain, no
// descriptors, a limit override with an invalid unit, or no
// configuration to decide by.
type RequestError struct {
	Msg string
}

// Error implements error.
func (e *RequestError) Error() string { return e.Msg }

// unitSeconds is the reference's length of each unit: a month is 30 days
// and a year 365, and windows start at multiples of it from the epoch, not
// at calendar boundaries.
func unitSeconds(u rlspb.RateLimitResponse_RateLimit_Unit) (int64, bool) {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return 1, true
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return 60, true
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return 60 * 60, true
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 60 * 60 * 24, true
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 60 * 60 * 24 * 7, true
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 60 * 60 * 24 * 30, true
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 60 * 60 * 24 * 365, true
	}
	return 0, false
}

// window returns the length of one window of the limit in seconds.
func (s *limitSpec) window() int64 {
	sec, _ := unitSeconds(s.unit)
	return sec * int64(s.multiplier)
}

// currentLimit is the limit as a response reports it.
func (s *limitSpec) currentLimit() *rlspb.RateLimitResponse_RateLimit {
	cl := &rlspb.RateLimitResponse_RateLimit{Name: s.name, RequestsPerUnit: s.requestsPerUnit, Unit: s.unit}
	if s.multiplier > 1 {
		cl.UnitMultiplier = wrapperspb.UInt32(s.multiplier)
	}
	return cl
}

// override turns a request's own limit into a limit: no name, never in
// shadow mode, as the reference does.
func (l *Limiter) override(o *rlv3.RateLimitDescriptor_RateLimitOverride) (*limitSpec, error) {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(o.GetUnit())
	if _, ok := unitSeconds(unit); !ok {
		// The reference crashes here; a bad request must not.
		return nil, &RequestError{Msg: fmt.Sprintf("rate limit override has invalid unit %d", int32(o.GetUnit()))}
	}
	spec := &limitSpec{requestsPerUnit: o.GetRequestsPerUnit(), unit: unit, multiplier: 1}
	if m := o.GetUnitMultiplier(); m != nil && !l.opts.Reference {
		if m.GetValue() == 0 {
			return nil, &RequestError{Msg: "rate limit override has unit_multiplier 0"}
		}
		spec.multiplier = m.GetValue()
	}
	return spec, nil
}

// hitsAddends returns each descriptor's hits: its own hits_addend when set
// (zero only checks), else the request's, at least 1.
func hitsAddends(req *rlspb.RateLimitRequest) []uint64 {
	out := make([]uint64, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		if h := d.GetHitsAddend(); h != nil {
			out[i] = h.GetValue()
		} else {
			out[i] = max(1, uint64(req.GetHitsAddend()))
		}
	}
	return out
}

// cacheKey builds the reference's counter key: prefix, domain, each
// entry's key and value (or shared wildcard), the window start.
func (l *Limiter) cacheKey(domain string, d *rlv3.RateLimitDescriptor, m *match, now int64) string {
	var b strings.Builder
	b.WriteString(l.opts.KeyPrefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range d.GetEntries() {
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		v := e.GetValue()
		if i < len(m.sharedValues) && m.sharedValues[i] != "" {
			v = m.sharedValues[i]
		}
		b.WriteString(v)
		b.WriteByte('_')
	}
	w := m.spec.window()
	b.WriteString(strconv.FormatInt((now/w)*w, 10))
	return b.String()
}

// ShouldRateLimit decides req at now: it counts the request's hits against
// every descriptor's limit and answers as the reference's ShouldRateLimit.
// Errors are *RequestError for a request the reference refuses, or the
// Store's.
func (l *Limiter) ShouldRateLimit(ctx context.Context, now time.Time, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, &RequestError{Msg: "rate limit domain must not be empty"}
	}
	if l.cfg == nil {
		return nil, &RequestError{Msg: "no rate limit configuration loaded"}
	}
	descs := req.GetDescriptors()
	if len(descs) == 0 {
		return nil, &RequestError{Msg: "rate limit descriptor list must not be empty"}
	}
	matches := make([]*match, len(descs))
	unlimited := make([]bool, len(descs))
	replacing := map[string]bool{}
	for i, d := range descs {
		m, err := l.cfg.lookup(req.GetDomain(), d, l.override)
		if err != nil {
			return nil, err
		}
		if m == nil {
			continue
		}
		for _, r := range m.spec.replaces {
			replacing[r] = true
		}
		if m.spec.unlimited {
			unlimited[i] = true
			continue
		}
		matches[i] = m
	}
	for i, m := range matches {
		if m != nil && m.spec.name != "" && replacing[m.spec.name] {
			matches[i] = nil
		}
	}

	sec := now.Unix()
	hits := hitsAddends(req)
	counts, err := l.count(ctx, now, req.GetDomain(), descs, matches, hits, sec)
	if err != nil {
		return nil, err
	}
	statuses := make([]*rlspb.RateLimitResponse_DescriptorStatus, len(descs))
	for i, m := range matches {
		statuses[i] = descriptorStatus(m, counts[i], sec)
	}
	return l.respond(statuses, matches, unlimited, sec), nil
}

// count adds each limited descriptor's hits to its window counter and
// returns the counters after the additions (zero where no limit applies).
func (l *Limiter) count(ctx context.Context, now time.Time, domain string, descs []*rlv3.RateLimitDescriptor, matches []*match, hits []uint64, sec int64) ([]uint64, error) {
	var incs []Increment
	var idx []int
	for i, m := range matches {
		if m == nil {
			continue
		}
		w := m.spec.window()
		incs = append(incs, Increment{
			Key:     l.cacheKey(domain, descs[i], m, sec),
			Hits:    hits[i],
			Expires: time.Unix((sec/w)*w+w, 0),
		})
		idx = append(idx, i)
	}
	counts := make([]uint64, len(matches))
	if len(incs) == 0 {
		return counts, nil
	}
	if l.opts.StopIncrementWhenOverLimit {
		if err := l.stopAtLimit(ctx, now, incs, idx, matches); err != nil {
			return nil, err
		}
	}
	after, err := l.store.Increment(ctx, now, incs)
	if err != nil {
		return nil, fmt.Errorf("envoyrl: counting hits: %w", err)
	}
	for j, i := range idx {
		counts[i] = after[j]
	}
	return counts, nil
}

// stopAtLimit zeroes the additions as the reference does with
// STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: when any counter would pass
// its limit, only the counters that would pass it are incremented.
func (l *Limiter) stopAtLimit(ctx context.Context, now time.Time, incs []Increment, idx []int, matches []*match) error {
	keys := make([]string, len(incs))
	for j, inc := range incs {
		keys[j] = inc.Key
	}
	cur, err := l.store.Get(ctx, now, keys)
	if err != nil {
		return fmt.Errorf("envoyrl: reading counters: %w", err)
	}
	over := make([]bool, len(incs))
	anyOver := false
	for j, inc := range incs {
		over[j] = cur[j]+inc.Hits > uint64(matches[idx[j]].spec.requestsPerUnit)
		anyOver = anyOver || over[j]
	}
	if !anyOver {
		return nil
	}
	for j := range incs {
		if !over[j] {
			incs[j].Hits = 0
		}
	}
	return nil
}

// descriptorStatus is one descriptor's answer given its counter after the
// request's hits.
func descriptorStatus(m *match, after uint64, sec int64) *rlspb.RateLimitResponse_DescriptorStatus {
	if m == nil {
		return &rlspb.RateLimitResponse_DescriptorStatus{Code: rlspb.RateLimitResponse_OK}
	}
	st := &rlspb.RateLimitResponse_DescriptorStatus{
		Code:               rlspb.RateLimitResponse_OK,
		CurrentLimit:       m.spec.currentLimit(),
		DurationUntilReset: untilReset(m.spec, sec),
	}
	limit := uint64(m.spec.requestsPerUnit)
	if after > limit {
		st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		if m.spec.shadow {
			st.Code = rlspb.RateLimitResponse_OK
		}
	} else {
		st.LimitRemaining = uint32(limit - after)
	}
	return st
}

// untilReset is the time left in the limit's window, in whole seconds as
// the reference counts it.
func untilReset(s *limitSpec, sec int64) *durationpb.Duration {
	w := s.window()
	return &durationpb.Duration{Seconds: w - sec%w}
}

// respond assembles the response from the descriptors' statuses: quota
// mode, unlimited descriptors, the overall code and the headers, in the
// reference's order.
func (l *Limiter) respond(statuses []*rlspb.RateLimitResponse_DescriptorStatus, matches []*match, unlimited []bool, sec int64) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(statuses)),
	}
	minRemaining := uint32(math.MaxUint32)
	var closest *rlspb.RateLimitResponse_DescriptorStatus
	var closestSpec *limitSpec
	for i, st := range statuses {
		if l.opts.Headers != nil && st.CurrentLimit != nil && st.LimitRemaining < minRemaining {
			closest, closestSpec, minRemaining = st, matches[i].spec, st.LimitRemaining
		}
		switch {
		case unlimited[i]:
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{
				Code:           rlspb.RateLimitResponse_OK,
				LimitRemaining: math.MaxUint32,
			}
		case st.Code == rlspb.RateLimitResponse_OVER_LIMIT && (l.opts.GlobalQuotaMode || matches[i].spec.quota):
			// Quota mode reports OK, and the reference drops the reset.
			resp.Statuses[i] = &rlspb.RateLimitResponse_DescriptorStatus{
				Code:           rlspb.RateLimitResponse_OK,
				CurrentLimit:   st.CurrentLimit,
				LimitRemaining: st.LimitRemaining,
			}
		default:
			resp.Statuses[i] = st
			if st.Code == rlspb.RateLimitResponse_OVER_LIMIT {
				resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
				closest, closestSpec, minRemaining = st, matches[i].spec, 0
			}
		}
	}
	if l.opts.Headers != nil && closest != nil {
		h := l.opts.Headers
		resp.ResponseHeadersToAdd = []*corepb.HeaderValue{
			{Key: h.Limit, Value: strconv.FormatUint(uint64(closest.CurrentLimit.RequestsPerUnit), 10)},
			{Key: h.Remaining, Value: strconv.FormatUint(uint64(closest.LimitRemaining), 10)},
			{Key: h.Reset, Value: strconv.FormatInt(untilReset(closestSpec, sec).Seconds, 10)},
		}
	}
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT && l.opts.GlobalShadowMode {
		resp.OverallCode = rlspb.RateLimitResponse_OK
	}
	return resp
}
