package agent

import "time"

// Clock is the source of time for an Agent, its limiters and the quota and
// domain clients made from it. Tests inject a fake clock to check accuracy
// without depending on the machine's speed; the default (no WithClock
// option) reads package time directly, which keeps the hot path free of
// indirect calls.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a channel that receives once d has passed, and a
	// function that stops the timer (reporting whether it was still pending).
	NewTimer(d time.Duration) (<-chan time.Time, func() bool)
}

// Clock returns the clock the agent was given with WithClock, or nil when
// it reads package time. The quota and domain clients made from the agent
// run on it, so that one injected clock drives all three.
func (a *Agent) Clock() Clock {
	return a.o.clock
}
