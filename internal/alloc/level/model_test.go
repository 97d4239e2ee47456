package level

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/proto/allotpb"
)

// The reference model: the claims in a dense slice, removed by
// swap-delete as the ledger keeps them, divided from scratch on every
// check by today's internal/alloc the way the ledger calls it.

// tolerance bounds how far a share may be from alloc's, as a fraction of
// the capacity given out plus what the claims want: the two sum in
// different orders (see the package comment). Summing n values rounds by
// at most about n·2⁻⁵³ of their sum (1.7e-13 for the longest histories
// here) and the differences seen are about 2e-16; 1e-12 is far below any
// real disagreement.
//
// Where every sum and comparison is exact in both, the shares must be
// identical, not near: FAIR_SHARE over integer wants of unit weight
// (styleExact), with or without tenants (whose weights here keep ties
// between tenants at exact levels), and STATIC and NO_ALGORITHM always.
const tolerance = 1e-12

// tenantWeights are the tenant level's weights in the tests.
func tenantWeight(name string) float64 {
	switch name {
	case "heavy":
		return 3
	case "light":
		return 0.25
	}
	return 1
}

type model struct {
	kind     allotpb.Algorithm_Kind
	tenanted bool
	exact    bool // shares must equal alloc's exactly
	capacity float64
	order    []Handle // the ledger's dense order
	claims   map[Handle]Claim
	scratch  alloc.Scratch
}

func newModel(kind allotpb.Algorithm_Kind, tenanted bool) *model {
	return &model{kind: kind, tenanted: tenanted, claims: map[Handle]Claim{}}
}

func (m *model) add(h Handle, c Claim) {
	m.order = append(m.order, h)
	m.claims[h] = c
}

func (m *model) remove(h Handle) {
	k := slices.Index(m.order, h)
	last := len(m.order) - 1
	m.order[k] = m.order[last]
	m.order = m.order[:last]
	delete(m.claims, h)
}

// targets divides the capacity as the ledger's resource.targets does.
func (m *model) targets() map[Handle]float64 {
	d := make([]alloc.Demand, len(m.order))
	for i, h := range m.order {
		c := m.claims[h]
		d[i] = alloc.Demand{Wants: c.Wants, Weight: c.Weight, Priority: c.Priority}
	}
	if m.tenanted {
		index := map[string]int32{}
		var of []int32
		var shares []alloc.Tenant
		for _, h := range m.order {
			name := m.claims[h].Tenant
			k, ok := index[name]
			if !ok {
				k = int32(len(shares))
				index[name] = k
				shares = append(shares, alloc.Tenant{Weight: tenantWeight(name)})
			}
			of = append(of, k)
		}
		alloc.ByTenant(m.kind, m.capacity, d, of, shares, &m.scratch)
	} else {
		alloc.Run(m.kind, m.capacity, d, &m.scratch)
	}
	out := make(map[Handle]float64, len(d))
	for i, h := range m.order {
		out[h] = d[i].Target
	}
	return out
}

// bands is the ledger's bandDemand, with counts and weights.
func (m *model) bands() []BandSum {
	type exact struct {
		BandSum
		wants, weight Sum
	}
	by := map[int32]*exact{}
	for _, h := range m.order {
		c := m.claims[h]
		b := by[c.Priority]
		if b == nil {
			b = &exact{BandSum: BandSum{Priority: c.Priority}}
			by[c.Priority] = b
		}
		b.Claims++
		b.wants.Add(c.Wants)
		b.weight.Add(c.Weight)
		b.Clients += max(int64(math.Round(c.Weight)), 1)
	}
	out := make([]BandSum, 0, len(by))
	for _, b := range by {
		b.Wants, b.Weight = b.wants.Value(), b.weight.Value()
		out = append(out, b.BandSum)
	}
	slices.SortFunc(out, func(a, b BandSum) int { return cmp.Compare(b.Priority, a.Priority) })
	return out
}

// scale is what the tolerance is a fraction of.
func (m *model) scale() float64 {
	var wants float64
	for _, c := range m.claims {
		wants += c.Wants
	}
	return wants + min(max(m.capacity, 0), wants)
}

func near(a, b, scale float64) bool {
	return a == b || math.Abs(a-b) <= tolerance*scale
}

// compare checks every share, claim and sum of s against the model.
func (m *model) compare(s *State) error {
	if s.Len() != len(m.order) {
		return fmt.Errorf("Len = %d, model has %d claims", s.Len(), len(m.order))
	}
	want := m.targets()
	scale := m.scale()
	for _, h := range m.order {
		got, err := s.Target(h)
		if err != nil {
			return fmt.Errorf("Target(%d): %v", h, err)
		}
		if got != want[h] && (m.exact || !near(got, want[h], scale)) {
			return fmt.Errorf("Target(%d) = %v, alloc gives %v (diff %g, tolerance %g, exact %v); claim %+v",
				h, got, want[h], got-want[h], tolerance*scale, m.exact, m.claims[h])
		}
	}
	// Within: a claim holding no more than it wants nor than Within per
	// unit of its weight holds no more than its share.
	for _, h := range m.order {
		c := m.claims[h]
		if !shared(m.kind) {
			break
		}
		x := s.Within(c.Priority)
		if bound := min(c.Wants, c.Weight*x); bound > want[h] && !near(bound, want[h], scale) {
			return fmt.Errorf("Within(%d) = %v, but claim %d (%+v) gets %v < %v", c.Priority, x, h, c, want[h], bound)
		}
	}
	var wants, weight Sum
	for _, h := range m.order {
		c := m.claims[h]
		wants.Add(c.Wants)
		weight.Add(c.Weight)
		if !m.tenanted {
			c.Tenant = ""
		}
		if got, ok := s.Claim(h); !ok || got != c {
			return fmt.Errorf("Claim(%d) = %+v %v, model %+v", h, got, ok, c)
		}
	}
	// The running sums are exact, however they were changed: they equal
	// the exact sums of the claims now held, to the last bit.
	if s.Wants() != wants.Value() || s.Weight() != weight.Value() {
		return fmt.Errorf("sums: wants %v weight %v, exact %v %v", s.Wants(), s.Weight(), wants.Value(), weight.Value())
	}
	got, wantBands := s.Bands(), m.bands()
	if len(got) != len(wantBands) {
		return fmt.Errorf("Bands = %+v, model %+v", got, wantBands)
	}
	for i, b := range got {
		w := wantBands[i]
		if b != w {
			return fmt.Errorf("Bands[%d] = %+v, model %+v", i, b, w)
		}
	}
	return nil
}

// source is where a history's choices come from: a seeded generator in
// the property test, the fuzzer's bytes in the fuzz target.
type source interface {
	IntN(n int) int
	Float64() float64
}

// tenants and priorities a history picks from: few, so that they are
// shared and bands and tenants come and go.
var (
	testTenants    = []string{"", "a", "heavy", "light"}
	testPriorities = []int32{-1, 0, 0, 1, 5}
)

// A history's style says what values it draws: small integers of unit
// weight (every sum exact), the same with integer weights, uniform reals,
// or magnitudes from 1e-6 to 1e12. Every style has zeros and repeats from
// a small pool, so that ties occur.
const (
	styleExact = iota
	styleIntegers
	styleReals
	styleMagnitudes
	styles
)

// value draws a wants or capacity in the history's style.
func value(src source, style int) float64 {
	switch src.IntN(10) {
	case 0:
		return 0
	case 1:
		return float64(src.IntN(4)) * 2.5
	}
	switch style {
	case styleExact, styleIntegers:
		return float64(src.IntN(21))
	case styleReals:
		return src.Float64() * 100
	}
	return math.Pow(10, src.Float64()*18-6)
}

func weight(src source, style int) float64 {
	switch {
	case style == styleExact || src.IntN(3) > 0:
		return 1
	case style == styleIntegers:
		return float64(1 + src.IntN(5))
	}
	return 0.1 + src.Float64()*50
}

func claim(src source, style int) Claim {
	return Claim{Wants: value(src, style), Weight: weight(src, style),
		Priority: testPriorities[src.IntN(len(testPriorities))], Tenant: testTenants[src.IntN(len(testTenants))]}
}

// history applies steps random changes to a State and the model alike,
// comparing them after each, and returns the first disagreement.
func history(src source, kind allotpb.Algorithm_Kind, tenanted bool, steps int) error {
	cfg := Config{Kind: kind}
	if tenanted {
		cfg.TenantWeight = tenantWeight
	}
	s, err := New(cfg)
	if err != nil {
		return err
	}
	m := newModel(kind, tenanted)
	style := src.IntN(styles)
	m.exact = !shared(kind) || kind == allotpb.Algorithm_FAIR_SHARE && style == styleExact
	for step := range steps {
		op := src.IntN(11)
		if len(m.order) == 0 {
			op = 0
		}
		var h Handle
		if len(m.order) > 0 {
			h = m.order[src.IntN(len(m.order))]
		}
		c := m.claims[h]
		switch op {
		case 0, 1, 2:
			c = claim(src, style)
			if h, err = s.Add(c); err != nil {
				return fmt.Errorf("step %d: Add(%+v): %v", step, c, err)
			}
			m.add(h, c)
		case 3:
			if err := s.Remove(h); err != nil {
				return fmt.Errorf("step %d: Remove(%d): %v", step, h, err)
			}
			m.remove(h)
		case 4:
			c.Wants = value(src, style)
		case 5:
			c.Weight = weight(src, style)
		case 6:
			c.Priority = testPriorities[src.IntN(len(testPriorities))]
		case 7:
			c.Tenant = testTenants[src.IntN(len(testTenants))]
		case 8:
			c = claim(src, style)
		case 9:
			c.Wants = 0 // a release or a lapse
		case 10:
			m.capacity = value(src, style) * float64(1+src.IntN(8))
			if src.IntN(8) == 0 {
				m.capacity = -1
			}
			if err := s.SetCapacity(m.capacity); err != nil {
				return fmt.Errorf("step %d: SetCapacity(%v): %v", step, m.capacity, err)
			}
		}
		if op >= 4 && op <= 9 {
			if err := s.Set(h, c); err != nil {
				return fmt.Errorf("step %d: Set(%d, %+v): %v", step, h, c, err)
			}
			m.claims[h] = c
		}
		if err := m.compare(s); err != nil {
			return fmt.Errorf("step %d (op %d, %s, tenants %v, style %d): %v", step, op, kind, tenanted, style, err)
		}
	}
	return nil
}

// kinds are the algorithms a history runs, with the tenant level or
// without (only the share algorithms have one).
var kinds = []struct {
	kind     allotpb.Algorithm_Kind
	tenanted bool
}{
	{allotpb.Algorithm_FAIR_SHARE, false},
	{allotpb.Algorithm_FAIR_SHARE, true},
	{allotpb.Algorithm_PROPORTIONAL_SHARE, false},
	{allotpb.Algorithm_PROPORTIONAL_SHARE, true},
	{allotpb.Algorithm_STATIC, false},
	{allotpb.Algorithm_NO_ALGORITHM, false},
}

func checkHistory(t *testing.T, src source, steps int) {
	t.Helper()
	for _, k := range kinds {
		if err := history(src, k.kind, k.tenanted, steps); err != nil {
			t.Fatal(err)
		}
	}
}
