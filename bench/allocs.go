package bench

import "runtime"

// allocsPerRun returns the average number of heap allocations of one call
// of f over runs calls, after one warm-up call. It does what
// testing.AllocsPerRun does without linking the testing package into the
// allot binary.
func allocsPerRun(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64((after.Mallocs - before.Mallocs) / uint64(runs))
}
