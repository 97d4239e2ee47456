package quota

import (
	"runtime"
	"strconv"
	"testing"
	"time"
)

// BenchmarkTake is one decision on an existing bucket: lookup, algorithm,
// events (target < 200 ns, 0 allocs).
func BenchmarkTake(b *testing.B) {
	for _, a := range algorithms {
		b.Run(a.String(), func(b *testing.B) {
			tab := roomy(a)
			now := t0
			req := Request{Tokens: 1, MaxWait: -1}
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				tab.Take("p", "b", req, now.UnixNano())
			}
		})
	}
}

// BenchmarkTakeParallel is BenchmarkTake from every core on one table.
func BenchmarkTakeParallel(b *testing.B) {
	tab := NewTable(&Config{Namespaces: map[string]*Namespace{"p": {Dynamic: tb(1_000_000, 1e6)}}}, Options{})
	now := t0
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			tab.Take("p", names[i%len(names)], Request{Tokens: 1, MaxWait: -1}, now.UnixNano())
		}
	})
}

var names = func() []string {
	n := make([]string, 1<<16)
	for i := range n {
		n[i] = "user_" + strconv.Itoa(i)
	}
	return n
}()

// BenchmarkTakeDynamic creates a dynamic bucket per decision.
func BenchmarkTakeDynamic(b *testing.B) {
	cfg := &Config{Namespaces: map[string]*Namespace{"p": {Dynamic: tb(100, 50), MaxDynamicBuckets: len(names)}}}
	tab := NewTable(cfg, Options{})
	req := Request{Tokens: 1, MaxWait: -1}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		if i == len(names) {
			b.StopTimer()
			tab, i = NewTable(cfg, Options{}), 0
			b.StartTimer()
		}
		tab.Take("p", names[i], req, t0.UnixNano())
		i++
	}
}

// BenchmarkMemoryPerBucket reports the heap per dynamic bucket (map entry,
// bucket, key), for 100k buckets named "user_<n>" in namespace "logins".
func BenchmarkMemoryPerBucket(b *testing.B) {
	for _, a := range []Algorithm{TokenBucket, FixedWindow, SlidingWindowCounter, SlidingWindowLog} {
		b.Run(a.String(), func(b *testing.B) {
			s := tb(100, 50)
			if a.Windowed() {
				s = window(a, 100, time.Minute)
			}
			const n = 100_000
			var perBucket float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				tab := NewTable(&Config{Namespaces: map[string]*Namespace{"logins": {Dynamic: s, MaxDynamicBuckets: n}}}, Options{})
				for i := range n {
					tab.Take("logins", "user_"+strconv.Itoa(i), Request{Tokens: 1, MaxWait: -1}, t0.UnixNano())
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perBucket = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(tab)
			}
			b.ReportMetric(perBucket, "B/bucket")
		})
	}
}
