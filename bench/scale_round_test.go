//go:build unix

package bench

import (
	"fmt"
	"syscall"
	"testing"
)

// BenchmarkLedgerRound is the scale report's ledger round (roundChanged
// of n holders ask again with new wants) as a Go benchmark, for profiles
// and counters: ns/op over roundChanged is the report's time per changed
// client; cpu-µs/change is the same from the process's CPU time, which a
// machine shared with other loads disturbs far less than the wall clock.
func BenchmarkLedgerRound(b *testing.B) { benchLedgerRound(b, true) }

// BenchmarkLedgerRefresh is BenchmarkLedgerRound with wants that do not
// change: a steady client's refresh, what most requests are.
func BenchmarkLedgerRefresh(b *testing.B) { benchLedgerRound(b, false) }

func benchLedgerRound(b *testing.B, newWants bool) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r, err := newRoundBench(n, newWants)
			if err != nil {
				b.Fatal(err)
			}
			cpu := cpuNanos()
			for b.Loop() {
				r.step()
			}
			cpu = cpuNanos() - cpu
			if r.failed != nil {
				b.Fatal(r.failed)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/roundChanged/1e3, "µs/change")
			b.ReportMetric(float64(cpu)/float64(b.N)/roundChanged/1e3, "cpu-µs/change")
		})
	}
}

// cpuNanos is the CPU time this process has used, user and system (the
// garbage collector's included).
func cpuNanos() int64 {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return u.Utime.Nano() + u.Stime.Nano()
}
