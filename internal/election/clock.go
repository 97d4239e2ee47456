package election

import "time"

// Clock is the time source of an Elector: when a renewal was sent, when
// leadership lapses, when to renew and when to campaign again. Tests
// give a clock they move by hand, so that the deadline logic runs on
// controlled time while the key-value operations run on a real server.
type Clock interface {
	// Now returns the current time; its monotonic reading, if any, is
	// what the deadlines are counted on.
	Now() time.Time
	// NewTimer returns a timer that fires once, after d on this clock.
	NewTimer(d time.Duration) Timer
}

// Timer is a one-shot timer of a Clock.
type Timer interface {
	// C delivers the time once the timer fires.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it did.
	Stop() bool
}

// SystemClock is the Clock of the time package: the default.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// NewTimer returns a time.Timer.
func (SystemClock) NewTimer(d time.Duration) Timer { return sysTimer{time.NewTimer(d)} }

type sysTimer struct{ t *time.Timer }

func (t sysTimer) C() <-chan time.Time { return t.t.C }
func (t sysTimer) Stop() bool          { return t.t.Stop() }
