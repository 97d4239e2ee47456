package level

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/allot/allot/proto/allotpb"
)

// TestMatchesAlloc: on random histories of adds, changes of wants,
// weight, priority and tenant, removals and capacity changes, every share equals what today's internal/alloc computes from scratch
// over the same claims (within the tolerance), and so do the sums.
func TestMatchesAlloc(t *testing.T) {
	t.Parallel()
	histories := 300
	if testing.Short() {
		histories = 30
	}
	for i := range histories {
		checkHistory(t, rand.New(rand.NewPCG(uint64(i), 7)), 150)
	}
}

// TestMatchesAllocLarge runs a few long histories, so that trees are deep
// and bands and tenants hold many claims.
func TestMatchesAllocLarge(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("long histories")
	}
	for i := range 3 {
		checkHistory(t, rand.New(rand.NewPCG(uint64(i), 8)), 1500)
	}
}

// TestTargets pins shares worked out by hand, as alloc's own table does.
func TestTargets(t *testing.T) {
	fair, prop := allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE
	unit := func(wants ...float64) []Claim {
		c := make([]Claim, len(wants))
		for i, w := range wants {
			c[i] = Claim{Wants: w, Weight: 1}
		}
		return c
	}
	tests := []struct {
		name     string
		kind     allotpb.Algorithm_Kind
		tenants  bool
		capacity float64
		claims   []Claim
		want     []float64
	}{
		{"fair/doorman-counterexample", fair, false, 100, unit(1000, 33.5, 31, 1), []float64{34.5, 33.5, 31, 1}},
		{"fair/cascade", fair, false, 100, unit(10, 20, 200, 300), []float64{10, 20, 35, 35}},
		{"fair/ties", fair, false, 30, unit(10, 10, 30), []float64{10, 10, 10}},
		{"fair/weights", fair, false, 100, []Claim{{Wants: 100, Weight: 3}, {Wants: 100, Weight: 1}}, []float64{75, 25}},
		{"fair/priority-starves-low", fair, false, 100, []Claim{{Wants: 80, Weight: 1}, {Wants: 60, Weight: 1, Priority: 2}, {Wants: 60, Weight: 1, Priority: 2}}, []float64{0, 50, 50}},
		{"fair/zero-capacity", fair, false, 0, unit(5, 0), []float64{0, 0}},
		{"prop/leftover-by-excess", prop, false, 90, unit(10, 40, 70), []float64{10, 34, 46}},
		{"prop/priority", prop, false, 100, []Claim{{Wants: 30, Weight: 1, Priority: 5}, {Wants: 100, Weight: 1}, {Wants: 100, Weight: 1}}, []float64{30, 35, 35}},
		// Tenant a has one claim, tenant b four: 50 each, then 12.5 apiece.
		{"fair/tenants", fair, true, 100, []Claim{{Wants: 100, Weight: 1, Tenant: "a"},
			{Wants: 100, Weight: 1, Tenant: "b"}, {Wants: 100, Weight: 1, Tenant: "b"}, {Wants: 100, Weight: 1, Tenant: "b"}, {Wants: 100, Weight: 1, Tenant: "b"}},
			[]float64{50, 12.5, 12.5, 12.5, 12.5}},
		// Weighted tenants (heavy 3, plain 1), priorities inside one.
		{"fair/tenant-weights", fair, true, 80, []Claim{{Wants: 100, Weight: 1, Tenant: "heavy", Priority: 1}, {Wants: 100, Weight: 1, Tenant: "heavy"},
			{Wants: 100, Weight: 1}}, []float64{60, 0, 20}},
		{"static", allotpb.Algorithm_STATIC, false, 10, unit(5, 50), []float64{5, 10}},
		{"none", allotpb.Algorithm_NO_ALGORITHM, false, 10, unit(5, 50), []float64{5, 50}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Kind: tt.kind}
			if tt.tenants {
				cfg.TenantWeight = tenantWeight
			}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetCapacity(tt.capacity); err != nil {
				t.Fatal(err)
			}
			hs := make([]Handle, len(tt.claims))
			for i, c := range tt.claims {
				if hs[i], err = s.Add(c); err != nil {
					t.Fatal(err)
				}
			}
			for i, h := range hs {
				got, err := s.Target(h)
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(got-tt.want[i]) > 1e-9 {
					t.Errorf("claim %d (%+v): target %v, want %v", i, tt.claims[i], got, tt.want[i])
				}
			}
		})
	}
}

// TestBadInput: out-of-range values and unknown handles are refused with
// a clear error and change nothing.
func TestBadInput(t *testing.T) {
	s, err := New(Config{Kind: allotpb.Algorithm_FAIR_SHARE, TenantWeight: func(name string) float64 {
		if name == "broken" {
			return math.NaN()
		}
		return 1
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetCapacity(10); err != nil {
		t.Fatal(err)
	}
	h, err := s.Add(Claim{Wants: 20, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		do   func() error
		want error
	}{
		{"add NaN wants", func() error { _, err := s.Add(Claim{Wants: math.NaN(), Weight: 1}); return err }, ErrInvalid},
		{"add negative wants", func() error { _, err := s.Add(Claim{Wants: -1, Weight: 1}); return err }, ErrInvalid},
		{"add infinite wants", func() error { _, err := s.Add(Claim{Wants: math.Inf(1), Weight: 1}); return err }, ErrInvalid},
		{"add zero weight", func() error { _, err := s.Add(Claim{Wants: 1}); return err }, ErrInvalid},
		{"add tenant of bad weight", func() error { _, err := s.Add(Claim{Wants: 1, Weight: 1, Tenant: "broken"}); return err }, ErrInvalid},
		{"set negative weight", func() error { return s.Set(h, Claim{Wants: 1, Weight: -2}) }, ErrInvalid},
		{"set tenant of bad weight", func() error { return s.Set(h, Claim{Wants: 1, Weight: 1, Tenant: "broken"}) }, ErrInvalid},
		{"set unknown", func() error { return s.Set(h+1, Claim{Wants: 1, Weight: 1}) }, ErrUnknownHandle},
		{"set zero handle", func() error { return s.Set(0, Claim{Wants: 1, Weight: 1}) }, ErrUnknownHandle},
		{"remove unknown", func() error { return s.Remove(-3) }, ErrUnknownHandle},
		{"target unknown", func() error { _, err := s.Target(99); return err }, ErrUnknownHandle},
		{"capacity NaN", func() error { return s.SetCapacity(math.NaN()) }, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.do(); !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			got, err := s.Target(h)
			c, ok := s.Claim(h)
			if err != nil || got != 10 || s.Len() != 1 || s.Wants() != 20 || s.Capacity() != 10 || !ok || c != (Claim{Wants: 20, Weight: 1}) {
				t.Fatalf("state changed: target %v (%v), len %d, wants %v, capacity %v, claim %+v %v", got, err, s.Len(), s.Wants(), s.Capacity(), c, ok)
			}
		})
	}
	if _, err := New(Config{Kind: allotpb.Algorithm_STATIC, TenantWeight: tenantWeight}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("tenant level for STATIC: error %v, want ErrInvalid", err)
	}
}

// TestRemovedHandle: a removed claim's handle is unknown until Add hands
// it out again.
func TestRemovedHandle(t *testing.T) {
	s, err := New(Config{Kind: allotpb.Algorithm_FAIR_SHARE})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Add(Claim{Wants: 1, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(h); err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{s.Remove(h), s.Set(h, Claim{Wants: 1, Weight: 1})} {
		if !errors.Is(err, ErrUnknownHandle) {
			t.Fatalf("error %v, want ErrUnknownHandle", err)
		}
	}
	if _, ok := s.Claim(h); ok {
		t.Fatal("Claim of a removed handle")
	}
	if s.Len() != 0 || s.Wants() != 0 || s.Weight() != 0 || len(s.Bands()) != 0 {
		t.Fatalf("empty state: len %d wants %v weight %v bands %v", s.Len(), s.Wants(), s.Weight(), s.Bands())
	}
}

// TestWithin pins the bound on what a claim may hold per unit of weight
// within its share: a contended band's water level (its equal share for
// PROPORTIONAL_SHARE), 0 for a band that gets nothing, +Inf for a band
// that gets all it wants, for a band with no claims and for the
// algorithms that share nothing.
func TestWithin(t *testing.T) {
	fair, prop := allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE
	inf := math.Inf(1)
	tests := []struct {
		name     string
		kind     allotpb.Algorithm_Kind
		capacity float64
		claims   []Claim
		want     map[int32]float64
	}{
		{"fair/contended", fair, 100, []Claim{{Wants: 1000, Weight: 1}, {Wants: 20, Weight: 1}, {Wants: 100, Weight: 2}}, map[int32]float64{0: 80.0 / 3, 1: inf}},
		{"fair/fits", fair, 100, []Claim{{Wants: 10, Weight: 1}, {Wants: 20, Weight: 1}}, map[int32]float64{0: inf}},
		{"fair/priority", fair, 100, []Claim{{Wants: 80, Weight: 1, Priority: 2}, {Wants: 40, Weight: 1, Priority: 1}, {Wants: 5, Weight: 1}},
			map[int32]float64{2: inf, 1: 20, 0: 0}},
		{"proportional/contended", prop, 90, []Claim{{Wants: 100, Weight: 1}, {Wants: 10, Weight: 2}}, map[int32]float64{0: 30}},
		{"static", allotpb.Algorithm_STATIC, 1, []Claim{{Wants: 10, Weight: 1}}, map[int32]float64{0: inf}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{Kind: tt.kind})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SetCapacity(tt.capacity); err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.claims {
				if _, err := s.Add(c); err != nil {
					t.Fatal(err)
				}
			}
			for p, want := range tt.want {
				if got := s.Within(p); math.Abs(got-want) > 1e-12 && got != want {
					t.Errorf("Within(%d) = %v, want %v", p, got, want)
				}
			}
		})
	}
}

// Touch reads claims it knows and passes over handles it does not.
func TestTouch(t *testing.T) {
	s, err := New(Config{Kind: allotpb.Algorithm_FAIR_SHARE})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Add(Claim{Wants: 3, Weight: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.Touch(h) == 0 {
		t.Error("Touch of a known claim read nothing")
	}
	for _, bad := range []Handle{0, -1, h + 1, 1 << 30} {
		if got := s.Touch(bad); got != 0 {
			t.Errorf("Touch(%d) = %d, want 0", bad, got)
		}
	}
}
