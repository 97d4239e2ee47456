// Package quota decides per-request quota: buckets per key, grouped in
// namespaces, each answered OK, OK after a wait, or REJECTED by one of the
// algorithms below. It is a pure decision core: no NATS, no goroutines, the
// clock passed in. The coordinator's quota service calls it.
package quota

import (
	"fmt"
	"time"
)

// Algorithm selects how a bucket admits tokens.
type Algorithm uint8

// The algorithms. Bucket algorithms take Size and FillRate; window
// algorithms take Limit and Window.
const (
	// TokenBucket fills at FillRate up to Size; a request may borrow up to
	// MaxDebt of future tokens and is told how long to wait
	// (quotaservice's lazy-fill rule).
	TokenBucket Algorithm = iota + 1
	// LeakyBucket drains at FillRate with room for Size queued tokens; the
	// wait is the caller's place in the queue.
	LeakyBucket
	// FixedWindow admits Limit tokens per aligned Window.
	FixedWindow
	// SlidingWindowLog admits Limit tokens in any Window, exactly, by
	// keeping a log of admissions.
	SlidingWindowLog
	// SlidingWindowCounter estimates the sliding window from the current
	// and previous fixed windows, weighting the previous by its overlap.
	SlidingWindowCounter
	// GCRA is the generic cell rate algorithm: Limit per Window, with a
	// burst tolerance of Size tokens.
	GCRA
)

var algorithmNames = [...]string{
	TokenBucket:          "TOKEN_BUCKET",
	LeakyBucket:          "LEAKY_BUCKET",
	FixedWindow:          "FIXED_WINDOW",
	SlidingWindowLog:     "SLIDING_WINDOW_LOG",
	SlidingWindowCounter: "SLIDING_WINDOW_COUNTER",
	GCRA:                 "GCRA",
}

// String returns the configuration name of a ("TOKEN_BUCKET").
func (a Algorithm) String() string {
	if int(a) < len(algorithmNames) && algorithmNames[a] != "" {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", a)
}

// ParseAlgorithm returns the algorithm named s ("TOKEN_BUCKET").
func ParseAlgorithm(s string) (Algorithm, error) {
	for i, n := range algorithmNames {
		if n != "" && n == s {
			return Algorithm(i), nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want TOKEN_BUCKET, LEAKY_BUCKET, FIXED_WINDOW, SLIDING_WINDOW_LOG, SLIDING_WINDOW_COUNTER or GCRA)", s)
}

// Windowed reports whether a is configured with Limit and Window rather
// than Size and FillRate.
func (a Algorithm) Windowed() bool {
	return a == FixedWindow || a == SlidingWindowLog || a == SlidingWindowCounter || a == GCRA
}

// Spec configures one bucket. The zero value is not valid; config parsing
// fills quotaservice's defaults (size 100, fill rate 50/s, wait timeout
// 1s, max debt 10s, max tokens per request = fill rate, never idle).
type Spec struct {
	Algorithm Algorithm
	// Size is the bucket's capacity in tokens (TokenBucket, LeakyBucket)
	// or the burst tolerance (GCRA; 0 means Limit).
	Size int64
	// FillRate is tokens per second (TokenBucket, LeakyBucket).
	FillRate float64
	// Limit tokens per Window (window algorithms and GCRA).
	Limit  int64
	Window time.Duration
	// WaitTimeout is the longest wait answered OK_WAIT; a request's
	// max_wait can lower it, never raise it. FIXED_WINDOW and
	// SLIDING_WINDOW_COUNTER look at most into the next window,
	// SLIDING_WINDOW_LOG waits at most one Window, TOKEN_BUCKET at most
	// MaxDebt.
	WaitTimeout time.Duration
	// MaxIdle drops a dynamic bucket unused this long; 0 never drops.
	MaxIdle time.Duration
	// MaxDebt is how far into the future a TokenBucket request may
	// reserve tokens, and the most debt (in fill time) reports can leave.
	MaxDebt time.Duration
	// MaxTokensPerRequest refuses larger requests (too_many_tokens).
	MaxTokensPerRequest int64
	// SoftLimit in (0, 1) is a fraction of the limit: past it decisions
	// still admit but carry the warning "soft_limit". 0 is off.
	SoftLimit float64
	// CriticalReserve in [0, 1) is the fraction of the limit only
	// CRITICAL requests may use; SHEDDABLE ones are refused with reason
	// "reserved" once usage reaches the rest.
	CriticalReserve float64
	// Ban refuses a client that exceeds a threshold; zero is off.
	Ban Ban
}

// Ban refuses a key (a client id, or the bucket when the request has
// none) for Duration once it has asked for more than Threshold tokens
// within Interval.
type Ban struct {
	Threshold int64
	Interval  time.Duration
	Duration  time.Duration
}

// Namespace groups buckets: named ones, a default for names not listed,
// and a template for dynamic buckets created per name on first use.
type Namespace struct {
	Name    string
	Buckets map[string]*Spec
	// Default answers for names without their own bucket; nil is none.
	// All such names share the one default bucket.
	Default *Spec
	// Dynamic, when set, creates a bucket per unseen name.
	Dynamic *Spec
	// MaxDynamicBuckets caps the dynamic buckets alive at once; 0 is
	// unlimited (the config layer applies a finite default).
	MaxDynamicBuckets int
	// Revision is the config revision the namespace came from.
	Revision uint64
	// Shadow puts the namespace's buckets in shadow mode: every take is
	// answered OK while the buckets count what they decided
	// (Decision.Shadowed).
	Shadow bool
	// Tenants, when set, are the only tenants (NATS accounts whose
	// requests cross a service import) whose takes and reports the
	// namespace answers; requests from the service's own account always
	// are. The quota service checks it; the table does not.
	Tenants []string
}

// Config is every namespace a quota service answers for. The namespace
// "_default" holds the global default bucket.
type Config struct {
	Namespaces map[string]*Namespace
}

// GlobalDefault is the name of the namespace whose default bucket answers
// for namespaces that have no bucket of their own.
const GlobalDefault = "_default"
