package quota

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Bounds Validate enforces. They keep every product of a count and a
// per-token interval inside int64 nanoseconds.
const (
	// MaxNameLen is the longest namespace or bucket name accepted.
	MaxNameLen = 64
	// MaxCount bounds sizes, limits, thresholds and tokens per request.
	MaxCount = 1_000_000_000_000
	// MaxDuration bounds every duration, and the time a bucket takes to
	// fill (Size/FillRate) or a request takes to pay back.
	MaxDuration = 366 * 24 * time.Hour
	// MaxFillRate is one token per nanosecond.
	MaxFillRate = 1e9
	// MaxLogLimit bounds SLIDING_WINDOW_LOG's limit: its log keeps one
	// entry (16 bytes) per admission in the window.
	MaxLogLimit = 100_000
)

// DefaultSpec returns quotaservice's defaults: a TOKEN_BUCKET of size 100
// filling at 50 tokens/s, a 1s wait timeout, never idle, 10s of debt and
// at most 50 tokens (the fill rate rounded up) per request.
func DefaultSpec() Spec {
	return Spec{
		Algorithm:           TokenBucket,
		Size:                100,
		FillRate:            50,
		WaitTimeout:         time.Second,
		MaxDebt:             10 * time.Second,
		MaxTokensPerRequest: 50,
	}
}

// ValidName reports whether s is a valid namespace or bucket name:
// [A-Za-z0-9_]+, case-sensitive, at most MaxNameLen (64) bytes.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// SplitBucket splits "namespace:name" and checks both parts with
// ValidName.
func SplitBucket(s string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", fmt.Errorf("bucket %q: want \"namespace:name\"", clip(s))
	}
	if !ValidName(ns) {
		return "", "", fmt.Errorf("bucket %q: namespace must match [A-Za-z0-9_]+ and be at most %d bytes", clip(s), MaxNameLen)
	}
	if !ValidName(name) {
		return "", "", fmt.Errorf("bucket %q: name must match [A-Za-z0-9_]+ and be at most %d bytes", clip(s), MaxNameLen)
	}
	return ns, name, nil
}

// clip keeps error messages short when the input is huge.
func clip(s string) string {
	if len(s) > 2*MaxNameLen+1 {
		return s[:2*MaxNameLen+1] + "..."
	}
	return s
}

// Validate checks s and names the offending field (as spelled in the
// configuration) in its error. The zero Algorithm is invalid.
func (s *Spec) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	count := func(field string, v, lo, hi int64) {
		if v < lo || v > hi {
			bad(field, "%d is out of range [%d, %d]", v, lo, hi)
		}
	}
	dur := func(field string, d time.Duration) {
		if d < 0 || d > MaxDuration {
			bad(field, "%v is out of range [0s, %v]", d, MaxDuration)
		}
	}
	fraction := func(field string, f float64) {
		if math.IsNaN(f) || f < 0 || f >= 1 {
			bad(field, "%v must be a fraction in [0, 1)", f)
		}
	}
	switch s.Algorithm {
	case TokenBucket, LeakyBucket:
		count("size", s.Size, 1, MaxCount)
		if math.IsNaN(s.FillRate) || s.FillRate <= 0 || s.FillRate > MaxFillRate {
			bad("fill_rate", "%v must be in (0, %g] tokens per second", s.FillRate, MaxFillRate)
		} else {
			if float64(s.Size)/s.FillRate > MaxDuration.Seconds() {
				bad("size", "%d tokens take longer than %v to fill at %v/s", s.Size, MaxDuration, s.FillRate)
			}
			if float64(s.MaxTokensPerRequest)/s.FillRate > MaxDuration.Seconds() {
				bad("max_tokens_per_request", "%d tokens take longer than %v to fill at %v/s", s.MaxTokensPerRequest, MaxDuration, s.FillRate)
			}
		}
	case FixedWindow, SlidingWindowLog, SlidingWindowCounter, GCRA:
		hi := int64(MaxCount)
		if s.Algorithm == SlidingWindowLog {
			hi = MaxLogLimit
		}
		count("limit", s.Limit, 1, hi)
		if s.Window <= 0 || s.Window > MaxDuration {
			bad("window", "%v is out of range (0s, %v]", s.Window, MaxDuration)
		}
		if s.Algorithm == GCRA {
			count("size", s.Size, 0, MaxCount)
			if s.Limit > 0 && s.Window > 0 && float64(s.Size)*float64(s.Window)/float64(s.Limit) > float64(MaxDuration) {
				bad("size", "a burst of %d at %d per %v takes longer than %v to drain", s.Size, s.Limit, s.Window, MaxDuration)
			}
		}
	default:
		bad("algorithm", "unknown algorithm %v", s.Algorithm)
	}
	count("max_tokens_per_request", s.MaxTokensPerRequest, 1, MaxCount)
	dur("wait_timeout", s.WaitTimeout)
	dur("max_idle", s.MaxIdle)
	dur("max_debt", s.MaxDebt)
	fraction("soft_limit", s.SoftLimit)
	fraction("critical_reserve", s.CriticalReserve)
	if s.Ban != (Ban{}) {
		count("ban.threshold", s.Ban.Threshold, 1, MaxCount)
		if s.Ban.Interval <= 0 || s.Ban.Interval > MaxDuration {
			bad("ban.interval", "%v is out of range (0s, %v]", s.Ban.Interval, MaxDuration)
		}
		if s.Ban.Duration <= 0 || s.Ban.Duration > MaxDuration {
			bad("ban.duration", "%v is out of range (0s, %v]", s.Ban.Duration, MaxDuration)
		}
	}
	return errors.Join(errs...)
}

// compiled is a validated Spec with everything a decision needs in
// integer nanoseconds and tokens.
type compiled struct {
	spec Spec
	// interval is nanoseconds per token (bucket algorithms and GCRA),
	// rounded up: the rate is never above the configured one.
	interval int64
	// capacity is Size (bucket algorithms), Limit (windows) or the burst
	// (GCRA): the largest Remaining.
	capacity int64
	capNs    int64 // capacity*interval
	window   int64
	wait     int64 // WaitTimeout
	debt     int64 // MaxDebt
	idle     int64 // MaxIdle
	// maxTokens is MaxTokensPerRequest, lowered to what the algorithm can
	// ever admit in one request.
	maxTokens int64
	// soft: admitted decisions with Remaining below it carry a warning;
	// 0 is off.
	soft int64
	// reserve is the tokens only critical requests may use.
	reserve int64
}

// compile validates s and precomputes its integer form.
func compile(s *Spec) (*compiled, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	c := &compiled{
		spec:      *s,
		window:    int64(s.Window),
		wait:      int64(s.WaitTimeout),
		debt:      int64(s.MaxDebt),
		idle:      int64(s.MaxIdle),
		maxTokens: s.MaxTokensPerRequest,
	}
	switch s.Algorithm {
	case TokenBucket, LeakyBucket:
		c.interval = int64(math.Ceil(1e9 / s.FillRate))
		c.capacity = s.Size
	case GCRA:
		c.interval = ceilDiv(c.window, s.Limit)
		c.capacity = s.Size
		if c.capacity == 0 {
			c.capacity = s.Limit
		}
	default:
		c.capacity = s.Limit
	}
	c.capNs = c.capacity * c.interval
	// More than these can never be admitted, whatever the wait: answer
	// too_many_tokens rather than a timeout whose retry cannot succeed.
	if s.Algorithm == TokenBucket {
		// The token bucket borrows up to its longest wait.
		c.maxTokens = min(c.maxTokens, c.capacity+min(c.wait, c.debt)/c.interval)
	} else {
		c.maxTokens = min(c.maxTokens, c.capacity)
	}
	if s.SoftLimit > 0 {
		c.soft = c.capacity - int64(math.Floor(s.SoftLimit*float64(c.capacity)))
	}
	c.reserve = int64(math.Ceil(s.CriticalReserve * float64(c.capacity)))
	return c, nil
}

// ceilDiv is a/b rounded up for a >= 0, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// floorDiv is a/b rounded down, b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
