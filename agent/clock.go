package agent

import "time"

// Clock is the source of time for an Agent and its limiters. Tests inject a
// fake clock to check accuracy without depending on the machine's speed; the
// default (no WithClock option) reads package time directly, which keeps the
// hot path free of indirect calls.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a
	// function that stops the timer (reporting whether it was still pending).
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// newTimer starts a timer on c, or on package time when c is nil.
func newTimer(c Clock, d time.Duration) (<-chan time.Time, func() bool) {
	if c == nil {
		t := time.NewTimer(d)
		return t.C, t.Stop
	}
	return c.NewTimer(d)
}

// now reads c, or package time when c is nil.
func now(c Clock) time.Time {
	if c == nil {
		return time.Now()
	}
	return c.Now()
}
