package ledger

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// BenchmarkLeaseMemory reports the coordinator's heap bytes per client
// lease held in a resource's state, and the cost of a FAIR_SHARE round in
// which one client of all those holding leases refreshes, at several
// sizes.
func BenchmarkLeaseMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			tm := &config.Template{Name: "t", Glob: "r", Capacity: float64(n) * 5, Algorithm: allotpb.Algorithm_FAIR_SHARE,
				LeaseLength: time.Minute, RefreshInterval: 5 * time.Second}
			ids := make([]string, n)
			for i := range ids {
				// Realistic agent ids: host:pid:random.
				ids[i] = fmt.Sprintf("host-%04d.example:%d:%08x", i%5000, 10000+i, uint32(i)*2654435761)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r := newResource("r", tm, 1)
			key := testHolderKey()
			r.hold.key = &key // digests kept, as a leader's
			p := roundParams{now: 1, horizon: math.MaxInt64, minFresh: 50 * time.Millisecond, stats: &Stats{}}
			for i, id := range ids {
				r.upsert(id, float64(i%20), 1, 0, holding{}, 1)
			}
			r.allocate(&p)
			runtime.GC()
			runtime.ReadMemStats(&after)
			idBytes := 0
			for _, id := range ids {
				idBytes += len(id)
			}
			perLease := float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				// One client refreshes, then the round runs over everyone.
				r.upsert(ids[i%n], float64(i%20), 1, 0, holding{}, 1)
				r.allocate(&p)
			}
			b.ReportMetric(perLease, "B/lease")
			b.ReportMetric(float64(idBytes)/float64(n), "idB/lease")
			runtime.KeepAlive(r)
		})
	}
}
