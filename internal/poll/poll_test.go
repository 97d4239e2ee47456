package poll_test

import (
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/allot/allot/internal/poll"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so that the helpers' failures can be checked.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		okAfter time.Duration // f returns nil from then on; < 0 never
		total   time.Duration
		calls   int
		failed  string
	}{
		{"at once", 0, time.Second, 1, ""},
		{"after some polls", 30 * time.Millisecond, time.Second, 4, ""},
		{"at the bound", time.Second, time.Second, 101, ""},
		{"never", -1, 100 * time.Millisecond, 11, "after 100ms: not yet at 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				calls := 0
				r := &recorder{TB: t}
				poll.For(r, tc.total, 10*time.Millisecond, func() error {
					calls++
					if d := time.Since(start); tc.okAfter < 0 || d < tc.okAfter {
						return fmt.Errorf("not yet at %v", d)
					}
					return nil
				})
				if calls != tc.calls || r.failed != tc.failed {
					t.Fatalf("%d calls, failure %q; want %d, %q", calls, r.failed, tc.calls, tc.failed)
				}
			})
		})
	}
}

func TestUntilAndOk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		after := func(d time.Duration) func() bool { return func() bool { return time.Since(start) >= d } }
		r := &recorder{TB: t}
		poll.Until(r, time.Second, "half a second", after(500*time.Millisecond))
		if r.failed != "" || time.Since(start) != 500*time.Millisecond {
			t.Fatalf("failed %q after %v", r.failed, time.Since(start))
		}
		poll.Until(r, time.Second, "an hour", after(time.Hour))
		if want := "timed out after 1s waiting for an hour"; r.failed != want {
			t.Fatalf("failure %q, want %q", r.failed, want)
		}
		if poll.Ok(time.Second, func() bool { return false }) || !poll.Ok(0, func() bool { return true }) {
			t.Fatal("Ok")
		}
	})
}

// The error For reports is f's last one.
func TestForReportsTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := 0
		r := &recorder{TB: t}
		poll.For(r, 50*time.Millisecond, 10*time.Millisecond, func() error {
			n++
			return errors.New(fmt.Sprint("attempt ", n))
		})
		if want := fmt.Sprintf("after 50ms: attempt %d", n); r.failed != want {
			t.Fatalf("failure %q, want %q", r.failed, want)
		}
	})
}
