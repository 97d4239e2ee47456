// Package electiontest helps test code that runs on an election.Clock.
package electiontest

import (
	"sync"
	"time"

	"github.com/allot/allot/internal/election"
)

// ManualClock is an election.Clock that moves only when Advance is
// called; its timers fire as it passes their time.
type ManualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

var _ election.Clock = (*ManualClock)(nil)

type manualTimer struct {
	c    chan time.Time
	at   time.Time
	done bool // fired or stopped
	clk  *ManualClock
}

// NewManualClock returns a clock standing at start.
func NewManualClock(start time.Time) *ManualClock { return &ManualClock{now: start} }

// Now returns the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires once the clock has moved by d.
func (c *ManualClock) NewTimer(d time.Duration) election.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: make(chan time.Time, 1), at: c.now.Add(d), clk: c}
	c.timers = append(c.timers, t)
	c.fireLocked()
	return t
}

// Advance moves the clock by d and fires the timers due.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.fireLocked()
}

// Due returns when the timers not yet fired or stopped fire, so that a
// test can wait until the code under test has armed its timer before it
// moves the clock past it.
func (c *ManualClock) Due() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	var due []time.Time
	for _, t := range c.timers {
		if !t.done {
			due = append(due, t.at)
		}
	}
	return due
}

func (c *ManualClock) fireLocked() {
	kept := c.timers[:0]
	for _, t := range c.timers {
		if !t.done && !t.at.After(c.now) {
			t.done = true
			t.c <- c.now
		}
		if !t.done {
			kept = append(kept, t)
		}
	}
	c.timers = kept
}

func (t *manualTimer) C() <-chan time.Time { return t.c }

func (t *manualTimer) Stop() bool {
	t.clk.mu.Lock()
	defer t.clk.mu.Unlock()
	was := !t.done
	t.done = true
	return was
}
