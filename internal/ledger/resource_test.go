package ledger

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// TestLeaseInvariants drives a resource through random rounds (requests
// with random wants and priorities, releases, silent clients whose leases
// expire, capacity changes) and checks after every round that no grant is
// negative or above wants, that the unexpired leases never sum above
// capacity (or, after a capacity cut, never grow while above it), and that
// once demand is steady everything that can be handed out is, within the
// rounds in which each client refreshes once more.
func TestLeaseInvariants(t *testing.T) {
	t.Parallel()
	for _, kind := range []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE} {
		// With tenants, the capacity is divided between three tenants
		// (weights 1, 2, 1) before their clients.
		for _, tenants := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/tenants=%v", kind, tenants), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(7, uint64(kind)))
				for trial := range 200 {
					checkTrial(t, rng, kind, trial, tenants)
				}
			})
		}
	}
}

func checkTrial(t *testing.T, rng *rand.Rand, kind allotpb.Algorithm_Kind, trial int, tenants bool) {
	tm := &config.Template{Name: "t", Glob: "r", Capacity: float64(10 + rng.IntN(500)), Algorithm: kind,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second}
	if tenants {
		tm.Tenants = &config.TenantPolicy{Fair: true, Weights: map[string]float64{"T1": 2}}
	}
	r := newResource("r", tm, 1)
	now := int64(1e18)
	nclients := 1 + rng.IntN(12)
	ids := make([]string, nclients)
	wants := make([]float64, nclients)
	prio := make([]int32, nclients)
	for i := range ids {
		ids[i] = string(rune('a' + i))
		if tenants {
			ids[i] = Claimant{Tenant: fmt.Sprintf("T%d", i%3)}.key(ids[i])
		}
		wants[i] = rng.Float64() * 100
		prio[i] = int32(rng.IntN(2))
	}
	prevSum := 0.0
	for round := range 120 {
		now += int64(100 * time.Millisecond)
		r.expire(now)
		steady := round >= 80
		if !steady && rng.IntN(10) == 0 {
			// Capacity change through a new template version.
			nt := *tm
			nt.Capacity = float64(rng.IntN(500))
			tm = &nt
			r.tmpl = tm
		}
		for i, id := range ids {
			if !steady && rng.IntN(20) == 0 {
				wants[i] = rng.Float64() * 100
			}
			if !steady && rng.IntN(30) == 0 {
				r.markReleased(id, now)
				continue
			}
			// Some clients go silent for a while (their leases expire).
			if !steady && i == 0 && round%40 > 25 {
				continue
			}
			if steady || rng.IntN(5) == 0 {
				r.upsert(id, wants[i], 1, prio[i], holding{}, now)
			}
		}
		p := roundParams{now: now, horizon: now + int64(time.Hour), minFresh: 50 * time.Millisecond, stats: &Stats{}}
		if len(r.batch) > 0 {
			r.allocate(&p)
		}
		r.dropReleased()
		if err := cmp.Or(checkSums(r, now), checkTargets(r), checkNextFree(r, now)); err != nil {
			t.Fatalf("trial %d round %d: %v", trial, round, err)
		}

		sum := 0.0
		for _, c := range r.clients.all() {
			if c.expiry <= now {
				continue
			}
			if c.has < 0 || c.has > c.wants*(1+1e-12) || math.IsNaN(c.has) {
				t.Fatalf("trial %d round %d: client %s has %v with wants %v", trial, round, c.id, c.has, c.wants)
			}
			sum += c.has
		}
		limit := max(tm.Capacity, prevSum)
		if sum > limit*(1+1e-9)+1e-9 {
			t.Fatalf("trial %d round %d: leases sum to %v, capacity %v (previous sum %v)", trial, round, sum, tm.Capacity, prevSum)
		}
		prevSum = sum
	}
	// Steady demand for 40 rounds (every client refreshes every round):
	// everything that can be handed out is.
	total := 0.0
	for i := range r.clients.len() {
		total += r.clients.at(i).wants
	}
	if want := math.Min(tm.Capacity, total); math.Abs(prevSum-want) > 1e-6*max(1, want) {
		t.Fatalf("trial %d: steady state hands out %v, want %v", trial, prevSum, want)
	}
}

// TestExpiryHeap checks that expiry removes exactly the expired clients
// and that heap indices stay consistent through swap-deletes.
func TestExpiryHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	tm := &config.Template{Name: "t", Glob: "r", Capacity: 100, Algorithm: allotpb.Algorithm_NO_ALGORITHM, LeaseLength: time.Second, RefreshInterval: time.Second}
	r := newResource("r", tm, 1)
	now := int64(0)
	for step := range 2000 {
		now += int64(time.Duration(rng.IntN(300)) * time.Millisecond)
		r.expire(now)
		for _, c := range r.clients.all() {
			if c.expiry <= now {
				t.Fatalf("step %d: expired client %s survived", step, c.id)
			}
		}
		id := string(rune('a' + rng.IntN(50)))
		r.upsert(id, 1, 1, 0, holding{}, now)
		r.allocate(&roundParams{now: now, horizon: math.MaxInt64, minFresh: time.Millisecond, stats: &Stats{}})
		if err := checkHeap(&r.heap, r.clients.len(), func(i int32) int64 { return r.clients.at(i).expiry }, true); err != nil {
			t.Fatalf("step %d: expiry heap: %v", step, err)
		}
		for i := range r.clients.len() {
			if k, ok := r.lookup(r.clients.at(i).id); !ok || k != int32(i) {
				t.Fatalf("step %d: index mismatch", step)
			}
		}
	}
}

// TestLearningNeverOverGrants drives a resource in learning mode with a
// predecessor's summary: predecessor clients hold leases summing to at
// most the published ceiling; they come back (reporting what they hold)
// in random order or never, new clients arrive, clients release. After
// every round the true outstanding total (leases issued by us plus
// predecessor leases not yet replaced and not expired) must not exceed
// the capacity.
func TestLearningNeverOverGrants(t *testing.T) {
	t.Parallel()
	for _, kind := range []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE} {
		t.Run(kind.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, uint64(kind)))
			for trial := range 300 {
				learningTrial(t, rng, kind, trial)
			}
		})
	}
}

type predLease struct {
	has     float64
	expiry  int64
	replace bool // replaced by a lease of ours
}

func learningTrial(t *testing.T, rng *rand.Rand, kind allotpb.Algorithm_Kind, trial int) {
	capacity := float64(10 + rng.IntN(500))
	ll := 10 * time.Second
	tm := &config.Template{Name: "t", Glob: "r", Capacity: capacity, Algorithm: kind, LeaseLength: ll, RefreshInterval: time.Second}
	t0 := int64(1e18)
	// Predecessor: leases unexpired at t0 sum to at most the ceiling, which
	// is at most the capacity; some leases already expired.
	pred := map[string]*predLease{}
	ceiling := capacity * rng.Float64()
	left := ceiling
	for j := range 1 + rng.IntN(10) {
		id := fmt.Sprintf("p%d", j)
		if rng.IntN(5) == 0 {
			pred[id] = &predLease{has: rng.Float64() * capacity, expiry: t0 - int64(rng.IntN(5))*int64(time.Second)}
			continue
		}
		h := left * rng.Float64()
		left -= h
		pred[id] = &predLease{has: h, expiry: t0 + int64(rng.IntN(int(ll/time.Millisecond)))*int64(time.Millisecond)}
	}
	r := newResource("r", tm, 1)
	r.ceiling = capacity // raised ahead by the coordinator
	r.predCeiling = ceiling
	r.learnStart = t0
	r.learningUntil = t0 + int64(ll) + int64(DefaultClockSkew)
	now := t0
	ids := make([]string, 0, len(pred)+5)
	for id := range pred {
		ids = append(ids, id)
	}
	for j := range 1 + rng.IntN(5) {
		ids = append(ids, fmt.Sprintf("n%d", j))
	}
	wants := map[string]float64{}
	for _, id := range ids {
		wants[id] = rng.Float64() * capacity
	}
	for round := range 150 {
		now += int64(100 * time.Millisecond)
		r.expire(now)
		for _, id := range ids {
			if rng.IntN(4) != 0 {
				continue
			}
			if rng.IntN(40) == 0 {
				r.markReleased(id, now)
				continue
			}
			var has float64
			var exp int64
			if p := pred[id]; p != nil && !p.replace {
				has, exp = p.has, p.expiry
				p.replace = true
			} else if i, ok := r.lookup(id); ok {
				has, exp = r.clients.at(i).has, r.clients.at(i).expiry
			}
			r.upsert(id, wants[id], 1, 0, holding{capacity: has, expiry: exp}, now)
		}
		if len(r.batch) > 0 {
			r.allocate(&roundParams{now: now, horizon: math.MaxInt64, minFresh: 50 * time.Millisecond, stats: &Stats{}})
		}
		r.dropReleased()
		if err := cmp.Or(checkSums(r, now), checkTargets(r), checkNextFree(r, now)); err != nil {
			t.Fatalf("trial %d round %d: %v", trial, round, err)
		}
		total := 0.0
		for _, c := range r.clients.all() {
			if c.expiry > now {
				total += c.has
			}
		}
		for _, p := range pred {
			if !p.replace && p.expiry > now {
				total += p.has
			}
		}
		if total > capacity*(1+1e-9)+1e-9 {
			t.Fatalf("trial %d round %d: %v outstanding, capacity %v (predecessor ceiling %v)", trial, round, total, capacity, ceiling)
		}
	}
}

// TestLearningHandsOutWhatIsFree: a new client in learning mode gets the
// capacity the predecessor's ceiling leaves free at once, and a returning
// predecessor client keeps its lease.
func TestLearningHandsOutWhatIsFree(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "r", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE, LeaseLength: 10 * time.Second, RefreshInterval: time.Second}
	r := newResource("r", tm, 1)
	now := int64(1e18)
	r.ceiling, r.predCeiling, r.learnStart, r.learningUntil = 100, 40, now, now+int64(time.Minute)
	p := &roundParams{now: now, horizon: math.MaxInt64, minFresh: time.Millisecond, stats: &Stats{}}
	r.upsert("new", 100, 1, 0, holding{}, now)
	r.allocate(p)
	if got := r.clients.at(mustLookup(t, r, "new")).has; got != 60 {
		t.Fatalf("new client got %v, want the 60 outside the predecessor's ceiling", got)
	}
	r.upsert("old", 100, 1, 0, holding{capacity: 40, expiry: now + int64(5*time.Second)}, now)
	r.allocate(p)
	if got := r.clients.at(mustLookup(t, r, "old")).has; got != 40 {
		t.Fatalf("predecessor client kept %v of its 40", got)
	}
}

// mustLookup returns the index of client id's record in r.
func mustLookup(t *testing.T, r *resource, id string) int32 {
	t.Helper()
	i, ok := r.lookup(id)
	if !ok {
		t.Fatalf("no record of %q", id)
	}
	return i
}
