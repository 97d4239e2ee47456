package rlqs

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

func TestResource(t *testing.T) {
	id, ok := Resource("edge", map[string]string{"name": "api", "env": "prod"})
	if !ok || id != "rlqs/edge/env=prod/name=api" {
		t.Fatalf("Resource = %q, %v", id, ok)
	}
	for _, b := range []map[string]string{nil, {"a": "b c"}, {"k": string(make([]byte, 300))}} {
		if _, ok := Resource("edge", b); ok {
			t.Errorf("Resource(%v) is valid", b)
		}
	}
}

// Property: the strategy of a rate is valid as Envoy checks it and
// enforces at most that rate, and nearly all of it.
func TestStrategy(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	rates := []float64{0, -1, math.NaN(), 1e-9, 0.3, 1, 1.5, 7, 99.99, 1e6, math.MaxUint32 - 1,
		// A share of almost nothing, left over by floating-point sums: one
		// fill in longer than a time.Duration holds.
		1e-10, 1e-12, 1e-300, math.SmallestNonzeroFloat64}
	for range 1000 {
		rates = append(rates, math.Exp(rng.Float64()*30-10))
	}
	for _, r := range rates {
		s := Strategy(r)
		if err := s.ValidateAll(); err != nil {
			t.Fatalf("Strategy(%g) = %v: %v", r, s, err)
		}
		got := Rate(s)
		switch {
		case !(r > 0) || r < MinRate:
			if got != 0 || s.GetBlanketRule() != typev3.RateLimitStrategy_DENY_ALL {
				t.Errorf("Strategy(%g) = %v", r, s)
			}
		case got > r || got < r*(1-1e-6):
			t.Errorf("Strategy(%g) enforces %g", r, got)
		}
	}
	if !math.IsInf(Rate(Strategy(math.Inf(1))), 1) {
		t.Error("an unbounded rate is not ALLOW_ALL")
	}
}

func TestWants(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket("r", t0, Options{Decay: time.Second, AbandonAfter: 10 * time.Second, Window: time.Second})
	b.Report(t0, 50, 0, time.Second)
	if b.Wants() != 50 {
		t.Fatalf("wants %g after 50/s", b.Wants())
	}
	// Falling demand decays, rising demand is followed at once.
	b.Report(t0.Add(time.Second), 0, 0, time.Second)
	if w := b.Wants(); w <= 0 || w >= 50*0.5 {
		t.Errorf("wants %g a decay constant after demand stopped", w)
	}
	// Reports shorter than the window are added up.
	b.Report(t0.Add(1500*time.Millisecond), 40, 0, 500*time.Millisecond)
	if w := b.Wants(); w >= 50 {
		t.Errorf("wants %g after half a window", w)
	}
	b.Report(t0.Add(2*time.Second), 40, 0, 500*time.Millisecond)
	if b.Wants() != 80 {
		t.Errorf("wants %g after 80/s", b.Wants())
	}
	// Refused requests ask for more than is held.
	b.Grant(Lease{Capacity: 100, Expiry: t0.Add(time.Minute)})
	b.Report(t0.Add(3*time.Second), 10, 1, time.Second)
	if b.Wants() != 125 {
		t.Errorf("wants %g while held back at 100", b.Wants())
	}
	if b.Idle(t0.Add(12*time.Second)) || !b.Idle(t0.Add(13*time.Second)) {
		t.Error("idle after 10s without requests, not before")
	}
}

// A shrunk assignment counts at its old size until Envoy has reported
// twice since it went out; a grown one at once.
func TestHasUntilApplied(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket("r", t0, Options{})
	if c, _ := b.Has(t0); c != 0 {
		t.Fatalf("has %g before any lease", c)
	}
	b.Grant(Lease{Capacity: 10, Expiry: t0.Add(time.Minute)})
	r, until, ok := b.Assignment(t0)
	if !ok || r != 10 || !until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("assignment %g until %v, %v", r, until, ok)
	}
	b.Sent(t0, r, until)
	b.Grant(Lease{Capacity: 4, Expiry: t0.Add(time.Minute + time.Second)})
	b.Sent(t0, 4, t0.Add(time.Minute+time.Second))
	for i, want := range []float64{10, 10, 4} {
		if c, _ := b.Has(t0); c != want {
			t.Errorf("after %d reports has %g, want %g", i, c, want)
		}
		b.Report(t0, 1, 0, time.Second)
	}
	// A grown lease counts at once.
	b.Grant(Lease{Capacity: 12, Expiry: t0.Add(2 * time.Minute)})
	if c, e := b.Has(t0); c != 12 || !e.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("has %g until %v after a grow", c, e)
	}
	// Past the old assignment's end, it no longer counts.
	b.Sent(t0, 12, t0.Add(2*time.Minute))
	b.Grant(Lease{Capacity: 1, Expiry: t0.Add(3 * time.Minute)})
	b.Sent(t0, 1, t0.Add(3*time.Minute))
	if c, _ := b.Has(t0.Add(2*time.Minute + time.Second)); c != 1 {
		t.Errorf("has %g once the old assignment ended", c)
	}
}

// Once the lease ends unrefreshed Envoy gets the floor while it lasts,
// then nothing.
func TestAssignmentFloor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := NewBucket("r", t0, Options{})
	b.Grant(Lease{Capacity: 10, Expiry: t0.Add(time.Second), Safe: 3, SafeUntil: t0.Add(time.Minute)})
	if r, until, ok := b.Assignment(t0.Add(2 * time.Second)); !ok || r != 3 || !until.Equal(t0.Add(time.Minute)) {
		t.Errorf("after the lease: %g until %v, %v", r, until, ok)
	}
	if _, _, ok := b.Assignment(t0.Add(time.Minute)); ok {
		t.Error("an assignment after the floor ended")
	}
}
