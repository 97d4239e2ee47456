package alloc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/allot/allot/proto/allotpb"
)

func demands(wants ...float64) []Demand {
	d := make([]Demand, len(wants))
	for i, w := range wants {
		d[i] = Demand{Wants: w, Weight: 1}
	}
	return d
}

func targets(d []Demand) []float64 {
	out := make([]float64, len(d))
	for i := range d {
		out[i] = d[i].Target
	}
	return out
}

func near(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9*max(1, math.Abs(b[i])) {
			return false
		}
	}
	return true
}

func TestAlgorithms(t *testing.T) {
	tests := []struct {
		name     string
		kind     allotpb.Algorithm_Kind
		capacity float64
		d        []Demand
		want     []float64
	}{
		// Doorman's two-round approximation gets this wrong.
		{"fair/doorman-counterexample", allotpb.Algorithm_FAIR_SHARE, 100, demands(1000, 33.5, 31, 1), []float64{34.5, 33.5, 31, 1}},
		{"fair/fits", allotpb.Algorithm_FAIR_SHARE, 100, demands(10, 20, 30), []float64{10, 20, 30}},
		{"fair/equal", allotpb.Algorithm_FAIR_SHARE, 90, demands(100, 100, 100), []float64{30, 30, 30}},
		{"fair/cascade", allotpb.Algorithm_FAIR_SHARE, 100, demands(10, 20, 200, 300), []float64{10, 20, 35, 35}},
		{"fair/zero-capacity", allotpb.Algorithm_FAIR_SHARE, 0, demands(5, 6), []float64{0, 0}},
		{"fair/zero-wants", allotpb.Algorithm_FAIR_SHARE, 10, demands(0, 50), []float64{0, 10}},
		{"fair/empty", allotpb.Algorithm_FAIR_SHARE, 10, nil, []float64{}},
		{"fair/weights", allotpb.Algorithm_FAIR_SHARE, 100, []Demand{{Wants: 100, Weight: 3}, {Wants: 100, Weight: 1}}, []float64{75, 25}},
		{"fair/weights-capped", allotpb.Algorithm_FAIR_SHARE, 100, []Demand{{Wants: 10, Weight: 3}, {Wants: 100, Weight: 1}}, []float64{10, 90}},
		{"fair/priority", allotpb.Algorithm_FAIR_SHARE, 100, []Demand{{Wants: 80, Weight: 1, Priority: 1}, {Wants: 80, Weight: 1}, {Wants: 80, Weight: 1}}, []float64{80, 10, 10}},
		{"fair/priority-starves-low", allotpb.Algorithm_FAIR_SHARE, 100, []Demand{{Wants: 80, Weight: 1}, {Wants: 60, Weight: 1, Priority: 2}, {Wants: 60, Weight: 1, Priority: 2}}, []float64{0, 50, 50}},
		{"prop/equal-share", allotpb.Algorithm_PROPORTIONAL_SHARE, 90, demands(100, 100, 100), []float64{30, 30, 30}},
		{"prop/leftover-by-excess", allotpb.Algorithm_PROPORTIONAL_SHARE, 90, demands(10, 40, 70), []float64{10, 34, 46}},
		{"prop/fits", allotpb.Algorithm_PROPORTIONAL_SHARE, 100, demands(10, 20), []float64{10, 20}},
		{"prop/priority", allotpb.Algorithm_PROPORTIONAL_SHARE, 100, []Demand{{Wants: 30, Weight: 1, Priority: 5}, {Wants: 100, Weight: 1}, {Wants: 100, Weight: 1}}, []float64{30, 35, 35}},
		{"static", allotpb.Algorithm_STATIC, 10, demands(5, 50), []float64{5, 10}},
		{"none", allotpb.Algorithm_NO_ALGORITHM, 10, demands(5, 50), []float64{5, 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Run(tt.kind, tt.capacity, tt.d, &Scratch{})
			if got := targets(tt.d); !near(got, tt.want) {
				t.Fatalf("targets = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestInvariants checks, over random inputs, that share algorithms never
// grant negative or more than wanted, never exceed capacity in total, hand
// out everything when demand exceeds capacity, respect priority bands, and
// (for FAIR_SHARE) are max-min fair: nobody below its wants gets less per
// unit of weight than anyone else in its band.
func TestInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var s Scratch
	for iter := range 3000 {
		n := 1 + rng.IntN(40)
		d := make([]Demand, n)
		for i := range d {
			d[i] = Demand{Wants: rng.Float64() * 100, Weight: float64(1 + rng.IntN(5)), Priority: int32(rng.IntN(3))}
			if rng.IntN(8) == 0 {
				d[i].Wants = 0
			}
		}
		capacity := rng.Float64() * 400
		for _, kind := range []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE} {
			Run(kind, capacity, d, &s)
			var sum, wants float64
			for i, x := range d {
				if x.Target < 0 || x.Target > x.Wants*(1+1e-12) || math.IsNaN(x.Target) {
					t.Fatalf("iter %d %v: claimant %d target %v with wants %v", iter, kind, i, x.Target, x.Wants)
				}
				sum += x.Target
				wants += x.Wants
			}
			if sum > capacity*(1+1e-9)+1e-9 {
				t.Fatalf("iter %d %v: sum %v > capacity %v", iter, kind, sum, capacity)
			}
			if want := math.Min(capacity, wants); math.Abs(sum-want) > 1e-6*max(1, want) {
				t.Fatalf("iter %d %v: handed out %v, want %v (not work-conserving)", iter, kind, sum, want)
			}
			// A claimant short of its wants implies every lower band got nothing.
			for _, x := range d {
				if x.Target < x.Wants-1e-9 {
					for _, y := range d {
						if y.Priority < x.Priority && y.Target > 1e-9 {
							t.Fatalf("iter %d %v: band %d short while band %d got %v", iter, kind, x.Priority, y.Priority, y.Target)
						}
					}
				}
			}
			if kind == allotpb.Algorithm_FAIR_SHARE {
				for _, x := range d {
					if x.Target >= x.Wants-1e-9 {
						continue
					}
					for _, y := range d {
						if y.Priority == x.Priority && y.Target/y.Weight > x.Target/x.Weight+1e-9 {
							t.Fatalf("iter %d: not max-min fair: %+v vs %+v", iter, x, y)
						}
					}
				}
			}
		}
	}
}

func benchDemands(n int) []Demand {
	rng := rand.New(rand.NewPCG(3, 4))
	d := make([]Demand, n)
	for i := range d {
		d[i] = Demand{Wants: rng.Float64() * 20, Weight: 1}
	}
	return d
}

func BenchmarkRound(b *testing.B) {
	for _, kind := range []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE} {
		for _, n := range []int{1_000, 10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("%v/clients=%d", kind, n), func(b *testing.B) {
				d := benchDemands(n)
				var s Scratch
				capacity := float64(n) * 5 // contended: mean wants is 10
				b.ReportAllocs()
				for b.Loop() {
					Run(kind, capacity, d, &s)
				}
			})
		}
	}
}
