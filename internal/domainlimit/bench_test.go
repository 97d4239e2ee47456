package domainlimit

import (
	"testing"
	"time"
)

// BenchmarkRequest3TiersFull is the figure: one burst-tier
// decision with 3 tiers at their limits, each sliding window holding
// 1,000 hits (as 1,000 separate runs, the worst case for memory and
// expiry). Target: under 1 µs amortized, 0 allocations.
//
// steady: tiers 1 and 2 are full (long windows), tier 3 is current and
// full; the clock moves so that one hit leaves tier 3's window per
// request, which is then granted: expiry, current tier, hard and global
// limits, one hit recorded.
//
// blocked: tiers 1 and 2 full, tier 2 current, tier 3 skippable and in
// its cooldown: each request walks the burst path, skips tier 3 and is
// refused.
func BenchmarkRequest3TiersFull(b *testing.B) {
	const L = 1000
	day := 24 * time.Hour
	long := Tier{Limit: L, Window: day, Active: day}
	for _, c := range []struct {
		name        string
		step, skip  time.Duration
		tier3       Tier
		granted     int64
		currentTier int
	}{
		{name: "steady", step: 100 * time.Microsecond, granted: 1, currentTier: 3,
			tier3: Tier{Limit: L, Window: (L - 1) * 100 * time.Microsecond, Active: day}}, // holds L steps' hits
		{name: "blocked", step: time.Microsecond, skip: L * time.Microsecond, granted: 0, currentTier: 2, // tier 3 cools down
			tier3: Tier{Limit: L, Window: L * time.Microsecond, Active: L * time.Microsecond, Cooldown: day, Skippable: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: []Tier{long, long, c.tier3}})
			if err != nil {
				b.Fatal(err)
			}
			now := fill(b, r, 3*L, c.step).Add(c.skip)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				now = now.Add(c.step)
				if res, _ := r.Request(now.UnixNano(), "d", 1, 1); res.Granted != c.granted || res.Tier != c.currentTier || res.TierHits != L {
					b.Fatalf("%+v", res)
				}
			}
		})
	}
}

// fill grants n single hits to domain "d", one per step.
func fill(b *testing.B, r *Rate, n int, step time.Duration) time.Time {
	now := epoch
	for i := range n {
		now = epoch.Add(time.Duration(i) * step)
		if res, _ := r.Request(now.UnixNano(), "d", 1, 1); res.Granted != 1 {
			b.Fatalf("fill hit %d refused: %+v", i, res)
		}
	}
	return now
}

// BenchmarkReserveRelease: one reserve and one release of a domain in
// two groups.
func BenchmarkReserveRelease(b *testing.B) {
	c, err := NewCopies(CopySpec{DomainLimit: 10, GlobalLimit: 1000, Groups: []Group{
		{Name: "free", Limit: 100, Domains: []string{"d"}}, {Name: "eu", Limit: 100, Domains: []string{"d"}}}})
	if err != nil {
		b.Fatal(err)
	}
	groups := []string{"eu", "free"}
	b.ReportAllocs()
	for range b.N {
		if res, _ := c.Reserve("d", 1, 1); res.Granted != 1 {
			b.Fatal(res)
		}
		if err := c.Release("d", groups, 1); err != nil {
			b.Fatal(err)
		}
	}
}
