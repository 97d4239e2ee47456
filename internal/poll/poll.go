// Package poll is the one wait-for helper of allot's tests: it polls a
// condition on the real clock until it holds or a bound passes. The bound
// is only a safety net against a hang, never a timed assertion: it is
// generous so that a test passes on a busy machine, and a condition that
// holds returns at once. Tests of timing itself use testing/synctest or an
// injected clock instead.
package poll

import (
	"testing"
	"time"
)

// Interval is how often Until and Ok poll.
const Interval = 10 * time.Millisecond

// For calls f every interval until it returns nil, and fails tb with f's
// last error if it has not within total (nats-server's checkFor).
func For(tb testing.TB, total, interval time.Duration, f func() error) {
	tb.Helper()
	if err := wait(total, interval, f); err != nil {
		tb.Fatalf("after %v: %v", total, err)
	}
}

// Until polls cond every Interval until it holds, and fails tb, saying
// what it waited for, if it has not within total.
func Until(tb testing.TB, total time.Duration, what string, cond func() bool) {
	tb.Helper()
	if !Ok(total, cond) {
		tb.Fatalf("timed out after %v waiting for %s", total, what)
	}
}

// Ok polls cond every Interval until it holds or total passes, and
// reports whether it held: for a caller that fails in its own words or
// goes on either way.
func Ok(total time.Duration, cond func() bool) bool {
	return wait(total, Interval, func() error {
		if cond() {
			return nil
		}
		return falseError{}
	}) == nil
}

// falseError is the error of a condition that does not hold yet.
type falseError struct{}

func (falseError) Error() string { return "condition false" }

// wait calls f every interval until it returns nil or total has passed
// since the first call, and returns f's last error. f is called once more
// at the bound, so that a condition reached during the last sleep counts.
func wait(total, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(total)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(interval, time.Until(deadline)+time.Millisecond))
	}
}
