package level

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/proto/allotpb"
)

// benchState is a resource of n claims as alloc's BenchmarkRound has
// them (wants uniform in [0, 20), so a capacity of 5 per claim is
// contended), with the same demands for the full round.
type benchState struct {
	s        *State
	hs       []Handle
	d        []alloc.Demand
	tenant   []int32 // tenants: claim i's tenant, an index into names
	names    []string
	capacity float64
}

// benchTenants is how many tenants the tenant variants spread claims
// over, each with claims in three priority bands.
const benchTenants = 100

func newBenchState(b *testing.B, kind allotpb.Algorithm_Kind, n int, tenanted bool) *benchState {
	b.Helper()
	cfg := Config{Kind: kind}
	if tenanted {
		cfg.TenantWeight = tenantWeight
	}
	s, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	bs := &benchState{s: s, hs: make([]Handle, n), d: make([]alloc.Demand, n), capacity: float64(n) * 5}
	if err := s.SetCapacity(bs.capacity); err != nil {
		b.Fatal(err)
	}
	for t := range benchTenants {
		bs.names = append(bs.names, fmt.Sprintf("tenant-%d", t))
	}
	for i := range n {
		c := Claim{Wants: rng.Float64() * 20, Weight: 1}
		if tenanted {
			k := rng.IntN(benchTenants)
			c.Tenant, c.Priority = bs.names[k], int32(rng.IntN(3))
			bs.tenant = append(bs.tenant, int32(k))
		}
		bs.d[i] = alloc.Demand{Wants: c.Wants, Weight: c.Weight, Priority: c.Priority}
		if bs.hs[i], err = s.Add(c); err != nil {
			b.Fatal(err)
		}
	}
	return bs
}

// fullRound runs today's round: alloc over every claim.
func (bs *benchState) fullRound(kind allotpb.Algorithm_Kind, scratch *alloc.Scratch, shares []alloc.Tenant) {
	if bs.tenant != nil {
		alloc.ByTenant(kind, bs.capacity, bs.d, bs.tenant, shares, scratch)
	} else {
		alloc.Run(kind, bs.capacity, bs.d, scratch)
	}
}

// BenchmarkChange: a round in which k clients change their wants, then
// each is given its share (the levels found once per round), per changed
// client (ns/change); beside it, as .../full, today's full round over the
// same n clients in the same run, and how many changes cost as much as
// that round (changes/full-round).
func BenchmarkChange(b *testing.B) {
	for _, kind := range []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE} {
		for _, tenanted := range []bool{false, true} {
			for _, n := range []int{10_000, 100_000, 1_000_000} {
				name := fmt.Sprintf("%v/tenants=%v/clients=%d", kind, tenanted, n)
				var bs *benchState
				state := func(b *testing.B) *benchState {
					if bs == nil {
						bs = newBenchState(b, kind, n, tenanted)
					}
					return bs
				}
				fullNs := 0.0
				b.Run(name+"/full", func(b *testing.B) {
					bs := state(b)
					var scratch alloc.Scratch
					shares := make([]alloc.Tenant, len(bs.names))
					for k, name := range bs.names {
						shares[k].Weight = tenantWeight(name)
					}
					b.ReportAllocs()
					for b.Loop() {
						bs.fullRound(kind, &scratch, shares)
					}
					fullNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				})
				for _, k := range []int{1, 100} {
					b.Run(fmt.Sprintf("%s/changed=%d", name, k), func(b *testing.B) {
						bs := state(b)
						rng := rand.New(rand.NewPCG(5, 6))
						round := make([]Handle, k)
						b.ReportAllocs()
						cpu := cpuNanos()
						for b.Loop() {
							for j := range round {
								i := rng.IntN(n)
								round[j] = bs.hs[i]
								c := Claim{Wants: rng.Float64() * 20, Weight: 1, Priority: bs.d[i].Priority}
								if bs.tenant != nil {
									c.Tenant = bs.names[bs.tenant[i]]
								}
								if err := bs.s.Set(round[j], c); err != nil {
									b.Fatal(err)
								}
							}
							for _, h := range round {
								if _, err := bs.s.Target(h); err != nil {
									b.Fatal(err)
								}
							}
						}
						perChange := float64(b.Elapsed().Nanoseconds()) / float64(b.N*k)
						b.ReportMetric(perChange, "ns/change")
						if cpu > 0 {
							b.ReportMetric(float64(cpuNanos()-cpu)/float64(b.N*k), "cpu-ns/change")
						}
						if fullNs > 0 {
							b.ReportMetric(fullNs/perChange, "changes/full-round")
						}
					})
				}
			}
		}
	}
}

// BenchmarkBuild: adding n claims, per claim, and the heap the State
// keeps per claim (B/claim): wants drawn at random, and wants from 20
// values (ties, ordered by handle: leaves fill up in order).
func BenchmarkBuild(b *testing.B) {
	for _, ties := range []bool{false, true} {
		for _, n := range []int{10_000, 100_000, 1_000_000} {
			b.Run(fmt.Sprintf("ties=%v/clients=%d", ties, n), func(b *testing.B) {
				rng := rand.New(rand.NewPCG(9, 10))
				var bytes float64
				for b.Loop() {
					var before, after runtime.MemStats
					runtime.GC()
					runtime.ReadMemStats(&before)
					s, err := New(Config{Kind: allotpb.Algorithm_FAIR_SHARE})
					if err != nil {
						b.Fatal(err)
					}
					for i := range n {
						w := rng.Float64() * 20
						if ties {
							w = float64(i%20) + 0.5
						}
						if _, err := s.Add(Claim{Wants: w, Weight: 1}); err != nil {
							b.Fatal(err)
						}
					}
					runtime.GC()
					runtime.ReadMemStats(&after)
					bytes = float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
					runtime.KeepAlive(s)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/claim")
				b.ReportMetric(bytes, "B/claim")
			})
		}
	}
}
