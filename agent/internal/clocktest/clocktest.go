// Package clocktest is the manually driven clock of the agent's tests and
// of its quota and domain clients' tests: time moves only when the test
// moves it (Set, Advance, or Drive, which fires a call's timers as they
// are armed), so what a test checks of timing does not depend on the
// machine's speed.
package clocktest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/allot/allot/internal/poll"
)

// Fake is a manually driven clock (an agent.Clock). Its timers fire when
// Set or Advance reach them. Methods are safe for concurrent use.
type Fake struct {
	mu     sync.Mutex
	t      time.Time
	step   time.Duration
	timers []*timer
}

type timer struct {
	at    time.Time
	ch    chan time.Time
	fired bool
}

// New returns a Fake at a fixed date.
func New() *Fake { return At(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)) }

// At returns a Fake at t.
func At(t time.Time) *Fake { return &Fake{t: t} }

// SetStep makes every Now advance time by d first (0: Now does not move
// time), which makes concurrent callers see distinct times.
func (c *Fake) SetStep(d time.Duration) {
	c.mu.Lock()
	c.step = d
	c.mu.Unlock()
}

// Now returns the time, first advanced by the step if one is set.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// Peek returns the time without advancing it.
func (c *Fake) Peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// NewTimer returns a timer that fires once time reaches d from now (at
// once when d is not positive), and its stop function.
func (c *Fake) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &timer{at: c.t.Add(d), ch: make(chan time.Time, 1)}
	if d <= 0 {
		ft.fired = true
		ft.ch <- c.t
	} else {
		c.timers = append(c.timers, ft)
	}
	return ft.ch, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if ft.fired {
			return false
		}
		ft.fired = true
		c.removeLocked(ft)
		return true
	}
}

func (c *Fake) removeLocked(ft *timer) {
	if i := slices.Index(c.timers, ft); i >= 0 {
		c.timers = slices.Delete(c.timers, i, i+1)
	}
}

// Set moves time to t (never backwards) and fires the timers due.
func (c *Fake) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.t) {
		c.t = t
	}
	kept := c.timers[:0]
	for _, ft := range c.timers {
		if !ft.at.After(c.t) {
			ft.fired = true
			ft.ch <- c.t
		} else {
			kept = append(kept, ft)
		}
	}
	c.timers = kept
}

// Advance moves time forward by d.
func (c *Fake) Advance(d time.Duration) { c.Set(c.Peek().Add(d)) }

// Pending returns the number of timers not yet fired or stopped, and the
// earliest deadline among them.
func (c *Fake) Pending() (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first time.Time
	for _, ft := range c.timers {
		if first.IsZero() || ft.at.Before(first) {
			first = ft.at
		}
	}
	return len(c.timers), first
}

// Deadlines returns the deadlines of the pending timers, earliest first.
func (c *Fake) Deadlines() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]time.Time, 0, len(c.timers))
	for _, ft := range c.timers {
		out = append(out, ft.at)
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}

// Drive runs call and, until it returns, fires each timer of c due within
// horizon as soon as it is pending, moving c to its deadline; it returns
// how long each was armed for, in order. It fails tb if two such timers
// are pending at once: what it drives must arm one at a time, a retry's
// backoff or a wait, while later timers (a refresh loop's) stay pending.
func Drive(tb testing.TB, c *Fake, horizon time.Duration, call func()) []time.Duration {
	tb.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		call()
	}()
	var armed []time.Duration
	for {
		var due []time.Time
		ended := false
		poll.Until(tb, 20*time.Second, "a timer or the end of the call", func() bool {
			select {
			case <-done:
				ended = true
				return true
			default:
			}
			due = due[:0]
			now := c.Peek()
			for _, d := range c.Deadlines() {
				if d.Sub(now) <= horizon {
					due = append(due, d)
				}
			}
			return len(due) > 0
		})
		if ended {
			return armed
		}
		if len(due) != 1 {
			tb.Fatalf("%d timers pending within %v; want one", len(due), horizon)
		}
		armed = append(armed, due[0].Sub(c.Peek()))
		c.Set(due[0])
	}
}
