package agent

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"testing/synctest"
	"time"
)

// TestGaugeShrinkAndFIFO runs in a synctest bubble: synctest.Wait says
// when a waiter waits.
func TestGaugeShrinkAndFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGauge()
		ctx := context.Background()
		if g.TryAcquire(1) {
			t.Fatal("TryAcquire at capacity 0 = true")
		}
		g.setLimit(4)
		if err := g.Acquire(ctx, 4); err != nil {
			t.Fatal(err)
		}
		g.setLimit(2) // shrink below what is held
		big := make(chan error, 1)
		go func() { big <- g.Acquire(ctx, 2) }()
		synctest.Wait()
		if w := g.waitingUnits(); w != 2 {
			t.Fatalf("%d units waiting, want 2", w)
		}
		if err := g.Release(2); err != nil { // held 2: not below the limit yet
			t.Fatal(err)
		}
		// The waiter woke on the release and must have gone back to waiting:
		// once it is durably blocked, it has not returned.
		synctest.Wait()
		select {
		case err := <-big:
			t.Fatalf("Acquire(2) returned %v with 2 held and limit 2", err)
		default:
		}
		if err := g.Release(2); err != nil {
			t.Fatal(err)
		}
		if err := <-big; err != nil {
			t.Fatal(err)
		}
		if g.InFlight() != 2 {
			t.Fatalf("in flight %d, want 2", g.InFlight())
		}
		// 4 held + 2 waiting.
		if p := g.samplePeak(); p != 6 {
			t.Errorf("peak = %d, want 6", p)
		}
	})
}

// A waiter that fits the limit, queued because too little is free, is
// served before later requests: neither TryAcquire nor Acquire takes the
// units it is waiting for, even when the smaller request would fit.
func TestGaugeNoOvertaking(t *testing.T) {
	g := newGauge()
	g.setLimit(4)
	if !g.TryAcquire(2) {
		t.Fatal("TryAcquire(2) of 4 free = false")
	}
	big := make(chan error, 1)
	go func() { big <- g.Acquire(context.Background(), 3) }() // 2 free: waits
	for g.waitingUnits() != 3 {
		runtime.Gosched()
	}
	// 2 units are free, so each of these would fit if it could overtake.
	if g.TryAcquire(1) {
		t.Fatal("TryAcquire(1) overtook a queued Acquire(3)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := g.Acquire(ctx, 1); err == nil {
		t.Fatal("Acquire(1) overtook a queued Acquire(3)")
	}
	// Refused and waiting requests count as demand: 2 held, 3 and 1 asked.
	if p := g.samplePeak(); p != 6 {
		t.Errorf("peak = %d, want 6", p)
	}
	if err := g.Release(2); err != nil {
		t.Fatal(err)
	}
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	if got := g.InFlight(); got != 3 {
		t.Fatalf("in flight %d, want the waiter's 3", got)
	}
	if !g.TryAcquire(1) {
		t.Fatal("TryAcquire(1) with 1 free and nobody waiting = false")
	}
}

// A request for more than the whole limit does not hold up TryAcquire
// either (as the Gauge doc says), while it keeps its place for later.
func TestGaugeTryAcquireBesideOversizedWaiter(t *testing.T) {
	g := newGauge()
	g.setLimit(5)
	ctx, cancel := context.WithCancel(context.Background())
	big := make(chan error, 1)
	go func() { big <- g.Acquire(ctx, 10) }()
	for g.waitingUnits() != 10 {
		runtime.Gosched()
	}
	if !g.TryAcquire(2) {
		t.Fatal("TryAcquire(2) refused with 5 free beside a parked Acquire(10) that cannot fit")
	}
	cancel()
	if err := <-big; !errors.Is(err, context.Canceled) {
		t.Fatalf("oversized Acquire = %v, want cancelled", err)
	}
}

// Releasing more than is held is an error and changes nothing: clamping
// would hand other holders' units out a second time.
func TestGaugeOverRelease(t *testing.T) {
	g := newGauge()
	g.setLimit(4)
	if err := g.Acquire(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(5); !errors.Is(err, ErrReleaseExceedsHeld) {
		t.Fatalf("Release(5) with 3 held = %v, want ErrReleaseExceedsHeld", err)
	}
	if err := g.Release(-1); err == nil {
		t.Fatal("Release(-1) = nil error")
	}
	if got := g.InFlight(); got != 3 {
		t.Fatalf("in flight %d after refused releases, want 3", got)
	}
	if g.TryAcquire(2) {
		t.Fatal("TryAcquire(2) with 1 free = true: a refused release freed units")
	}
	if err := g.Release(3); err != nil {
		t.Fatal(err)
	}
	if err := g.Release(0); err != nil {
		t.Fatalf("Release(0) = %v", err)
	}
}

// TestGaugeCancelAndClose runs in a synctest bubble: synctest.Wait says
// when a waiter waits.
func TestGaugeCancelAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newGauge()
		g.setLimit(1)
		if err := g.Acquire(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		if err := g.Acquire(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v, want deadline exceeded", err)
		}
		done := make(chan error, 1)
		go func() { done <- g.Acquire(context.Background(), 1) }()
		synctest.Wait() // the Acquire waits
		g.shut()
		if err := <-done; !errors.Is(err, ErrClosed) {
			t.Fatalf("Acquire after close = %v, want ErrClosed", err)
		}
		if err := g.Do(context.Background(), 1, func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
			t.Fatalf("Do after close = %v", err)
		}
		if err := g.Release(1); err != nil { // the unit acquired before close
			t.Fatalf("Release after close = %v", err)
		}
	})
}

func TestCapacityToLimit(t *testing.T) {
	for _, tc := range []struct {
		c    float64
		want int
	}{{0, 0}, {0.9, 0}, {1, 1}, {2.999999999999, 3}, {33.3, 33}, {-1, 0}} {
		if got := capacityToLimit(tc.c); got != tc.want {
			t.Errorf("capacityToLimit(%v) = %d, want %d", tc.c, got, tc.want)
		}
	}
}

// A request for more than the whole limit does not hold up requests that
// fit; it is served once the limit grows.
func TestGaugeOversizedRequestDoesNotBlock(t *testing.T) {
	g := newGauge()
	g.setLimit(5)
	big := make(chan error, 1)
	go func() { big <- g.Acquire(context.Background(), 10) }()
	for g.waitingUnits() != 10 {
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := g.Acquire(ctx, 2); err != nil {
		t.Fatalf("a request that fits waited behind an oversized one: %v", err)
	}
	if err := g.Release(2); err != nil {
		t.Fatal(err)
	}
	g.setLimit(10)
	select {
	case err := <-big:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("oversized request not served after the limit grew")
	}
	if got := g.InFlight(); got != 10 {
		t.Fatalf("in flight %d, want 10", got)
	}
}

func (g *Gauge) waitingUnits() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.waiting
}

// TestGaugeNegativeAcquire: a negative count is bad input, refused as
// Release refuses it: Acquire returns an error and TryAcquire false,
// both changing nothing. Before, both reported success, and the caller's
// Release of the same count then failed.
func TestGaugeNegativeAcquire(t *testing.T) {
	g := newGauge()
	g.setLimit(4)
	if err := g.Acquire(context.Background(), -1); err == nil {
		t.Error("Acquire(-1) = nil error")
	}
	if g.TryAcquire(-1) {
		t.Error("TryAcquire(-1) = true")
	}
	if err := g.Do(context.Background(), -1, func(context.Context) error { t.Error("Do(-1) ran f"); return nil }); err == nil {
		t.Error("Do(-1) = nil error")
	}
	if got := g.InFlight(); got != 0 {
		t.Errorf("in flight %d after refused negative acquires, want 0", got)
	}
	if err := g.Acquire(context.Background(), 0); err != nil || !g.TryAcquire(0) {
		t.Errorf("Acquire(0) = %v, TryAcquire(0) false: zero takes nothing and succeeds", err)
	}
}
