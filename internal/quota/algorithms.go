package quota

import (
	"math"
	"math/bits"
)

// bucket is one bucket's state. Times are Unix nanoseconds. The state of
// every algorithm fits in s, except SLIDING_WINDOW_LOG's log, so a bucket
// is one small allocation.
type bucket struct {
	c *compiled
	// key is "namespace:name" as returned by Table.Take; the namespace's
	// map is keyed by its name part, sharing the bytes.
	key string
	// mark is the latest time the bucket has seen: a request's arrival or
	// an admission's effective time. Decisions are taken at
	// max(now, mark), so a clock that steps back, or a request arriving
	// while an earlier one waits, never takes effect before what was
	// already decided: every algorithm answers in arrival order.
	mark int64
	// s is the algorithm's state:
	//   TOKEN_BUCKET: credit (tokens × interval, ns), next (quotaservice's
	//                 tokensNextAvailable)
	//   LEAKY_BUCKET, GCRA: tat (when the queue is empty / the
	//                 theoretical arrival time)
	//   FIXED_WINDOW: window index, count in it, count in the next
	//   SLIDING_WINDOW_COUNTER: window index, previous, current, next
	s       [4]int64
	log     *swLog
	dynamic bool
}

// reset puts b in its initial state at t: full (drained false), or as if
// it had been drained at d (a leader's start, or a restart after a
// configuration change): no more than the limit was admitted at d, and
// nothing takes effect before d.
func (b *bucket) reset(c *compiled, t int64, drained bool, d int64) {
	b.c, b.s, b.log, b.mark = c, [4]int64{}, nil, t
	if c.spec.Algorithm == SlidingWindowLog {
		b.log = &swLog{}
	}
	if !drained {
		switch c.spec.Algorithm {
		case TokenBucket:
			b.s[0], b.s[1] = c.capNs, t
		case LeakyBucket, GCRA:
			b.s[0] = t
		case FixedWindow, SlidingWindowCounter:
			b.s[0] = floorDiv(t, c.window)
		}
		return
	}
	b.mark = max(t, d)
	switch c.spec.Algorithm {
	case TokenBucket:
		b.s[0], b.s[1] = 0, d
	case LeakyBucket, GCRA:
		b.s[0] = d + c.capNs
	case FixedWindow:
		b.s[0], b.s[1] = floorDiv(d, c.window), c.capacity
	case SlidingWindowCounter:
		b.s[0], b.s[2] = floorDiv(d, c.window), c.capacity
	case SlidingWindowLog:
		b.log.push(d, c.capacity)
	}
}

// advance brings the state to time t without changing any later decision:
// lazy fill, window roll-over, log pruning.
func (b *bucket) advance(t int64) {
	c := b.c
	switch c.spec.Algorithm {
	case TokenBucket:
		if t > b.s[1] {
			b.s[0] = min(c.capNs, b.s[0]+(t-b.s[1]))
			b.s[1] = t
		}
	case FixedWindow:
		k := floorDiv(t, c.window)
		switch {
		case k == b.s[0]:
		case k == b.s[0]+1:
			b.s[0], b.s[1], b.s[2] = k, b.s[2], 0
		default:
			b.s[0], b.s[1], b.s[2] = k, 0, 0
		}
	case SlidingWindowCounter:
		k := floorDiv(t, c.window)
		switch {
		case k == b.s[0]:
		case k == b.s[0]+1:
			b.s = [4]int64{k, b.s[2], b.s[3], 0}
		case k == b.s[0]+2:
			b.s = [4]int64{k, b.s[3], 0, 0}
		default:
			b.s = [4]int64{k, 0, 0, 0}
		}
	case SlidingWindowLog:
		b.log.expire(t - c.window)
	}
}

// place returns how long after t n tokens can take effect. When the
// algorithm cannot place them at all (a window algorithm looks at most
// into the next window; a full queue), ok is false and wait is a lower
// bound of when asking again can succeed. advance(t) must have been
// called.
func (b *bucket) place(n, t int64) (wait int64, ok bool) {
	c := b.c
	switch c.spec.Algorithm {
	case TokenBucket:
		// The caller waits until its own tokens have filled (quotaservice
		// tells it only the earlier callers' debt, so a borrower runs at
		// once): the bucket never lets more than size + rate×span through
		// in any span.
		need := n * c.interval
		return b.s[1] - t + need - min(b.s[0], need), true
	case LeakyBucket:
		q := max(0, b.s[0]-t)
		if over := q + n*c.interval - c.capNs; over > 0 {
			return over, false
		}
		return q, true
	case GCRA:
		return max(0, max(b.s[0], t)+n*c.interval-c.capNs-t), true
	case FixedWindow:
		start := b.s[0] * c.window
		switch {
		case b.s[1]+n <= c.capacity:
			return 0, true
		case b.s[2]+n <= c.capacity:
			return start + c.window - t, true
		}
		return start + 2*c.window - t, false
	case SlidingWindowCounter:
		start := b.s[0] * c.window
		e := t - start
		if x, ok := swcEarliest(b.s[1], b.s[2]+n, c.capacity, c.window); ok && x < c.window {
			return max(e, x) - e, true
		}
		if x, ok := swcEarliest(b.s[2], b.s[3]+n, c.capacity, c.window); ok && x < c.window {
			return c.window - e + x, true
		}
		x, _ := swcEarliest(b.s[3], n, c.capacity, c.window)
		return 2*c.window - e + min(x, c.window), false
	case SlidingWindowLog:
		if b.log.sum+n <= c.capacity {
			return 0, true
		}
		if at, ok := b.log.roomAt(n, c.capacity); ok {
			return at + c.window - t, true
		}
	}
	return 0, false
}

// earliestArrival is the earliest arrival time of a request that may be
// given a time to take effect at: a FIXED_WINDOW or SLIDING_WINDOW_COUNTER
// request takes effect in the window it arrives in or the next, never
// further ahead, even when the bucket's clock is already in that next
// window (an earlier request waits for it). Other algorithms have no such
// bound: math.MinInt64.
func (b *bucket) earliestArrival(at int64) int64 {
	switch b.c.spec.Algorithm {
	case FixedWindow, SlidingWindowCounter:
		return (floorDiv(at, b.c.window) - 1) * b.c.window
	}
	return math.MinInt64
}

// swcEarliest returns the earliest offset x into a window at which the
// survey's estimate prev×(W−x)/W + cur stays within limit, exactly (no
// rounding down): prev×(W−x) + cur×W ≤ limit×W. ok is false when cur
// alone exceeds limit. x may be W (the window is never enough).
func swcEarliest(prev, cur, limit, w int64) (x int64, ok bool) {
	if cur > limit {
		return 0, false
	}
	if prev == 0 {
		return 0, true
	}
	// W − x ≤ floor((limit−cur)×W / prev), in 128 bits.
	hi, lo := bits.Mul64(uint64(limit-cur), uint64(w))
	if hi >= uint64(prev) {
		return 0, true // the quotient exceeds 2^64 > W
	}
	q, _ := bits.Div64(hi, lo, uint64(prev))
	if q >= uint64(w) {
		return 0, true
	}
	return w - int64(q), true
}

// commit takes n tokens effective wait after t, as placed by place.
func (b *bucket) commit(n, t, wait int64) {
	c := b.c
	switch c.spec.Algorithm {
	case TokenBucket:
		need := n * c.interval
		use := min(b.s[0], need)
		b.s[0] -= use
		b.s[1] += need - use
	case LeakyBucket, GCRA:
		b.s[0] = max(b.s[0], t) + n*c.interval
	case FixedWindow:
		if wait == 0 || t+wait < (b.s[0]+1)*c.window {
			b.s[1] += n
		} else {
			b.s[2] += n
		}
	case SlidingWindowCounter:
		if t+wait < (b.s[0]+1)*c.window {
			b.s[2] += n
		} else {
			b.s[3] += n
		}
	case SlidingWindowLog:
		b.log.push(t+wait, n)
	}
	if c.spec.Algorithm.Windowed() && c.spec.Algorithm != GCRA {
		// Later requests take effect no earlier (the bucket algorithms
		// and GCRA keep that order in their own state).
		b.mark = max(b.mark, t+wait)
	}
}

// lastAt is a time no admission of b takes effect after.
func (b *bucket) lastAt() int64 {
	switch b.c.spec.Algorithm {
	case TokenBucket:
		return max(b.mark, b.s[1])
	case LeakyBucket, GCRA:
		return max(b.mark, b.s[0])
	}
	return b.mark
}

// charge is post-accounting: n tokens used at t, never refused. It
// pushes a token bucket into debt of at most max_debt of fill time, the
// other algorithms at most to "drained at t"; the excess is forgiven.
func (b *bucket) charge(n, t int64) {
	c := b.c
	// Nothing beyond these can count, and they keep the arithmetic below
	// far from overflow whatever n is.
	if c.spec.Algorithm == TokenBucket {
		n = min(n, c.capacity+c.debt/c.interval+1)
	} else {
		n = min(n, c.capacity)
	}
	switch c.spec.Algorithm {
	case TokenBucket:
		need := n * c.interval
		use := min(b.s[0], need)
		b.s[0] -= use
		b.s[1] = min(b.s[1]+need-use, t+c.debt)
	case LeakyBucket, GCRA:
		b.s[0] = min(max(b.s[0], t)+n*c.interval, max(b.s[0], t+c.capNs))
	case FixedWindow:
		b.s[1] = min(b.s[1]+n, max(b.s[1], c.capacity))
	case SlidingWindowCounter:
		b.s[2] = min(b.s[2]+n, max(b.s[2], c.capacity))
	case SlidingWindowLog:
		// Capped so the log never holds more than the limit in tokens:
		// a flood of reports cannot grow it.
		if n = min(n, c.capacity-b.log.sum); n > 0 {
			b.commit(n, t, 0)
		}
	}
}

// remaining is how many tokens a request at t could take without waiting
// (the "remaining" of a decision). advance(t) must have been called.
func (b *bucket) remaining(t int64) int64 {
	c := b.c
	var r int64
	switch c.spec.Algorithm {
	case TokenBucket:
		if b.s[1] <= t {
			r = b.s[0] / c.interval
		}
	case LeakyBucket, GCRA:
		r = (c.capNs - max(0, b.s[0]-t)) / c.interval
	case FixedWindow:
		r = c.capacity - b.s[1]
	case SlidingWindowCounter:
		e := t - b.s[0]*c.window
		hi, lo := bits.Mul64(uint64(b.s[1]), uint64(c.window-e))
		q, rem := bits.Div64(hi, lo, uint64(c.window))
		if rem != 0 {
			q++
		}
		r = c.capacity - b.s[2] - int64(q)
	case SlidingWindowLog:
		if b.mark <= t {
			r = c.capacity - b.log.sum
		}
	}
	return max(0, min(r, c.capacity))
}

// freshAt is when b's state becomes the same as a new bucket's, so that
// dropping it and creating it again admits nothing more.
func (b *bucket) freshAt() int64 {
	c := b.c
	switch c.spec.Algorithm {
	case TokenBucket:
		return b.s[1] + c.capNs - b.s[0]
	case LeakyBucket, GCRA:
		return b.s[0]
	case FixedWindow:
		if b.s[2] > 0 {
			return (b.s[0] + 2) * c.window
		}
		return (b.s[0] + 1) * c.window
	case SlidingWindowCounter:
		return (b.s[0] + 3) * c.window
	}
	if at, ok := b.log.last(); ok {
		return at + c.window
	}
	return 0
}
