package agent

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/allot/allot/agent/internal/clock"
	"golang.org/x/time/rate"
)

// maxBurst bounds the automatic burst so huge capacities cannot overflow.
const maxBurst = 1 << 30

// tokenEpsilon absorbs float rounding when deciding that a reservation is
// due; it is a millionth of a token, far below any measurable over-admission.
const tokenEpsilon = 1e-6

// The earned-token counter that reservations are measured on is rebased
// once it reaches rebaseTokens and a rebaseSpan's worth of the limit, so
// that its rounding error stays far below tokenEpsilon however long the
// limiter runs (an uptime-long counter at 100k/s loses whole tokens'
// worth of small increments within a day). 2^26 has a unit in the last
// place of 1.5e-8; above about 1.1e6/s the span keeps rebases to one a
// minute, and its rounding stays below a nanosecond's worth of tokens.
const (
	rebaseTokens = 1 << 26
	rebaseSpan   = time.Minute
)

// A RateLimiter admits events at the rate the coordinator granted this
// client for one rate resource. It is a token bucket of size Burst, refilled
// at Limit tokens per second, where Limit follows the granted capacity (or
// the failure mode's capacity while no lease is valid).
//
// Like golang.org/x/time/rate, it has three ways to take tokens: Allow
// (drop the event if no token is available), Reserve (learn how long to
// wait) and Wait (block until the event may happen). Unlike x/time/rate:
//
//   - The time is always read inside the limiter's lock, so concurrent
//     callers can never over-admit: a time read before the lock can reach
//     it after a later one, and a bucket moved back in time credits
//     tokens twice. That is why AllowN and ReserveN take no time argument.
//   - A Limit of 0 blocks: Wait parks until the capacity changes or its
//     context ends, and waiters already holding a reservation are
//     rescheduled whenever the capacity changes, keeping their place.
//   - Every call is counted as demand; the agent estimates this client's
//     wants from it unless they were set with SetWants.
//
// By default the burst is a second's worth of capacity (at least 1) and
// follows the capacity; WithBurst fixes it. The bucket is full when the
// capacity rises from nothing (the first lease, or a lease after idling),
// so a service serves its first requests at once. Over any interval of
// length T a client admits at most burst + capacity × T: the burst is how
// far it may run ahead of its share over a short interval (set WithBurst
// lower where that matters).
//
// A refused call with a positive capacity asks the coordinator for more
// at once (once per capacity granted): a lease that decayed while the
// client was idle follows returning demand within a round trip rather
// than at the next refresh.
//
// RateLimiter is safe for simultaneous use by multiple goroutines.
type RateLimiter struct {
	mu         sync.Mutex
	clock      clock.Clock // nil: package time
	limit      rate.Limit
	burst      int
	fixedBurst bool
	tokens     float64   // may be negative: tokens reserved ahead of time
	last       time.Time // time tokens were last advanced to
	// Tokens earned in the current epoch, uncapped, are segBase plus
	// limit times the time from segStart to last: one product rather than
	// a running sum, so frequent calls add no rounding.
	epoch     *epoch
	segBase   float64
	segStart  time.Time
	rebaseAt  time.Time // when earned reaches the rebase threshold
	requested int64     // demand since the last sample
	throttled bool      // a call waited or was refused since the last sample
	changed   chan struct{}
	closed    bool
	starved   bool // a refused call asked the agent for more, since the last change
	// asking: that ask is in flight; asked is closed when it is answered
	// (or the capacity changes).
	asking bool
	asked  chan struct{}
	shadow shadowRate

	res *resource // nil for limiters built in tests
}

func newRateLimiter(clk clock.Clock, burst int) *RateLimiter {
	t := clock.Now(clk)
	l := &RateLimiter{clock: clk, burst: 1, last: t, epoch: &epoch{}, segStart: t}
	if burst > 0 {
		l.burst, l.fixedBurst = burst, true
	}
	return l
}

// autoBurst is the default burst for a limit: a second's worth, at least
// 1, as a web service expects of a per-second rate.
func autoBurst(limit rate.Limit) int {
	if limit == rate.Inf {
		return maxBurst
	}
	b := math.Ceil(float64(limit))
	switch {
	case !(b >= 1):
		return 1
	case b > maxBurst:
		return maxBurst
	}
	return int(b)
}

// Limit returns the current rate in events per second; rate.Inf when
// unlimited and 0 when blocked.
func (l *RateLimiter) Limit() rate.Limit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// Burst returns the maximum number of tokens a single call may take.
func (l *RateLimiter) Burst() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.burst
}

// Tokens returns the number of tokens available now. It is negative when
// tokens have been reserved ahead of time.
func (l *RateLimiter) Tokens() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(clock.Now(l.clock))
	return l.tokens
}

// advanceLocked adds the tokens generated since l.last. Time never moves
// backwards here: an earlier t is ignored rather than re-crediting time.
func (l *RateLimiter) advanceLocked(t time.Time) {
	if !t.After(l.last) {
		return
	}
	elapsed := t.Sub(l.last)
	l.last = t
	if l.limit == 0 || l.limit == rate.Inf {
		return
	}
	l.tokens = min(l.tokens+float64(l.limit)*elapsed.Seconds(), float64(l.burst))
	if !t.Before(l.rebaseAt) {
		next := &epoch{}
		l.epoch.shift, l.epoch.next = l.earnedLocked(), next
		l.epoch = next
		l.startSegmentLocked(0)
	}
}

// startSegmentLocked starts counting earned tokens at l.limit from l.last,
// base having been earned earlier in the epoch, and schedules the rebase.
func (l *RateLimiter) startSegmentLocked(base float64) {
	l.segBase, l.segStart = base, l.last
	if l.limit == 0 || l.limit == rate.Inf {
		return // nothing is earned; advanceLocked does not look at rebaseAt
	}
	left := max(rebaseTokens, float64(l.limit)*rebaseSpan.Seconds()) - base
	d := max(left, 0) / float64(l.limit) * float64(time.Second)
	l.rebaseAt = l.last.Add(time.Duration(min(d, 1<<62)))
}

// earnedLocked returns the tokens earned in the current epoch up to l.last.
func (l *RateLimiter) earnedLocked() float64 {
	if l.limit == 0 || l.limit == rate.Inf {
		return l.segBase
	}
	return l.segBase + float64(l.limit)*l.last.Sub(l.segStart).Seconds()
}

// An epoch is one span of the earned-token counter. When the counter is
// rebased, the old epoch records how much was subtracted (shift) and links
// to the new one, so that a reservation made in it can translate its due
// mark. The limiter holds only the current epoch: old ones stay reachable
// only from reservations that still refer to them.
type epoch struct {
	shift float64
	next  *epoch
}

// A mark is the earned-token count at which a reservation is due.
type mark struct {
	at float64
	ep *epoch
}

// remainingLocked returns how many tokens are still to be earned before m
// is due (at most zero when it is due), moving m to the current epoch.
func (l *RateLimiter) remainingLocked(m *mark) float64 {
	for m.ep != l.epoch {
		m.at -= m.ep.shift
		m.ep = m.ep.next
		if m.at <= 0 { // due before the current epoch began
			m.at, m.ep = 0, l.epoch
		}
	}
	return m.at - l.earnedLocked()
}

// changedLocked returns the channel closed at the next capacity change.
func (l *RateLimiter) changedLocked() <-chan struct{} {
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

func (l *RateLimiter) wakeLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
}

// setLimit installs a new rate and wakes waiters so they reschedule.
func (l *RateLimiter) setLimit(limit rate.Limit) {
	if !(limit >= 0) { // NaN or negative
		limit = 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(clock.Now(l.clock))
	if limit == l.limit || l.closed { // a closed limiter stays at 0
		return
	}
	old, oldBurst := l.limit, l.burst
	base := l.earnedLocked()
	l.limit = limit
	l.startSegmentLocked(base) // a new rate, a new segment
	l.starved = false
	l.endAskLocked()
	if !l.fixedBurst {
		l.burst = autoBurst(limit)
	}
	if l.burst > oldBurst && l.tokens >= 0 && old != rate.Inf {
		// More capacity, a larger burst: its room is there at once, as
		// a larger lease's first second would be.
		l.tokens += float64(l.burst - oldBurst)
	}
	switch {
	case limit == rate.Inf:
		l.tokens = max(l.tokens, 0) // debts are forgiven
	case limit == 0:
		l.tokens = min(l.tokens, 0) // capacity 0 blocks, even saved tokens
	case old == rate.Inf:
		l.tokens = 0
	case old == 0 && l.tokens >= 0:
		// Capacity after none (the first lease, or demand after idling):
		// the requests that waited for it are served at once.
		l.tokens = float64(l.burst)
	}
	if l.tokens > float64(l.burst) {
		l.tokens = float64(l.burst)
	}
	l.wakeLocked()
}

func (l *RateLimiter) shut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.advanceLocked(clock.Now(l.clock))
	base := l.earnedLocked()
	l.closed = true
	l.limit = 0
	l.startSegmentLocked(base)
	l.tokens = min(l.tokens, 0)
	l.endAskLocked()
	l.wakeLocked()
}

// Allow reports whether an event may happen now. It is AllowN(1).
func (l *RateLimiter) Allow() bool { return l.AllowN(1) }

// noteStarvedLocked reports whether a call has just been refused (demand
// while the limit is 0, or beyond the tokens of a positive limit), so that
// the agent asks for capacity without waiting for the next demand sample:
// the coordinator grants more at once if the global capacity has room. It
// reports once per capacity change, so a client at its share does not
// ask again and again.
func (l *RateLimiter) noteStarvedLocked() bool {
	if l.starved || l.res == nil || l.closed {
		return false
	}
	l.starved, l.asking, l.asked = true, true, make(chan struct{})
	return true
}

// endAskLocked ends the ask in flight, if any, waking AwaitCapacity.
func (l *RateLimiter) endAskLocked() {
	if l.asking {
		l.asking = false
		close(l.asked)
	}
}

// askAnswered is called by the agent once a refresh has been answered
// (or has failed) and its capacities installed.
func (l *RateLimiter) askAnswered() {
	l.mu.Lock()
	l.endAskLocked()
	l.mu.Unlock()
}

// AwaitCapacity waits while the limiter has no capacity at all, or while
// a refused call's ask for more capacity (see RateLimiter) is in flight:
// until a positive limit is installed, or the ask is answered, or ctx ends
// (its error is returned), or the limiter is closed (ErrClosed). The HTTP
// and gRPC middlewares use it, bounded, so that the first requests of a
// route, and those after an idle spell whose lease decayed, wait for the
// coordinator's answer instead of being refused.
func (l *RateLimiter) AwaitCapacity(ctx context.Context) error {
	for {
		l.mu.Lock()
		var ch <-chan struct{}
		switch {
		case l.closed:
			l.mu.Unlock()
			return ErrClosed
		case l.asking:
			ch = l.asked
		case l.limit > 0:
			l.mu.Unlock()
			return nil
		default:
			ch = l.changedLocked()
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Asking reports whether a refused call's ask for more capacity is in
// flight (see AwaitCapacity).
func (l *RateLimiter) Asking() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.asking
}

// AllowN reports whether n events may happen now, and if so takes n
// tokens. Use it to drop or skip events that exceed the rate; otherwise use
// Wait. AllowN(0) is always true. Rejected calls still count as demand.
func (l *RateLimiter) AllowN(n int) (ok bool) {
	defer func() { l.res.count(n, ok) }()
	if n <= 0 {
		return true
	}
	l.mu.Lock()
	l.requested += int64(n)
	if l.limit == rate.Inf {
		l.shadowTakeLocked(time.Time{}, n)
		l.mu.Unlock()
		return true
	}
	t := clock.Now(l.clock)
	l.advanceLocked(t)
	if n <= l.burst && l.tokens >= float64(n) {
		l.tokens -= float64(n)
		l.shadowTakeLocked(t, n)
		l.mu.Unlock()
		return true
	}
	l.throttled = true
	starved := l.noteStarvedLocked()
	l.mu.Unlock()
	if starved {
		l.res.starved()
	}
	return false
}

// reservation outcomes.
const (
	admitted = iota // tokens taken, act now
	reserved        // tokens taken ahead of time, act when due
	parked          // nothing taken: the limit is 0, wait for a change
)

type resv struct {
	state int
	due   mark          // when a reservation is due
	wait  time.Duration // estimated delay; rate.InfDuration when parked
	ch    <-chan struct{}
}

// reserveLocked takes n tokens now or ahead of time. It refuses (with an
// error) when n exceeds the burst, or when the delay exceeds maxWait.
func (l *RateLimiter) reserveLocked(t time.Time, n int, maxWait time.Duration) (resv, error) {
	if l.closed {
		return resv{}, ErrClosed
	}
	if l.limit == rate.Inf {
		l.shadowTakeLocked(t, n)
		return resv{state: admitted}, nil
	}
	l.advanceLocked(t)
	if l.limit == 0 {
		return resv{state: parked, wait: rate.InfDuration, ch: l.changedLocked()}, nil
	}
	if n > l.burst {
		return resv{}, fmt.Errorf("%w: n=%d, burst=%d", ErrExceedsBurst, n, l.burst)
	}
	if l.tokens >= float64(n) {
		l.tokens -= float64(n)
		l.shadowTakeLocked(t, n)
		return resv{state: admitted}, nil
	}
	deficit := float64(n) - l.tokens
	wait := durationFromTokens(l.limit, deficit)
	if wait > maxWait {
		return resv{}, fmt.Errorf("%w: n=%d needs %v at %g/s", ErrWouldExceedDeadline, n, wait, float64(l.limit))
	}
	l.tokens -= float64(n)
	l.shadowTakeLocked(t, n)
	due := mark{at: l.earnedLocked() + deficit, ep: l.epoch}
	return resv{state: reserved, due: due, wait: wait, ch: l.changedLocked()}, nil
}

// recheckLocked updates a reservation after a wake-up: due, rescheduled at
// the current rate (keeping its place), or parked while the limit is 0.
func (l *RateLimiter) recheckLocked(t time.Time, r *resv) {
	l.advanceLocked(t)
	remaining := l.remainingLocked(&r.due)
	switch {
	case l.limit == rate.Inf || remaining <= tokenEpsilon:
		r.state = admitted
	case l.limit == 0:
		r.wait, r.ch = rate.InfDuration, l.changedLocked()
	default:
		r.wait, r.ch = durationFromTokens(l.limit, remaining), l.changedLocked()
	}
}

// cancelLocked gives back the tokens of a reservation that is not yet due.
func (l *RateLimiter) cancelLocked(t time.Time, n int, due *mark) {
	l.advanceLocked(t)
	if l.remainingLocked(due) <= tokenEpsilon {
		return
	}
	l.tokens = min(l.tokens+float64(n), float64(l.burst))
}

func durationFromTokens(limit rate.Limit, tokens float64) time.Duration {
	if limit <= 0 {
		return rate.InfDuration
	}
	d := tokens / float64(limit) * float64(time.Second)
	if d >= float64(math.MaxInt64) {
		return rate.InfDuration
	}
	return time.Duration(math.Ceil(d))
}

// Wait is shorthand for WaitN(ctx, 1).
func (l *RateLimiter) Wait(ctx context.Context) error {
	return l.WaitN(ctx, 1)
}

// WaitN blocks until the limiter permits n events to happen. It returns an
// error if n exceeds the burst (unless the limit is unlimited), if the
// context ends first, or if, at the current rate, the wait would last
// beyond the context's deadline. While the limit is 0 WaitN blocks until
// the capacity changes or the context ends; a caller already waiting is
// rescheduled, keeping its place, whenever the capacity changes.
// WaitN(ctx, 0) returns nil at once.
func (l *RateLimiter) WaitN(ctx context.Context, n int) (err error) {
	defer func() { l.res.count(n, err == nil) }()
	if n <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
	}
	maxWait := rate.InfDuration
	deadline, hasDeadline := ctx.Deadline()
	l.mu.Lock()
	l.requested += int64(n)
	t := clock.Now(l.clock)
	if hasDeadline {
		maxWait = deadline.Sub(t)
	}
	r, err := l.reserveLocked(t, n, maxWait)
	if err != nil || r.state == admitted {
		l.mu.Unlock()
		return err
	}
	l.throttled = true
	starved := l.noteStarvedLocked()
	l.mu.Unlock()
	if starved {
		l.res.starved()
	}
	return l.waitSlow(ctx, n, r, hasDeadline, deadline)
}

func (l *RateLimiter) waitSlow(ctx context.Context, n int, r resv, hasDeadline bool, deadline time.Time) error {
	for {
		var timerC <-chan time.Time
		var stop func() bool
		if r.wait != rate.InfDuration {
			timerC, stop = clock.NewTimer(l.clock, r.wait)
		}
		select {
		case <-timerC:
		case <-r.ch:
		case <-ctx.Done():
		}
		if stop != nil {
			stop()
		}
		l.mu.Lock()
		t := clock.Now(l.clock)
		if r.state == reserved {
			l.recheckLocked(t, &r)
		}
		switch {
		case r.state == admitted:
			l.mu.Unlock()
			return nil
		case l.closed:
			l.mu.Unlock()
			return ErrClosed
		case ctx.Err() != nil:
			if r.state == reserved {
				l.cancelLocked(t, n, &r.due)
			}
			l.mu.Unlock()
			return ctx.Err()
		case r.state == parked:
			maxWait := rate.InfDuration
			if hasDeadline {
				maxWait = deadline.Sub(t)
			}
			var err error
			r, err = l.reserveLocked(t, n, maxWait)
			if err != nil || r.state == admitted {
				l.mu.Unlock()
				return err
			}
		}
		l.mu.Unlock()
	}
}

// A Reservation holds tokens taken ahead of time by ReserveN. Unlike
// WaitN, a reservation's delay is fixed when it is made; it does not
// follow later capacity changes.
type Reservation struct {
	l         *RateLimiter
	ok        bool
	n         int
	due       mark
	timeToAct time.Time
}

// Reserve is shorthand for ReserveN(1).
func (l *RateLimiter) Reserve() *Reservation {
	return l.ReserveN(1)
}

// ReserveN takes n tokens now or ahead of time and returns a Reservation
// saying how long the caller must wait before the n events happen. The
// reservation is not OK if n exceeds the burst, the limit is 0, or the
// agent is closed. Use it to slow down without dropping events when a
// context is not at hand; otherwise prefer WaitN.
func (l *RateLimiter) ReserveN(n int) (rv *Reservation) {
	defer func() { l.res.count(n, rv.ok) }()
	l.mu.Lock()
	defer l.mu.Unlock()
	t := clock.Now(l.clock)
	if n <= 0 {
		return &Reservation{l: l, ok: true, timeToAct: t}
	}
	l.requested += int64(n)
	r, err := l.reserveLocked(t, n, rate.InfDuration)
	if err != nil || r.state == parked {
		return &Reservation{l: l}
	}
	res := &Reservation{l: l, ok: true, timeToAct: t}
	if r.state == reserved {
		res.n, res.due, res.timeToAct = n, r.due, t.Add(r.wait)
	}
	return res
}

// OK reports whether the limiter granted the tokens. If not, Delay returns
// rate.InfDuration and Cancel does nothing. A zero or nil Reservation is
// not OK.
func (r *Reservation) OK() bool { return r != nil && r.ok }

// Delay is shorthand for DelayFrom at the limiter's current time.
func (r *Reservation) Delay() time.Duration {
	if !r.OK() {
		return rate.InfDuration
	}
	return r.DelayFrom(clock.Now(r.l.clock))
}

// DelayFrom returns how long after t the holder must wait before acting;
// zero means act now, rate.InfDuration means the reservation is not OK.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	if !r.OK() {
		return rate.InfDuration
	}
	return max(r.timeToAct.Sub(t), 0)
}

// Cancel says the holder will not act and gives the tokens back if the
// reservation is not yet due.
func (r *Reservation) Cancel() {
	if !r.OK() || r.n == 0 {
		return
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.l.cancelLocked(clock.Now(r.l.clock), r.n, &r.due)
	r.n = 0
}

// sampleDemand returns and resets the number of tokens requested since the
// previous call, and whether any call waited or was refused.
func (l *RateLimiter) sampleDemand() (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, th := l.requested, l.throttled
	l.requested, l.throttled = 0, false
	return d, th
}
