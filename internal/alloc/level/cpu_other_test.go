//go:build !unix

package level

// cpuNanos is 0 where getrusage is missing: no CPU metric then.
func cpuNanos() int64 { return 0 }
