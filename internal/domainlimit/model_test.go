package domainlimit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// The reference models below are the paper's rules written the slow,
// obvious way: every hit is kept with its time and tier, tier states are
// explicit, and a request places its hits one at a time on a copy of the
// state, committing the copy only if at least min_copies were placed.

type modelHit struct {
	t      time.Time
	domain string
	tier   int // 1-based tier that accepted it
}

type modelTier struct {
	entered   bool
	activated time.Time
}

type rateModel struct {
	spec  RateSpec // normalized
	hits  []modelHit
	tiers map[string][]modelTier
	last  time.Time // newest time seen
}

// setSpec is a hot reload: tier hits outside their old windows and
// tiers inactive under the old spec (at the newest time seen) are
// forgotten; tiers are kept by index; hits of dropped tiers count only
// for the hard and global limits.
func (m *rateModel) setSpec(spec RateSpec) {
	for i, h := range m.hits {
		if h.tier <= 0 {
			continue
		}
		if h.t.Before(m.last.Add(-m.tiersOf(h.domain)[h.tier-1].Window)) {
			m.hits[i].tier = -1
		}
	}
	for d, ts := range m.tiers {
		for i := range ts {
			if m.phaseOf(d, i+1, m.last) == "inactive" {
				ts[i] = modelTier{}
			}
		}
	}
	m.spec = spec
	for i, h := range m.hits {
		if h.tier > len(m.tiersOf(h.domain)) {
			m.hits[i].tier = -1
		}
	}
	for d, ts := range m.tiers {
		n := len(m.tiersOf(d))
		for len(ts) < n {
			ts = append(ts, modelTier{})
		}
		m.tiers[d] = ts[:n]
	}
}

func (m *rateModel) tiersOf(d string) []Tier {
	if t, ok := m.spec.Domains[d]; ok {
		return t
	}
	return m.spec.Tiers
}

func (m *rateModel) phaseOf(d string, i int, now time.Time) string {
	st := m.tiers[d][i-1]
	cfg := m.tiersOf(d)[i-1]
	switch {
	case !st.entered:
		return "inactive"
	case now.Before(st.activated.Add(cfg.Active)):
		return "active"
	case now.Before(st.activated.Add(cfg.Active + cfg.Cooldown)):
		return "cooldown"
	}
	return "inactive"
}

// count counts d's hits since now-span (inclusive), of tier (0: any).
func (m *rateModel) count(d string, tier int, now time.Time, span time.Duration) int64 {
	var n int64
	for _, h := range m.hits {
		if (d == "" || h.domain == d) && (tier == 0 || h.tier == tier) && !h.t.Before(now.Add(-span)) {
			n++
		}
	}
	return n
}

func (m *rateModel) current(d string, now time.Time) int {
	for i := len(m.tiersOf(d)); i >= 1; i-- {
		if m.phaseOf(d, i, now) == "active" {
			return i
		}
	}
	return 0
}

func under(limit, n int64) bool { return limit == Unlimited || n < limit }

func (m *rateModel) clone() *rateModel {
	c := &rateModel{spec: m.spec, hits: slices.Clone(m.hits), tiers: map[string][]modelTier{}, last: m.last}
	for d, ts := range m.tiers {
		c.tiers[d] = slices.Clone(ts)
	}
	return c
}

// placeOne places one hit for d at now, reporting the tiers it entered.
func (m *rateModel) placeOne(d string, now time.Time) (ok bool, entered int) {
	if m.tiers[d] == nil {
		m.tiers[d] = make([]modelTier, len(m.tiersOf(d)))
	}
	if !under(m.spec.Hard, m.count(d, 0, now, time.Second)) || !under(m.spec.Global, m.count("", 0, now, time.Second)) {
		return false, 0
	}
	cfg := m.tiersOf(d)
	full := func(i int) bool { return !under(cfg[i-1].Limit, m.count(d, i, now, cfg[i-1].Window)) }
	cur := m.current(d, now)
	for cur == 0 || full(cur) {
		next := 0
		for j := cur + 1; j <= len(cfg); j++ {
			cool := m.phaseOf(d, j, now) == "cooldown"
			if cfg[j-1].Skippable && (cool || full(j)) {
				continue
			}
			if !cool {
				next = j
			}
			break
		}
		if next == 0 {
			return false, entered
		}
		m.tiers[d][next-1] = modelTier{entered: true, activated: now}
		entered++
		cur = next
	}
	m.hits = append(m.hits, modelHit{now, d, cur})
	return true, entered
}

func (m *rateModel) request(now time.Time, d string, copies, minCopies int64) RateResult {
	res := RateResult{HardLimit: m.spec.Hard, GlobalLimit: m.spec.Global}
	hardRoom := m.spec.Hard - m.count(d, 0, now, time.Second)
	globalRoom := m.spec.Global - m.count("", 0, now, time.Second)
	res.HardLimited = m.spec.Hard != Unlimited && hardRoom < copies
	res.GlobalLimited = m.spec.Global != Unlimited && globalRoom < copies
	try := m.clone()
	var n int64
	burst := false
	for n < copies {
		next := try.clone()
		ok, entered := next.placeOne(d, now)
		if !ok {
			break
		}
		try, n, burst = next, n+1, burst || entered > 0
	}
	if n >= minCopies {
		*m = *try
		res.Granted, res.Burst = n, burst
	}
	if m.tiers[d] != nil {
		if res.Tier = m.current(d, now); res.Tier > 0 {
			cfg := m.tiersOf(d)[res.Tier-1]
			res.TierLimit, res.TierHits = cfg.Limit, m.count(d, res.Tier, now, cfg.Window)
		}
	}
	res.DomainLastSecond, res.GlobalLastSecond = m.count(d, 0, now, time.Second), m.count("", 0, now, time.Second)
	return res
}

func randomLimit(rng *rand.Rand, hi int) int64 {
	if rng.IntN(5) == 0 {
		return Unlimited
	}
	return int64(rng.IntN(hi + 1))
}

func randomTiers(rng *rand.Rand) []Tier {
	tiers := make([]Tier, rng.IntN(4))
	for i := range tiers {
		tiers[i] = Tier{
			Limit:     randomLimit(rng, 6),
			Window:    time.Duration(1+rng.IntN(5)) * 100 * time.Millisecond,
			Active:    time.Duration(rng.IntN(20)) * 100 * time.Millisecond,
			Cooldown:  time.Duration(rng.IntN(3)*rng.IntN(10)) * 100 * time.Millisecond,
			Skippable: rng.IntN(2) == 0,
		}
	}
	return tiers
}

func randomRateSpec(rng *rand.Rand) RateSpec {
	s := RateSpec{Hard: randomLimit(rng, 12), Global: randomLimit(rng, 20), Tiers: randomTiers(rng)}
	if s.Hard == 0 {
		s.Hard = Unlimited
	}
	if rng.IntN(2) == 0 {
		s.Domains = map[string][]Tier{"b": randomTiers(rng)}
	}
	return s
}

// TestRateMatchesModel drives Rate and the reference model with the same
// random specs and request sequences and compares every result.
func TestRateMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 14))
	for seq := range 400 {
		spec := randomRateSpec(rng)
		r, err := NewRate(spec)
		if err != nil {
			t.Fatalf("seq %d: NewRate(%+v): %v", seq, spec, err)
		}
		norm, _ := spec.Normalize()
		m := &rateModel{spec: norm, tiers: map[string][]modelTier{}}
		now := time.Unix(1_700_000_000, 0)
		for step := range 60 {
			now = now.Add(time.Duration(rng.IntN(8)) * 50 * time.Millisecond)
			if rng.IntN(10) == 0 {
				now = now.Add(time.Duration(rng.IntN(4000)) * time.Millisecond)
			}
			if rng.IntN(15) == 0 {
				r.Sweep(now.UnixNano()) // forgetting idle domains must not change any answer
				m.last = now
			}
			if rng.IntN(25) == 0 {
				spec := randomRateSpec(rng)
				if err := r.SetSpec(spec); err != nil {
					t.Fatal(err)
				}
				norm, _ = spec.Normalize()
				m.setSpec(norm)
			}
			d := []string{"a", "b", "c"}[rng.IntN(3)]
			copies := 1 + rng.Int64N(8)
			minCopies := rng.Int64N(copies + 1) // 0: the paper's best effort
			m.last = now
			got, err := r.Request(now.UnixNano(), d, copies, minCopies)
			if err != nil {
				t.Fatalf("seq %d step %d: %v", seq, step, err)
			}
			want := m.request(now, d, copies, minCopies)
			if got != want {
				t.Fatalf("seq %d step %d: spec %+v\nrequest(%s, %d, %d) at +%v\n got  %+v\n want %+v",
					seq, step, norm, d, copies, minCopies, now.Sub(time.Unix(1_700_000_000, 0)), got, want)
			}
		}
	}
}

// copyModel keeps every hold as a list entry; counts are sums over it.
type copyModel struct {
	spec     CopySpec // normalized
	holds    []modelHold
	restored bool // a Restore may have put counts above limits
}

type modelHold struct {
	domain string
	groups []string
	n      int64
}

func (m *copyModel) sum(keep func(modelHold) bool) int64 {
	var n int64
	for _, h := range m.holds {
		if keep(h) {
			n += h.n
		}
	}
	return n
}

func (m *copyModel) groupsOf(d string) []string {
	var gs []string
	for _, g := range m.spec.Groups {
		if slices.Contains(g.Domains, d) {
			gs = append(gs, g.Name)
		}
	}
	slices.Sort(gs)
	return gs
}

func (m *copyModel) fits(d string, n int64) bool {
	limit := m.spec.DomainLimit
	if l, ok := m.spec.Domains[d]; ok {
		limit = l
	}
	ok := func(limit, held int64) bool { return limit == Unlimited || held+n <= limit }
	if !ok(limit, m.sum(func(h modelHold) bool { return h.domain == d })) ||
		!ok(m.spec.GlobalLimit, m.sum(func(modelHold) bool { return true })) {
		return false
	}
	for _, g := range m.groupsOf(d) {
		for _, cfg := range m.spec.Groups {
			if cfg.Name == g && !ok(cfg.Limit, m.sum(func(h modelHold) bool { return slices.Contains(h.groups, g) })) {
				return false
			}
		}
	}
	return true
}

func (m *copyModel) reserve(d string, copies, minCopies int64) int64 {
	for n := copies; n >= minCopies; n-- {
		if m.fits(d, n) {
			m.holds = append(m.holds, modelHold{d, m.groupsOf(d), n})
			return n
		}
	}
	return 0
}

func (m *copyModel) release(d string, gs []string, n int64) bool {
	same := func(h modelHold) bool { return h.domain == d && slices.Equal(h.groups, gs) }
	if m.sum(same) < n {
		return false
	}
	for i := range m.holds {
		if same(m.holds[i]) {
			take := min(n, m.holds[i].n)
			m.holds[i].n -= take
			n -= take
		}
	}
	return true
}

func randomCopySpec(rng *rand.Rand) CopySpec {
	s := CopySpec{DomainLimit: randomLimit(rng, 8), GlobalLimit: randomLimit(rng, 15)}
	if rng.IntN(2) == 0 {
		s.Domains = map[string]int64{"b": randomLimit(rng, 10)}
	}
	for i := range rng.IntN(4) {
		g := Group{Name: fmt.Sprintf("g%d", i), Limit: randomLimit(rng, 10)}
		for _, d := range []string{"a", "b", "c"} {
			if rng.IntN(2) == 0 {
				g.Domains = append(g.Domains, d)
			}
		}
		s.Groups = append(s.Groups, g)
	}
	return s
}

// TestCopiesMatchesModel drives Copies and the model with random
// reserve, release, restore and reload sequences and checks the answers
// and the invariants: counts never negative, never above a limit except
// after a Restore or a lowered limit, and every count the sum of its
// keys.
func TestCopiesMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 14))
	for seq := range 300 {
		spec := randomCopySpec(rng)
		c, err := NewCopies(spec)
		if err != nil {
			t.Fatal(err)
		}
		norm, _ := spec.Normalize()
		m := &copyModel{spec: norm}
		for step := range 80 {
			d := []string{"a", "b", "c"}[rng.IntN(3)]
			copies := 1 + rng.Int64N(5)
			where := fmt.Sprintf("seq %d step %d", seq, step)
			switch op := rng.IntN(10); {
			case op < 5:
				minCopies := rng.Int64N(copies + 1)
				res, err := c.Reserve(d, copies, minCopies)
				if err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if want := m.reserve(d, copies, minCopies); res.Granted != want {
					t.Fatalf("%s: reserve(%s, %d, %d) granted %d, model %d (spec %+v)", where, d, copies, minCopies, res.Granted, want, m.spec)
				}
				if !slices.Equal(res.GroupNames(), m.groupsOf(d)) {
					t.Fatalf("%s: groups %v, model %v", where, res.GroupNames(), m.groupsOf(d))
				}
			case op < 8:
				var gs []string // release under the groups of an existing hold, or random ones
				if len(m.holds) > 0 && rng.IntN(4) > 0 {
					h := m.holds[rng.IntN(len(m.holds))]
					d, gs = h.domain, h.groups
				} else if rng.IntN(2) == 0 {
					gs = []string{"g0"}
				}
				err := c.Release(d, gs, copies)
				if ok := m.release(d, gs, copies); ok != (err == nil) {
					t.Fatalf("%s: release(%s, %v, %d) = %v, model ok=%v", where, d, gs, copies, err, ok)
				}
				if err != nil && !errors.Is(err, ErrNotHeld) {
					t.Fatalf("%s: release error %v does not wrap ErrNotHeld", where, err)
				}
			case op < 9:
				gs := m.groupsOf(d)
				if err := c.Restore(d, gs, copies); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				m.holds = append(m.holds, modelHold{d, gs, copies})
				m.restored = true
			default:
				spec := randomCopySpec(rng)
				if err := c.SetSpec(spec); err != nil {
					t.Fatal(err)
				}
				m.spec, _ = spec.Normalize()
				m.restored = true // limits may have dropped below the holds
			}
			checkCopyInvariants(t, where, c, m)
		}
	}
}

func checkCopyInvariants(t *testing.T, where string, c *Copies, m *copyModel) {
	t.Helper()
	all := m.sum(func(modelHold) bool { return true })
	if c.Global() != all || c.Global() < 0 {
		t.Fatalf("%s: global %d, model %d", where, c.Global(), all)
	}
	if !m.restored && m.spec.GlobalLimit != Unlimited && all > m.spec.GlobalLimit {
		t.Fatalf("%s: global %d above its limit %d", where, all, m.spec.GlobalLimit)
	}
	var keys, domains int64
	for _, d := range []string{"a", "b", "c"} {
		want := m.sum(func(h modelHold) bool { return h.domain == d })
		if got := c.Holds(d); got != want || got < 0 {
			t.Fatalf("%s: holds(%s) %d, model %d", where, d, got, want)
		}
		domains += want
		if lim := c.DomainLimit(d); !m.restored && lim != Unlimited && want > lim {
			t.Fatalf("%s: domain %s holds %d above its limit %d", where, d, want, lim)
		}
	}
	held := keyHolds(c)
	for k, n := range held {
		keys += n
		gs := []string{}
		if k.groups != "" {
			gs = strings.Split(k.groups, ",")
		}
		want := m.sum(func(h modelHold) bool {
			return h.domain == k.domain && slices.Equal(h.groups, gs) || h.domain == k.domain && len(gs) == 0 && len(h.groups) == 0
		})
		if n != want || want <= 0 {
			t.Fatalf("%s: key %+v holds %d, model %d", where, k, n, want)
		}
		if got := c.KeyHolds(k.domain, gs); got != n {
			t.Fatalf("%s: KeyHolds(%s, %v) = %d, want %d", where, k.domain, gs, got, n)
		}
	}
	if keys != c.Global() || domains != c.Global() {
		t.Fatalf("%s: keys sum to %d, domains to %d, global %d", where, keys, domains, c.Global())
	}
	for i := range 4 {
		g := fmt.Sprintf("g%d", i)
		want := m.sum(func(h modelHold) bool { return slices.Contains(h.groups, g) })
		if got := c.GroupHolds(g); got != want || got < 0 {
			t.Fatalf("%s: group %s holds %d, model %d", where, g, got, want)
		}
	}
}

// holdKey identifies the copies a domain holds in one set of groups
// (comma-joined sorted names).
type holdKey struct {
	domain, groups string
}

// keyHolds returns the copies c holds by domain and groups, checking that
// each domain's counts add up.
func keyHolds(c *Copies) map[holdKey]int64 {
	out := make(map[holdKey]int64)
	for d, dh := range c.domains {
		if dh.current != 0 {
			out[holdKey{d, c.joinedOf[d]}] = dh.current
		}
		sum := dh.current
		for joined, n := range dh.others {
			if joined == c.joinedOf[d] {
				panic("domain " + d + " holds copies under its current groups in others")
			}
			out[holdKey{d, joined}] = n
			sum += n
		}
		if sum != dh.holds || dh.holds <= 0 {
			panic(fmt.Sprintf("domain %s holds %d in all, %d by groups", d, dh.holds, sum))
		}
	}
	return out
}
