// Package clock is the time of an agent and of the quota and domain
// clients made from it: the clock injected with agent.WithClock, or
// package time when none was. A nil Clock stands for package time and is
// read directly, which keeps the hot path free of indirect calls.
package clock

import "time"

// Clock is the interface of agent.Clock. The agent keeps the clock it was
// given as a Clock, so that reading it costs no interface conversion.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a
	// function that stops the timer (reporting whether it was still
	// pending).
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// Now reads c, or package time when c is nil.
func Now(c Clock) time.Time {
	if c == nil {
		return time.Now()
	}
	return c.Now()
}

// Since is the time elapsed on c since t.
func Since(c Clock, t time.Time) time.Duration { return Now(c).Sub(t) }

// NewTimer starts a timer on c, or on package time when c is nil.
func NewTimer(c Clock, d time.Duration) (<-chan time.Time, func() bool) {
	if c == nil {
		t := time.NewTimer(d)
		return t.C, t.Stop
	}
	return c.NewTimer(d)
}
