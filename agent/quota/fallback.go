package quota

import (
	"math"
	"sync"
	"time"
)

// A bucket is a namespace's local fallback: a token bucket of fixed rate
// that starts full, as quotaservice's buckets do. Its rate never changes,
// so a wait it answers is final.
type bucket struct {
	rate  float64 // tokens per second
	burst int

	mu     sync.Mutex
	tokens float64 // negative: charged into debt by reports
	last   time.Time
}

func newBucket(f fallback, t time.Time) *bucket {
	return &bucket{rate: f.rate, burst: f.burst, tokens: float64(f.burst), last: t}
}

// advanceLocked adds the tokens earned since b.last; an earlier t is
// ignored rather than re-crediting time.
func (b *bucket) advanceLocked(t time.Time) {
	if !t.After(b.last) {
		return
	}
	b.tokens = min(b.tokens+b.rate*t.Sub(b.last).Seconds(), float64(b.burst))
	b.last = t
}

// reserve takes n tokens at t, now or ahead of time, unless n exceeds the
// burst or the wait would exceed maxWait. It returns the wait (the wait it
// would have needed when refused) and the tokens left.
func (b *bucket) reserve(t time.Time, n int64, maxWait time.Duration) (wait time.Duration, left float64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(t)
	if n > int64(b.burst) {
		return 0, b.tokens, false
	}
	f := float64(n)
	if n == 0 || b.tokens >= f { // a peek never waits, even in debt
		b.tokens -= f
		return 0, b.tokens, true
	}
	wait = b.durationFor(f - b.tokens)
	if wait > maxWait {
		return wait, b.tokens, false
	}
	b.tokens -= f
	return wait, b.tokens, true
}

// charge takes n tokens at t after the fact, into debt if need be, for a
// report made while the fallback decides. The debt is bounded at a
// FallbackWait's worth beyond the burst so a burst of reports cannot
// block the fallback for long.
func (b *bucket) charge(t time.Time, n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advanceLocked(t)
	floor := -b.rate * FallbackWait.Seconds()
	b.tokens = max(b.tokens-float64(n), floor)
}

// durationFor is the time b takes to earn tokens, rounded up.
func (b *bucket) durationFor(tokens float64) time.Duration {
	d := tokens / b.rate * float64(time.Second)
	if d >= float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(math.Ceil(d))
}
