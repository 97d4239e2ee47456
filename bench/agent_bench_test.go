package bench

import (
	"testing"

	"github.com/allot/allot/internal/natstest"
)

// BenchmarkHotPath runs each agent operation next to its baseline as
// sub-benchmarks, for benchstat and `go test -bench`; `allot bench agent`
// runs the same operations alternately and reports ratios.
func BenchmarkHotPath(b *testing.B) {
	nc := natstest.Conn(b, natstest.Server(b))
	a, err := newBenchAgent(nc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	cases, err := hotPathCases(a)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range cases {
		for _, side := range []struct {
			name string
			f    func() func()
		}{{c.name, c.agent}, {c.baseline, c.base}} {
			f := side.f()
			b.Run(side.name, func(b *testing.B) {
				b.ReportAllocs()
				if c.parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							f()
						}
					})
					return
				}
				for b.Loop() {
					f()
				}
			})
		}
	}
}
