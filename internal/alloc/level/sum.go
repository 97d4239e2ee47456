package level

import "math"

// Sum is an exact running sum of float64 values: Value is always the
// float64 nearest the exact sum of the values added so far, whatever was
// added and subtracted before, so a long history of changes leaves
// nothing behind (a plain float64 total that adds a large value and later
// subtracts it keeps that value's rounding forever). It keeps the exact
// sum as a few non-overlapping partials (Shewchuk's algorithm, as
// Python's math.fsum): at most one per 53 bits of exponent range the
// values span, so two or three for the sums here; Add and Value cost one
// step per partial. The zero value is 0. A Sum must not be copied after
// first use, and the values added must be finite and the sum stay below
// the float64 range.
type Sum struct{ p []float64 }

// Add adds x.
func (s *Sum) Add(x float64) {
	i := 0
	for _, y := range s.p {
		if math.Abs(x) < math.Abs(y) {
			x, y = y, x
		}
		hi := x + y
		lo := y - (hi - x) // exact: |x| >= |y|
		if lo != 0 {
			s.p[i] = lo
			i++
		}
		x = hi
	}
	s.p = append(s.p[:i], x)
}

// Value returns the exact sum rounded to the nearest float64 (ties to
// even).
func (s *Sum) Value() float64 {
	n := len(s.p)
	if n == 0 {
		return 0
	}
	// Add the partials from the largest down while that is exact; the
	// first inexact step has rounded, but maybe the wrong way at a tie
	// that the partials below break.
	hi, lo := s.p[n-1], 0.0
	for n--; n > 0; {
		x, y := hi, s.p[n-1]
		n--
		hi = x + y
		lo = y - (hi - x)
		if lo != 0 {
			break
		}
	}
	if n > 0 && (lo < 0 && s.p[n-1] < 0 || lo > 0 && s.p[n-1] > 0) {
		y := lo * 2
		if x := hi + y; x-hi == y {
			hi = x
		}
	}
	return hi
}
