package level

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestSumExact: after any history of additions and subtractions, Value is
// the exact sum of what is left, rounded to nearest even, as math/big
// computes it.
func TestSumExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for iter := range 200 {
		var s Sum
		exact := new(big.Float).SetPrec(4096)
		var live []float64
		for step := range 300 {
			var x float64
			if len(live) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(live))
				x = -live[k]
				live[k] = live[len(live)-1]
				live = live[:len(live)-1]
			} else {
				x = math.Pow(2, rng.Float64()*120-60) * (1 + rng.Float64())
				if rng.IntN(4) == 0 {
					x = -x
				}
				live = append(live, x)
			}
			s.Add(x)
			exact.Add(exact, new(big.Float).SetFloat64(x))
			want, _ := exact.Float64()
			if got := s.Value(); got != want {
				t.Fatalf("iter %d step %d: Value %v, exact sum %v", iter, step, got, want)
			}
		}
	}
}

// TestSumForgets: adding a large value and taking it away again leaves
// the small ones exactly.
func TestSumForgets(t *testing.T) {
	var s Sum
	var plain float64
	for _, x := range []float64{0.1, 1e15, 0.2, -1e15, 0.3} {
		s.Add(x)
		plain += x
	}
	if want := 0.1 + 0.2 + 0.3; s.Value() != want {
		t.Fatalf("Value %v, want %v", s.Value(), want)
	}
	if plain == 0.1+0.2+0.3 {
		t.Fatalf("a plain float64 total kept the small values too (%v): the case shows nothing", plain)
	}
}

// TestSumTies: the rounding of Value is to nearest even even when the tie
// is broken by a partial far below.
func TestSumTies(t *testing.T) {
	var s Sum
	for _, x := range []float64{1, 0x1p-53, 0x1p-200} {
		s.Add(x)
	}
	if want := 1 + 0x1p-52; s.Value() != want {
		t.Fatalf("Value %v, want %v (above the tie)", s.Value(), want)
	}
}
