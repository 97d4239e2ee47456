package agent

import (
	"sync"
	"time"
)

// fakeClock is a manually driven Clock. With step > 0, every Now advances
// time by step first, which makes concurrent callers see distinct times.
type fakeClock struct {
	mu     sync.Mutex
	t      time.Time
	step   time.Duration
	timers []*fakeTimer
}

type fakeTimer struct {
	at    time.Time
	ch    chan time.Time
	fired bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(c.step)
	return c.t
}

// Peek returns the time without advancing it.
func (c *fakeClock) Peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) NewTimer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{at: c.t.Add(d), ch: make(chan time.Time, 1)}
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

func (c *fakeClock) removeLocked(ft *fakeTimer) {
	for i, x := range c.timers {
		if x == ft {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return
		}
	}
}

// Set moves time to t (never backwards) and fires the timers due.
func (c *fakeClock) Set(t time.Time) {
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
func (c *fakeClock) Advance(d time.Duration) { c.Set(c.Peek().Add(d)) }

// Pending returns the number of timers not yet fired or stopped, and the
// earliest deadline among them.
func (c *fakeClock) Pending() (int, time.Time) {
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
