package agent

import (
	"math"
	"testing"
	"time"
)

func TestEstimator(t *testing.T) {
	var e estimator
	steps := []struct {
		x    float64
		dt   time.Duration
		want func(float64) bool
		desc string
	}{
		{100, time.Second, func(v float64) bool { return v == 100 }, "first sample is taken as is"},
		{400, time.Second, func(v float64) bool { return v == 400 }, "growth is followed at once"},
		{0, time.Second, func(v float64) bool { return v > 370 && v < 400 }, "a 1s lull decays by ~5%"},
		{math.NaN(), time.Second, func(v float64) bool { return v > 340 && v < 400 }, "NaN counts as 0"},
		{-5, time.Second, func(v float64) bool { return v > 300 && v < 400 }, "negative counts as 0"},
		{math.Inf(1), time.Second, func(v float64) bool { return v == 1e15 }, "infinity is capped"},
		{0, time.Hour, func(v float64) bool { return v == 0 }, "long silence decays to 0"},
	}
	for _, s := range steps {
		e.observe(s.x, s.dt)
		if !s.want(e.value) || math.IsNaN(e.value) || e.value < 0 || math.IsInf(e.value, 0) {
			t.Errorf("%s: value %v", s.desc, e.value)
		}
	}
}

func TestBigChange(t *testing.T) {
	for _, tc := range []struct {
		old, w float64
		want   bool
	}{{0, 0, false}, {0, 1, true}, {10, 0, true}, {10, 12, false}, {10, 13, true}, {1, 1.5, false}, {100, 70, true}} {
		if got := bigChange(tc.old, tc.w); got != tc.want {
			t.Errorf("bigChange(%v, %v) = %v", tc.old, tc.w, got)
		}
	}
}
