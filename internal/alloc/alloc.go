// Package alloc divides a resource's capacity among claimants.
//
// Every function here takes the demands of one resource and writes each
// claimant's target share into Demand.Target. Targets are what the
// algorithm would hand out in steady state; the coordinator then limits the
// actual grants to what is free while old leases are still outstanding.
//
// Priority rule for the share algorithms: claimants are grouped into bands
// by Priority. Bands are served from the highest priority down; each band
// is divided by the algorithm among its members using whatever capacity the
// higher bands left, and what it leaves passes on to the next band. A
// lower band therefore gets capacity only when every higher band is
// satisfied.
//
// Weights: a claimant with Weight w stands for w clients (a lower
// coordinator aggregating w subclients). Equal shares are per unit of
// weight.
package alloc

import (
	"cmp"
	"math"
	"slices"

	"github.com/allot/allot/proto/allotpb"
)

// Demand is one claimant's request for one resource.
type Demand struct {
	// Wants is the capacity asked for; finite and >= 0.
	Wants float64
	// Weight is the number of clients the claimant stands for; > 0.
	Weight float64
	// Priority is the claimant's band; higher is served first.
	Priority int32
	// Target is the output: the claimant's share, 0 <= Target <= Wants.
	Target float64
}

// Scratch holds buffers reused across runs so a round allocates nothing
// in steady state. The zero value is ready to use; not safe for
// concurrent use.
type Scratch struct {
	idx   []int32
	order []ratio
	seed  uint64 // pivot choice; any value works

	// ByTenant's: the tenants as demands, and the claimants grouped by
	// tenant (copies, their indices, each tenant's first position and
	// the next free one).
	tenants []Demand
	group   []Demand
	member  []int32
	start   []int32
	next    []int32
}

type ratio struct {
	r, wants, weight float64 // r = wants / weight
}

// Run applies the algorithm kind to d with the given capacity.
func Run(kind allotpb.Algorithm_Kind, capacity float64, d []Demand, s *Scratch) {
	switch kind {
	case allotpb.Algorithm_STATIC:
		Static(capacity, d)
	case allotpb.Algorithm_PROPORTIONAL_SHARE:
		ProportionalShare(capacity, d, s)
	case allotpb.Algorithm_FAIR_SHARE:
		FairShare(capacity, d, s)
	default:
		None(d)
	}
}

// None grants every claimant what it wants.
func None(d []Demand) {
	for i := range d {
		d[i].Target = d[i].Wants
	}
}

// Static grants every claimant min(Wants, capacity): capacity is a
// per-claimant limit, not a global one.
func Static(capacity float64, d []Demand) {
	for i := range d {
		d[i].Target = min(d[i].Wants, max(capacity, 0))
	}
}

// FairShare computes weighted max-min fair shares (water-filling): when
// total wants fit, everyone gets what they want; otherwise there is a level
// L such that each claimant gets min(Wants, Weight*L) and the shares sum to
// capacity. O(n log n).
func FairShare(capacity float64, d []Demand, s *Scratch) {
	byBand(capacity, d, s, fairBand)
}

// ProportionalShare gives each claimant up to its equal share
// (capacity*Weight/ΣWeight); capacity left by claimants wanting less than
// their equal share is divided among the others in proportion to their
// excess demand (Wants minus equal share). O(n).
func ProportionalShare(capacity float64, d []Demand, s *Scratch) {
	byBand(capacity, d, s, proportionalBand)
}

// bandFunc divides capacity among d[idx[k]] and returns what it handed out.
type bandFunc func(capacity float64, d []Demand, idx []int32, s *Scratch) float64

// byBand runs f per priority band, highest first.
func byBand(capacity float64, d []Demand, s *Scratch, f bandFunc) {
	if s == nil {
		s = new(Scratch)
	}
	capacity = max(capacity, 0)
	n := len(d)
	s.idx = slices.Grow(s.idx[:0], n)[:n]
	for i := range s.idx {
		s.idx[i] = int32(i)
	}
	single := true
	for i := 1; i < n; i++ {
		if d[i].Priority != d[0].Priority {
			single = false
			break
		}
	}
	if single {
		f(capacity, d, s.idx, s)
		return
	}
	slices.SortFunc(s.idx, func(a, b int32) int { return cmp.Compare(d[b].Priority, d[a].Priority) })
	for start := 0; start < n; {
		end := start + 1
		for end < n && d[s.idx[end]].Priority == d[s.idx[start]].Priority {
			end++
		}
		used := f(capacity, d, s.idx[start:end], s)
		capacity = max(capacity-used, 0)
		start = end
	}
}

// fits handles the uncontended case shared by both algorithms: if the
// band's total wants fit, everyone gets what they want.
func fits(capacity float64, d []Demand, idx []int32) (total, weight float64, ok bool) {
	for _, i := range idx {
		total += d[i].Wants
		weight += d[i].Weight
	}
	if total <= capacity {
		for _, i := range idx {
			d[i].Target = d[i].Wants
		}
		return total, weight, true
	}
	return total, weight, false
}

func fairBand(capacity float64, d []Demand, idx []int32, s *Scratch) float64 {
	total, _, ok := fits(capacity, d, idx)
	if ok {
		return total
	}
	level := waterLevel(capacity, d, idx, s)
	for _, i := range idx {
		d[i].Target = min(d[i].Weight*level, d[i].Wants)
	}
	return capacity
}

// waterLevel finds L with Σ min(Wants, Weight·L) = capacity, given that
// total wants exceed capacity. Instead of sorting by Wants/Weight it selects
// around pivots (quickselect), keeping running sums of the claimants known
// to be below the level (they get their wants) and of the weights known to
// be above it (they get Weight·L): expected O(n).
func waterLevel(capacity float64, d []Demand, idx []int32, s *Scratch) float64 {
	s.order = slices.Grow(s.order[:0], len(idx))[:len(idx)]
	for k, i := range idx {
		s.order[k] = ratio{r: d[i].Wants / d[i].Weight, wants: d[i].Wants, weight: d[i].Weight}
	}
	var fixed, above float64 // wants of satisfied claimants; weight of capped ones
	part := s.order
	for len(part) > 0 {
		s.seed = s.seed*6364136223846793005 + 1442695040888963407
		p := part[(s.seed>>33)%uint64(len(part))].r
		// Three-way partition: [0,lt) < p, [lt,gt) == p, [gt,n) > p.
		lt, gt := 0, len(part)
		var wantsLE, weightGE, eqWeight float64
		for k := 0; k < gt; {
			switch x := part[k]; {
			case x.r < p:
				wantsLE += x.wants
				part[lt], part[k] = part[k], part[lt]
				lt++
				k++
			case x.r > p:
				weightGE += x.weight
				gt--
				part[gt], part[k] = part[k], part[gt]
			default:
				wantsLE += x.wants
				weightGE += x.weight
				eqWeight += x.weight
				k++
			}
		}
		// Hand out at level p: claimants at or below p are satisfied.
		if fixed+wantsLE+(above+weightGE-eqWeight)*p <= capacity {
			fixed += wantsLE
			part = part[gt:]
		} else {
			above += weightGE
			part = part[:lt]
		}
	}
	if above == 0 {
		return math.Inf(1)
	}
	return (capacity - fixed) / above
}

func proportionalBand(capacity float64, d []Demand, idx []int32, _ *Scratch) float64 {
	total, weight, ok := fits(capacity, d, idx)
	if ok {
		return total
	}
	unit := capacity / weight
	var leftover, excess float64
	for _, i := range idx {
		eq := unit * d[i].Weight
		if d[i].Wants <= eq {
			leftover += eq - d[i].Wants
		} else {
			excess += d[i].Wants - eq
		}
	}
	for _, i := range idx {
		eq := unit * d[i].Weight
		if d[i].Wants <= eq {
			d[i].Target = d[i].Wants
			continue
		}
		extra := 0.0
		if excess > 0 {
			extra = leftover * (d[i].Wants - eq) / excess
		}
		d[i].Target = min(eq+extra, d[i].Wants)
	}
	return capacity
}
