package bench

import "testing"

// sink keeps the test's allocations on the heap.
var sink []byte

func TestAllocsPerRunMatchesTesting(t *testing.T) {
	for _, n := range []int{0, 1, 3} {
		f := func() {
			for range n {
				sink = make([]byte, 64)
			}
		}
		if got, want := allocsPerRun(100, f), testing.AllocsPerRun(100, f); got != want {
			t.Errorf("%d allocations per call: allocsPerRun %v, testing.AllocsPerRun %v", n, got, want)
		}
	}
}
