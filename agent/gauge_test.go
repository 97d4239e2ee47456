package agent

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"
)

func TestGaugeShrinkAndFIFO(t *testing.T) {
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
	time.Sleep(20 * time.Millisecond)
	if g.TryAcquire(1) {
		t.Fatal("TryAcquire overtook a queued waiter")
	}
	g.Release(2) // held 2: not below the limit yet
	select {
	case err := <-big:
		t.Fatalf("Acquire(2) returned %v with 2 held and limit 2", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.Release(2)
	if err := <-big; err != nil {
		t.Fatal(err)
	}
	if g.InFlight() != 2 {
		t.Fatalf("in flight %d, want 2", g.InFlight())
	}
	g.Release(10) // over-release clamps at zero
	if g.InFlight() != 0 {
		t.Fatalf("in flight %d after over-release, want 0", g.InFlight())
	}
	// 4 held + 2 waiting + 1 refused TryAcquire.
	if p := g.samplePeak(); p != 7 {
		t.Errorf("peak = %d, want 7", p)
	}
}

func TestGaugeCancelAndClose(t *testing.T) {
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
	time.Sleep(20 * time.Millisecond)
	g.close()
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after close = %v, want ErrClosed", err)
	}
	if err := g.Do(context.Background(), 1, func(context.Context) error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after close = %v", err)
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := g.Acquire(ctx, 2); err != nil {
		t.Fatalf("a request that fits waited behind an oversized one: %v", err)
	}
	g.Release(2)
	g.setLimit(10)
	select {
	case err := <-big:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
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
