package agent

import (
	"time"

	"github.com/allot/allot/agent/internal/clock"
)

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

// The quota and domain clients run on their agent's clock; it reaches them
// through agent/internal/clock rather than an exported accessor.
func init() {
	clock.Of = func(a any) clock.Clock { return a.(*Agent).o.clock }
}
