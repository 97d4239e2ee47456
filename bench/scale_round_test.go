package bench

import (
	"fmt"
	"testing"
)

// BenchmarkLedgerRound is the scale report's ledger round (roundChanged
// of n holders ask again) as a Go benchmark, for profiles and counters:
// ns/op over roundChanged is the report's time per changed client.
func BenchmarkLedgerRound(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			r, err := newRoundBench(n)
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				r.step()
			}
			if r.failed != nil {
				b.Fatal(r.failed)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/roundChanged/1e3, "µs/change")
		})
	}
}
