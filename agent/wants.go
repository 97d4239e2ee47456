package agent

import (
	"math"
	"time"

	"github.com/allot/allot/internal/wire"
)

// Parameters of the demand estimator.
const (
	// wantsDecay is the time constant with which the estimate follows
	// falling demand: after a drop it covers 63% of the gap in this time.
	wantsDecay = 20 * time.Second
	// minSampleWindow is the shortest window a demand rate is measured
	// over; shorter windows are too noisy and keep accumulating.
	minSampleWindow = 100 * time.Millisecond
)

// estimator smooths observed demand: rising demand is followed at once,
// falling demand decays exponentially, so a short lull does not give away
// capacity that is needed again a moment later. Its value is always finite,
// non-negative and at most wire.MaxWants.
type estimator struct {
	value float64
	seen  bool // at least one sample was taken
}

// observe adds a sample x measured over a window of length dt.
func (e *estimator) observe(x float64, dt time.Duration) {
	if math.IsNaN(x) || x < 0 {
		x = 0
	}
	x = min(x, wire.MaxWants)
	switch {
	case !e.seen || x >= e.value:
		e.value = x
	case dt > 0:
		alpha := 1 - math.Exp(-dt.Seconds()/wantsDecay.Seconds())
		e.value += (x - e.value) * alpha
	}
	e.seen = true
	if !(e.value >= 0) || math.IsInf(e.value, 0) { // belt and braces
		e.value = 0
	}
	if e.value < 1e-9 {
		e.value = 0
	}
}
