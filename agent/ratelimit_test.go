package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/allot/allot/agent/internal/clocktest"
	"github.com/allot/allot/internal/poll"
	"golang.org/x/time/rate"
)

// waitParked fails if the waiter that sends to done has returned once
// every goroutine but this one is durably blocked: it parked. It needs
// no sleep, and no goroutine of the limiter may be left running.
func waitParked(t *testing.T, done <-chan error, what string) {
	t.Helper()
	synctest.Wait()
	select {
	case err := <-done:
		t.Fatalf("%s: Wait returned %v at capacity 0", what, err)
	default:
	}
}

// waitPending blocks until the clock has n pending timers.
func waitPending(tb testing.TB, c *clocktest.Fake, n int) time.Time {
	tb.Helper()
	var first time.Time
	poll.For(tb, 10*time.Second, 10*time.Microsecond, func() error {
		var k int
		if k, first = c.Pending(); k != n {
			runtime.Gosched()
			return fmt.Errorf("waiting for %d pending timers, have %d", n, k)
		}
		return nil
	})
	return first
}

// TestAllowAccuracyUnderContention checks that Allow admits R per second
// within 2% over 10 s of simulated time with 1 and 64 concurrent callers.
// Every Now advances the fake clock, so each caller sees its own instant:
// a limiter that read the clock outside its lock would see those instants
// out of order, credit time twice and over-admit here.
func TestAllowAccuracyUnderContention(t *testing.T) {
	for _, tc := range []struct {
		name    string
		callers int
		rate    float64
		burst   int
	}{
		{"1 caller", 1, 1000, 10},
		{"64 callers", 64, 1000, 10},
		{"64 callers burst 1", 64, 250, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := clocktest.New()
			l := newRateLimiter(c, tc.burst)
			l.setLimit(rate.Limit(tc.rate))
			c.SetStep(20 * time.Microsecond)
			start := c.Peek()
			end := start.Add(10 * time.Second)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range tc.callers {
				wg.Go(func() {
					for c.Peek().Before(end) {
						if l.Allow() {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			want := tc.rate * 10
			got := float64(admitted.Load())
			if got > want+float64(tc.burst)+1 || got < want*0.98 {
				t.Errorf("admitted %v in 10s at %v/s; want %v (±2%%, at most +burst %d)", got, tc.rate, want, tc.burst)
			}
			t.Logf("admitted %v, want %v", got, want)
		})
	}
}

// TestWaitAccuracy drives waiters with a fake clock: each step moves time
// to the earliest timer once every caller is parked, so the result does not
// depend on the machine's speed.
func TestWaitAccuracy(t *testing.T) {
	for _, callers := range []int{1, 64} {
		t.Run(map[int]string{1: "1 caller", 64: "64 callers"}[callers], func(t *testing.T) {
			const r = 200.0
			c := clocktest.New()
			l := newRateLimiter(c, 5)
			l.setLimit(r)
			start := c.Peek()
			end := start.Add(10 * time.Second)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for range callers {
				wg.Go(func() {
					for {
						if err := l.Wait(ctx); err != nil {
							return
						}
						if !c.Peek().After(end) {
							admitted.Add(1)
						}
					}
				})
			}
			for {
				next := waitPending(t, c, callers)
				if next.After(end) {
					break
				}
				c.Set(next)
			}
			cancel()
			c.Set(end.Add(time.Hour)) // release the parked callers
			wg.Wait()
			want := r * 10
			got := float64(admitted.Load())
			if math.Abs(got-want) > want*0.02 {
				t.Errorf("admitted %v in 10s at %v/s; want %v ±2%%", got, r, want)
			}
			t.Logf("admitted %v, want %v", got, want)
		})
	}
}

// A Wait at capacity 0 parks until the capacity changes, its context
// ends or the limiter closes. It runs in a synctest bubble: synctest.Wait
// returns once the waiter is durably blocked, that is parked, so that
// "it has not returned" is a fact and not a guess after a sleep.
func TestZeroCapacityBlocksAndWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newRateLimiter(nil, 0)
		if l.Allow() {
			t.Fatal("Allow at capacity 0 = true")
		}
		if r := l.Reserve(); r.OK() {
			t.Fatal("Reserve at capacity 0 is OK")
		}
		done := make(chan error, 1)
		go func() { done <- l.Wait(context.Background()) }()
		waitParked(t, done, "before capacity")
		l.setLimit(1000)
		if err := <-done; err != nil {
			t.Fatalf("Wait = %v", err)
		}

		// A parked waiter returns when its context ends.
		l.setLimit(0)
		ctx, cancel := context.WithCancel(context.Background())
		go func() { done <- l.Wait(ctx) }()
		waitParked(t, done, "before cancel")
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", err)
		}

		// Closing wakes parked waiters with ErrClosed.
		go func() { done <- l.Wait(context.Background()) }()
		waitParked(t, done, "before close")
		l.shut()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("Wait = %v, want ErrClosed", err)
		}
	})
}

// TestWaitReschedulesOnChange: a waiter that reserved at 1/s is moved to the
// new schedule when capacity rises to 10/s, and parks while it is 0.
// It runs in a synctest bubble, for waitParked.
func TestWaitReschedulesOnChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := clocktest.New()
		l := newRateLimiter(c, 1)
		l.setLimit(1)
		if !l.Allow() { // the first capacity comes with a full bucket
			t.Fatal("the full bucket's token refused")
		}
		t0 := c.Peek()
		done := make(chan error, 1)
		go func() { done <- l.Wait(context.Background()) }()
		if at := waitPending(t, c, 1); at.Sub(t0) != time.Second {
			t.Fatalf("first wait ends after %v, want 1s", at.Sub(t0))
		}
		c.Advance(500 * time.Millisecond) // half a token earned
		l.setLimit(0)
		waitPending(t, c, 0) // parked without a timer
		c.Advance(time.Hour) // nothing is earned at capacity 0
		waitParked(t, done, "at capacity 0")
		t1 := c.Peek()
		l.setLimit(10) // the remaining half token takes 50ms
		if at := waitPending(t, c, 1); at.Sub(t1) != 50*time.Millisecond {
			t.Fatalf("rescheduled wait ends after %v, want 50ms", at.Sub(t1))
		}
		c.Advance(50 * time.Millisecond)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestWaitNErrors(t *testing.T) {
	l := newRateLimiter(nil, 2) // deadlines are real time

	l.setLimit(1)
	l.AllowN(2) // the full bucket of the first capacity
	if err := l.WaitN(context.Background(), 3); !errors.Is(err, ErrExceedsBurst) {
		t.Errorf("WaitN(3) with burst 2 = %v, want ErrExceedsBurst", err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(100*time.Millisecond))
	defer cancel()
	if err := l.WaitN(ctx, 1); !errors.Is(err, ErrWouldExceedDeadline) {
		t.Errorf("WaitN needing 1s with 100ms deadline = %v, want ErrWouldExceedDeadline", err)
	}
	if err := l.WaitN(context.Background(), 0); err != nil {
		t.Errorf("WaitN(0) = %v", err)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	ccancel()
	if err := l.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait with cancelled ctx = %v", err)
	}
}

func TestReservation(t *testing.T) {
	c := clocktest.New()
	l := newRateLimiter(c, 4)
	l.setLimit(2)
	c.Advance(2 * time.Second) // bucket full: 4 tokens
	r := l.ReserveN(4)
	if !r.OK() || r.Delay() != 0 {
		t.Fatalf("ReserveN(4) from a full bucket: ok=%v delay=%v", r.OK(), r.Delay())
	}
	r = l.ReserveN(2)
	if !r.OK() || r.Delay() != time.Second {
		t.Fatalf("ReserveN(2) from an empty bucket: ok=%v delay=%v, want 1s", r.OK(), r.Delay())
	}
	r.Cancel()
	if tok := l.Tokens(); math.Abs(tok) > 1e-9 {
		t.Fatalf("tokens after cancel = %v, want 0", tok)
	}
	if r := l.ReserveN(5); r.OK() || r.Delay() != rate.InfDuration {
		t.Fatalf("ReserveN beyond burst: ok=%v delay=%v", r.OK(), r.Delay())
	}
}

func TestUnlimitedAndBurst(t *testing.T) {
	l := newRateLimiter(nil, 0)
	l.setLimit(rate.Inf)
	for range 1000 {
		if !l.Allow() {
			t.Fatal("Allow at rate.Inf = false")
		}
	}
	if err := l.WaitN(context.Background(), 1<<20); err != nil {
		t.Fatalf("WaitN at rate.Inf = %v", err)
	}
	for _, tc := range []struct {
		limit rate.Limit
		burst int
	}{{0, 1}, {0.5, 1}, {10, 10}, {10.5, 11}, {1000, 1000}, {1e15, maxBurst}} {
		l.setLimit(tc.limit)
		if b := l.Burst(); b != tc.burst {
			t.Errorf("auto burst at %v = %d, want %d", tc.limit, b, tc.burst)
		}
	}
	l.setLimit(rate.Limit(math.NaN()))
	if got := l.Limit(); got != 0 {
		t.Errorf("limit after NaN = %v, want 0", got)
	}
}

// TestCancelledWaitGivesBack: a waiter whose context ends before its turn
// returns its tokens.
func TestCancelledWaitGivesBack(t *testing.T) {
	c := clocktest.New()
	l := newRateLimiter(c, 1)
	l.setLimit(1)
	l.Allow() // the full bucket of the first capacity
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Wait(ctx) }()
	waitPending(t, c, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v", err)
	}
	if tok := l.Tokens(); math.Abs(tok) > 1e-9 {
		t.Fatalf("tokens = %v after cancelled wait, want 0", tok)
	}
}

// TestLongUptimePrecision runs a limiter at 100k/s for 30 simulated days.
// Each day it reserves one token from an empty bucket and lets its 10µs
// pass in 1ns steps (1e-4 token each, as under heavy contention); the
// reservation must then be due, so cancelling it gives nothing back. An
// uptime-long earned-token counter loses those small steps to rounding
// once it reaches about 1e10 tokens, and the cancel would re-credit a
// token that was already earned and spent.
func TestLongUptimePrecision(t *testing.T) {
	c := clocktest.New()
	l := newRateLimiter(c, 10)
	l.setLimit(100_000)
	for day := 1; day <= 30; day++ {
		for range 24 * 60 {
			c.Advance(time.Minute)
			l.Tokens()
		}
		if !l.AllowN(10) {
			t.Fatalf("day %d: a full bucket refused its burst", day)
		}
		r := l.ReserveN(1)
		for range 10_000 {
			c.Advance(time.Nanosecond)
			l.Tokens()
		}
		if d := r.Delay(); d != 0 {
			t.Fatalf("day %d: reservation delay %v after its 10µs passed", day, d)
		}
		r.Cancel()
		if tok := l.Tokens(); tok > 0.01 {
			t.Fatalf("day %d: %v tokens after cancelling a due reservation, want about 0", day, tok)
		}
	}
}

// TestReservationsAcrossRebases: reservations made long before they are
// due keep their turn while the earned-token counter is rebased several
// times in between.
func TestReservationsAcrossRebases(t *testing.T) {
	const r = 1e6
	c := clocktest.New()
	l := newRateLimiter(c, r)
	l.setLimit(r)
	l.AllowN(r) // the full bucket of the first capacity
	first := l.epoch
	res := make([]*Reservation, 300) // res[i] is due after i+1 seconds
	for i := range res {
		if res[i] = l.ReserveN(r); !res[i].OK() {
			t.Fatalf("reservation %d refused", i)
		}
	}
	for range 299 {
		c.Advance(time.Second)
		l.Tokens()
	}
	c.Advance(time.Second / 2) // 299.5s: res[298] is due, res[299] not
	if n := l.rebasesSince(first); n < 4 {
		t.Fatalf("%d rebases in 299.5s at %v/s, want at least 4", n, r)
	}
	res[298].Cancel()
	if tok := l.Tokens(); math.Abs(tok+r/2) > 1e-3 {
		t.Fatalf("tokens %v after cancelling a due reservation, want %v", tok, -r/2)
	}
	res[299].Cancel()
	if tok := l.Tokens(); math.Abs(tok-r/2) > 1e-3 {
		t.Fatalf("tokens %v after cancelling a pending reservation, want %v", tok, r/2)
	}
}

// rebasesSince counts the rebases since epoch e.
func (l *RateLimiter) rebasesSince(e *epoch) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for ; e != l.epoch; e = e.next {
		n++
	}
	return n
}

// TestFirstCapacityComesWithItsBurst: a limiter's first capacity (or its
// capacity after none) comes with a full bucket of a second's worth, so a
// tight loop at 10/s gets its ten at once (it got none: the bucket started
// empty and held a tenth of a second); a larger capacity adds the room of
// its larger burst.
func TestFirstCapacityComesWithItsBurst(t *testing.T) {
	c := clocktest.New()
	l := newRateLimiter(c, 0)
	l.setLimit(10)
	admitted := 0
	for range 1000 {
		if l.Allow() {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("a tight loop at 10/s admitted %d of 1000 at once, want the burst of 10", admitted)
	}
	l.setLimit(100)
	if tok := l.Tokens(); tok != 90 {
		t.Fatalf("tokens after the capacity rose to 100/s: %v, want the 90 of the larger burst", tok)
	}
	l.setLimit(0)
	l.setLimit(5)
	if tok := l.Tokens(); tok != 5 {
		t.Fatalf("tokens after capacity returned: %v, want a full bucket of 5", tok)
	}
}

// A zero or nil Reservation is one not granted, as x/time/rate's zero
// value is: OK is false, the delay infinite, Cancel does nothing; none of
// them panics.
func TestZeroReservation(t *testing.T) {
	for name, r := range map[string]*Reservation{"zero": {}, "nil": nil} {
		if r.OK() || r.Delay() != rate.InfDuration || r.DelayFrom(time.Now()) != rate.InfDuration {
			t.Errorf("%s reservation: OK %v, Delay %v", name, r.OK(), r.Delay())
		}
		r.Cancel()
	}
}
