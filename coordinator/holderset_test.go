package coordinator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/allot/allot/internal/leader"
)

// holdsUntil returns the lease end of client on subject, if it is a
// holder (for tests: it reads a lease end without the lock).
func holdsUntil(h *holders, subject, client string) (int64, bool) {
	if i := h.set.find(h.fingerprint(subject, client)); i >= 0 {
		return h.set.slots[i].until, true
	}
	return 0, false
}

// checkSet fails t unless s holds exactly want: every entry found in its
// slot with its lease end, and the count right.
func checkSet(t *testing.T, s *holderSet, want map[uint64]int64) {
	t.Helper()
	n := 0
	for i, sl := range s.slots {
		if sl.fp == 0 {
			continue
		}
		n++
		if u, ok := want[sl.fp]; !ok || u != sl.until {
			t.Fatalf("slot %d holds %#x until %d; want %v (%d)", i, sl.fp, sl.until, ok, u)
		}
		if got := s.find(sl.fp); got != i {
			t.Fatalf("find(%#x) = %d, want %d: not reachable from its home", sl.fp, got, i)
		}
	}
	if n != len(want) || s.n != len(want) {
		t.Fatalf("%d entries in slots, n %d, want %d", n, s.n, len(want))
	}
	if len(s.slots) > 0 && s.n*4 > len(s.slots)*3 {
		t.Fatalf("%d entries in %d slots: over three quarters", s.n, len(s.slots))
	}
}

// The table against a map, through random inserts, lease ends moved and
// sweeps. The fingerprints are drawn from a few narrow ranges, some at
// the top (whose home is the last slot, so their runs wrap around the
// end), so that probe runs are long and removals move entries back.
func TestHolderSetMatchesAMap(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		s := newHolderSet()
		want := map[uint64]int64{}
		bases := []uint64{1, 1 << 62, 1 << 63, math.MaxUint64 - 1<<20}
		fp := func() uint64 { return bases[rng.IntN(len(bases))] + rng.Uint64N(1<<20) }
		for op := range 3000 {
			switch k := rng.IntN(10); {
			case k < 6:
				f := fp()
				until := rng.Int64N(1000)
				if i := s.find(f); i >= 0 {
					s.slots[i].until = max(s.slots[i].until, until)
					want[f] = max(want[f], until)
				} else {
					if _, ok := want[f]; ok {
						t.Fatalf("seed %d op %d: %#x not found", seed, op, f)
					}
					s.insert(f, until)
					want[f] = until
				}
			case k < 9:
				if i := s.find(fp()); i >= 0 {
					if _, ok := want[s.slots[i].fp]; !ok {
						t.Fatalf("seed %d op %d: found %#x, which is not held", seed, op, s.slots[i].fp)
					}
				}
			default:
				cut := rng.Int64N(1000)
				s.removeIf(func(until int64) bool { return until < cut })
				for f, u := range want {
					if u < cut {
						delete(want, f)
					}
				}
			}
			checkSet(t, &s, want)
		}
	}
}

// removeIf on hand-placed runs: a run that wraps around the end, and
// removals at either end of it.
func TestHolderSetRemoveIf(t *testing.T) {
	const top = math.MaxUint64 // home: the last slot
	tests := []struct {
		name  string
		fps   []uint64
		until []int64
		cut   int64 // entries until < cut go
	}{
		{"nothing to remove", []uint64{top, top - 1, 1, 2}, []int64{5, 5, 5, 5}, 1},
		{"everything", []uint64{top, top - 1, 1, 2}, []int64{0, 0, 0, 0}, 1},
		{"head of a wrapped run", []uint64{top, top - 1, top - 2, 1}, []int64{0, 5, 5, 5}, 1},
		{"wrapped part only", []uint64{top, top - 1, top - 2, 1}, []int64{5, 5, 0, 5}, 1},
		{"alternate", []uint64{top, top - 1, top - 2, 1, 2, 3}, []int64{0, 5, 0, 5, 0, 5}, 1},
		{"home at the start", []uint64{1, 2, 3, 4, 5}, []int64{0, 0, 5, 0, 5}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newHolderSet()
			want := map[uint64]int64{}
			for i, f := range tc.fps {
				s.insert(f, tc.until[i])
				want[f] = tc.until[i]
			}
			checkSet(t, &s, want)
			s.removeIf(func(until int64) bool { return until < tc.cut })
			for f, u := range want {
				if u < tc.cut {
					delete(want, f)
				}
			}
			checkSet(t, &s, want)
		})
	}
}

// The holders through their API: keys per tenant, the latest lease end
// kept, the bound, and sweep forgetting a client holderGrace after its
// lease ended.
func TestHolders(t *testing.T) {
	const (
		plain  = "allot.root.capacity.get"
		tenant = "allot.t.acme.root.capacity.get"
		other  = "allot.t.other.root.capacity.get"
	)
	grace := int64(holderGrace)
	type hold struct {
		subject, client string
		until           int64
	}
	type ask struct {
		subject, client string
		until           int64 // 0: not a holder
	}
	tests := []struct {
		name    string
		max     int
		holds   []hold
		sweepAt int64 // 0: no sweep
		want    []ask
	}{
		{"tenants apart", 10, []hold{{tenant, "c1", 100}},
			0, []ask{{tenant, "c1", 100}, {plain, "c1", 0}, {other, "c1", 0}}},
		{"latest end kept", 10, []hold{{plain, "c1", 100}, {plain, "c1", 300}, {plain, "c1", 200}},
			0, []ask{{plain, "c1", 300}}},
		{"bounded", 2, []hold{{plain, "c1", 100}, {plain, "c2", 100}, {plain, "c3", 100}, {plain, "c1", 150}},
			0, []ask{{plain, "c1", 150}, {plain, "c2", 100}, {plain, "c3", 0}}},
		{"kept until the grace ends", 10, []hold{{plain, "c1", 100}, {plain, "c2", 200}},
			200 + grace, []ask{{plain, "c1", 0}, {plain, "c2", 200}}},
		{"a refresh keeps it", 10, []hold{{plain, "c1", 100}, {plain, "c1", 500}},
			400 + grace, []ask{{plain, "c1", 500}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHolders(tc.max)
			for _, x := range tc.holds {
				h.hold(x.subject, x.client, x.until)
			}
			if tc.sweepAt != 0 {
				h.sweep(tc.sweepAt)
			}
			for _, a := range tc.want {
				until, ok := holdsUntil(h, a.subject, a.client)
				if ok != (a.until != 0) || until != a.until {
					t.Errorf("%s %s: holds until %d (%v), want %d", a.subject, a.client, until, ok, a.until)
				}
			}
		})
	}
}

// Sweeping allocates nothing, and a thousand holders take at most 2,000
// slots (growing by half keeps the table at least half full).
func TestHoldersSweepAllocatesNothing(t *testing.T) {
	h := newHolders(1 << 20)
	for i := range 1000 {
		h.hold("allot.root.capacity.get", fmt.Sprintf("client-%04d", i), int64(i))
	}
	if len(h.set.slots) > 2000 {
		t.Errorf("1000 holders take %d slots, want at most 2000", len(h.set.slots))
	}
	now := int64(0)
	if allocs := testing.AllocsPerRun(10, func() {
		now += 100
		h.sweep(now + int64(holderGrace))
	}); allocs != 0 {
		t.Errorf("%.0f allocations per sweep, want 0", allocs)
	}
}

// classify runs on the intake's goroutines while the round loop adds
// holders (growing the table), moves their lease ends (the classified
// client's too) and sweeps: a client held all along is classed a holder
// every time, and -race sees no unguarded access.
func TestHoldersClassifyBesideTheRoundLoop(t *testing.T) {
	const subject = "allot.root.capacity.get"
	h := newHolders(1 << 20)
	h.hold(subject, "steady", math.MaxInt64/2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c := h.classify(subject, "steady"); c != leader.ClassKnown {
					t.Errorf("the steady holder classed %v", c)
					return
				}
			}
		}()
	}
	for i := range 20_000 {
		h.hold(subject, fmt.Sprintf("c%d", i), int64(i))
		h.hold(subject, fmt.Sprintf("c%d", i/2), int64(i))
		h.hold(subject, "steady", math.MaxInt64/2+int64(i))
		if i%1000 == 999 {
			h.sweep(int64(i-500) + int64(holderGrace))
		}
	}
	close(stop)
	wg.Wait()
}
