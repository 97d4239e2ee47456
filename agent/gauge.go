package agent

import (
	"container/list"
	"context"
	"fmt"
	"math"
	"sync"
)

// Unlimited is the limit of a Gauge whose capacity is unlimited.
const Unlimited = math.MaxInt

// A Gauge bounds how many units of a gauge resource (connections,
// in-flight transactions) this client holds at once. Its limit is the
// granted capacity rounded down to a whole number of units. When the limit
// shrinks below what is held, holders keep their units and new acquires
// wait until the holders have drained below the new limit.
//
// Waiters are served in order of arrival: a large request at the head of
// the queue is not overtaken by smaller ones, whether they Acquire or
// TryAcquire. The exception is a request for more than the whole current
// limit: it cannot be served until the limit grows, so, as in
// golang.org/x/sync/semaphore, it waits without holding up the others
// (keeping its place for when the limit allows it).
//
// Gauge is safe for simultaneous use by multiple goroutines.
type Gauge struct {
	mu      sync.Mutex
	limit   int
	held    int
	waiting int       // units requested by queued waiters
	waiters list.List // of *gaugeWaiter
	peak    int       // highest held+waiting since the last sample
	closed  bool
	res     *resource
	shadow  shadowGauge
}

type gaugeWaiter struct {
	n     int
	ready chan struct{}
}

func newGauge() *Gauge { return &Gauge{} }

// Limit returns the current maximum in flight, Unlimited if unlimited.
func (g *Gauge) Limit() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.limit
}

// InFlight returns the number of units currently held.
func (g *Gauge) InFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// capacityToLimit rounds a capacity down to whole units.
func capacityToLimit(c float64) int {
	switch {
	case math.IsInf(c, 1):
		return Unlimited
	case !(c >= 1): // NaN, negative, below one unit
		return 0
	case c >= float64(math.MaxInt32):
		return math.MaxInt32
	}
	return int(math.Floor(c + 1e-9))
}

func (g *Gauge) setLimit(limit int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return // a closed gauge stays at 0
	}
	g.limit = max(limit, 0)
	g.notifyLocked()
}

func (g *Gauge) shut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	g.limit = 0
	for e := g.waiters.Front(); e != nil; e = g.waiters.Front() {
		w := g.waiters.Remove(e).(*gaugeWaiter)
		g.waiting -= w.n
		close(w.ready) // the waiter sees closed and takes nothing
	}
}

func (g *Gauge) notePeakLocked() {
	if v := g.held + g.waiting; v > g.peak {
		g.peak = v
	}
}

// fitsLocked reports whether n more units stay within the limit.
func (g *Gauge) fitsLocked(n int) bool {
	return g.limit == Unlimited || (g.held <= g.limit && n <= g.limit-g.held)
}

// Acquire blocks until n units can be held without exceeding the limit, or
// until ctx ends; it fails at once if ctx has already ended. On success
// the caller must Release(n) later. A capacity
// of 0 blocks until capacity is granted. Acquire(ctx, 0) returns nil; a
// negative n is an error, as for Release, and takes nothing.
func (g *Gauge) Acquire(ctx context.Context, n int) (err error) {
	defer func() { g.res.count(n, err == nil) }()
	if n < 0 {
		return fmt.Errorf("agent: gauge acquire of %d units: n must not be negative", n)
	}
	if n == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	if !g.queuedAheadLocked() && g.fitsLocked(n) {
		g.shadowTakeLocked(g.held, n)
		g.held += n
		g.notePeakLocked()
		g.mu.Unlock()
		return nil
	}
	w := &gaugeWaiter{n: n, ready: make(chan struct{})}
	e := g.waiters.PushBack(w)
	g.waiting += n
	g.notePeakLocked()
	g.mu.Unlock()

	select {
	case <-w.ready:
		if g.isClosed() {
			return ErrClosed
		}
		return nil
	case <-ctx.Done():
		g.mu.Lock()
		select {
		case <-w.ready:
			// Granted while we were cancelled: keep it, as if the
			// cancellation came after.
			closed := g.closed
			g.mu.Unlock()
			if closed {
				return ErrClosed
			}
			return nil
		default:
		}
		g.waiters.Remove(e)
		g.waiting -= n
		g.notifyLocked() // it may have been holding others up

		g.mu.Unlock()
		return ctx.Err()
	}
}

func (g *Gauge) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// TryAcquire takes n units if they fit now, and reports whether it did.
// Like Acquire it does not overtake a queued waiter that could be served
// at the current limit, even when n would fit; a waiter for more than the
// whole limit does not hold it up. Failed attempts count as demand.
// TryAcquire(0) reports true; a negative n false.
func (g *Gauge) TryAcquire(n int) (ok bool) {
	defer func() { g.res.count(n, ok) }()
	if n <= 0 {
		return n == 0 // a negative count takes nothing, as Acquire refuses it
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed && !g.queuedAheadLocked() && g.fitsLocked(n) {
		g.shadowTakeLocked(g.held, n)
		g.held += n
		g.notePeakLocked()
		return true
	}
	if v := g.held + g.waiting + n; v > g.peak {
		g.peak = v
	}
	return false
}

// Release gives back n units taken with Acquire or TryAcquire; it still
// works after Close, for holders finishing late. Releasing more than is
// held is a bug in the caller: Release then returns ErrReleaseExceedsHeld
// and changes nothing, since freeing units that other holders still use
// would let the gauge exceed its limit (golang.org/x/sync/semaphore panics
// instead). A negative n is an error too; Release(0) returns nil.
func (g *Gauge) Release(n int) error {
	if n < 0 {
		return fmt.Errorf("agent: gauge release of %d units: n must not be negative", n)
	}
	if n == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if n > g.held {
		return fmt.Errorf("%w: releasing %d with %d held", ErrReleaseExceedsHeld, n, g.held)
	}
	g.held -= n
	g.notifyLocked()
	return nil
}

// Do acquires n units, runs f, and releases them, returning f's error or
// the error from Acquire.
func (g *Gauge) Do(ctx context.Context, n int, f func(context.Context) error) error {
	if err := g.Acquire(ctx, n); err != nil {
		return err
	}
	// Release fails only if someone else gave back units they did not
	// hold; that error belongs to them.
	defer g.Release(n)
	return f(ctx)
}

// notifyLocked admits waiters from the head of the queue while they fit.
func (g *Gauge) notifyLocked() {
	for e := g.waiters.Front(); e != nil; {
		w := e.Value.(*gaugeWaiter)
		next := e.Next()
		switch {
		case w.n > g.limit:
			// Cannot be served at this limit: does not hold up the rest.
		case !g.fitsLocked(w.n):
			return
		default:
			g.shadowTakeLocked(g.held, w.n)
			g.held += w.n
			g.waiting -= w.n
			g.waiters.Remove(e)
			close(w.ready)
		}
		e = next
	}
}

// queuedAheadLocked reports whether a waiter that could be served at the
// current limit is queued: a new Acquire must not overtake it.
func (g *Gauge) queuedAheadLocked() bool {
	for e := g.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*gaugeWaiter).n <= g.limit {
			return true
		}
	}
	return false
}

// samplePeak returns the peak demand since the last sample and starts a new
// window at the current demand.
func (g *Gauge) samplePeak() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.peak
	g.peak = g.held + g.waiting
	return p
}
