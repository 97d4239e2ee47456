// Package level keeps one resource's allocation state so that a round
// costs O(k log n) for the k claims that changed instead of O(n) for all
// of them, and gives the shares of internal/alloc.
//
// A State holds every claim of a resource, grouped as internal/alloc
// groups them: by tenant (when the tenant level is on), then by priority
// band. Each band is a B+ tree of its claims ordered by Wants/Weight,
// every internal node holding, for each child, the sums of Wants and
// Weight below it. Handing out at level L gives a claim min(Wants,
// Weight·L), which is Wants exactly for the claims ordered before L; so
// the sum handed out at a level is a prefix sum of Wants plus L times a
// suffix sum of Weight, and the water level of FAIR_SHARE is found by one
// descent of the tree, O(log n). The split of PROPORTIONAL_SHARE (claims
// wanting at most their equal share) is the same kind of descent. Tenants
// form one more such tree, ordered by what their claims want per unit of
// tenant weight. A change recomputes the sums on the path to the claim
// only; a claim's share is computed when asked for, from its band's
// level, with the formula internal/alloc uses, and levels are cached
// until the next change.
//
// Cost: Add, Set and Remove O(log n + B) where B is the number of priority
// bands of the claim's tenant; the first Target after a change O(log n +
// log T + B) (the tenant level, the band cascade and one level search),
// later ones O(1) until the next change; the running sums O(1). Within
// says, per band, above what a claim holds more than its share, for a
// caller that tracks who must give back.
//
// Why a B+ tree. A Fenwick tree over ranks cannot take keys (arbitrary
// ratios) arriving online without re-ranking, and both a Fenwick tree and
// a skip list keep sums by adding differences, so their sums carry the
// rounding of every past change; a search tree recomputes a node's sums
// from its children on every change, so a sum is always a fresh sum of
// the values now present (its error bounded by the depth, not by the
// history). Among search trees, a B+ tree with 32 entries a node is three
// to five levels deep at a million claims and a change touches about as
// many nodes, each a few consecutive cache lines; a binary tree (a treap,
// tried first) touches some sixty scattered nodes and was twice as slow
// at a million claims. Nodes live in one pointer-free slice, so the
// garbage collector has nothing to scan.
//
// Beside the shares a State keeps the sums the round needs without a
// scan: Σ Wants and Σ Weight in all and per priority band (with the
// number of clients a band stands for). Sums that are only ever added to
// and subtracted from are exact (see Sum). What claimants hold is not a
// State's business: the coordinator's ledger counts that itself, by its
// own rules of what a claimant may hold when (leases, unconfirmed
// shrinks, floors, each ending at its own time), with Sum.
//
// Results agree with internal/alloc up to rounding: the trees sum in
// another order than alloc's loops, so a share may differ in its last
// bits; where every sum is exact (FAIR_SHARE over integer wants of unit
// weight) the shares are identical. The package's tests check both, the
// first to within 1e-12 of the capacity plus the wants.
package level

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/allot/allot/proto/allotpb"
)

// Errors returned by State's methods, wrapped with the details.
var (
	// ErrUnknownHandle: the handle was never returned by Add, or its
	// claim has been removed.
	ErrUnknownHandle = errors.New("unknown handle")
	// ErrInvalid: a value is out of its range; nothing was changed.
	ErrInvalid = errors.New("invalid input")
)

// Config says how a State divides its capacity.
type Config struct {
	// Kind is the resource's algorithm. Kinds other than FAIR_SHARE,
	// PROPORTIONAL_SHARE and STATIC give every claim its wants, as
	// alloc.Run does.
	Kind allotpb.Algorithm_Kind
	// TenantWeight, if set, adds the tenant level of alloc.ByTenant: the
	// capacity is divided between the tenants of the claims first
	// (weighted max-min fairness over what each tenant's claims want),
	// then each tenant's share among its claims by Kind. It returns a
	// tenant's weight (finite, > 0); it is asked once when a tenant gets
	// its first claim. Only for FAIR_SHARE and PROPORTIONAL_SHARE.
	TenantWeight func(tenant string) float64
}

// Claim is one claimant's demand, as alloc.Demand.
type Claim struct {
	// Wants is the capacity asked for; finite and >= 0.
	Wants float64
	// Weight is the number of clients the claim stands for; finite, > 0.
	Weight float64
	// Priority is the claim's band; higher is served first.
	Priority int32
	// Tenant is the claim's tenant; ignored without Config.TenantWeight.
	Tenant string
}

// Handle names a claim in a State; the zero Handle names none.
type Handle int32

// State is the incremental allocation state of one resource: its claims,
// their shares and running sums (see the package comment). The zero value
// is not usable; make one with New. Not safe for concurrent use.
type State struct {
	kind     allotpb.Algorithm_Kind
	weigh    func(string) float64 // nil: no tenant level
	capacity float64
	// ver counts changes to claims and capacity; a cached level is valid
	// while its ver equals this.
	ver uint64

	slots []slot  // by handle; slots[0] unused
	free  []int32 // handles to reuse
	live  int

	claims    btree[float64] // a tree per band, an entry per handle
	bands     []band         // bands[0] unused
	freeBands []int32

	tenants     []tenant // tenants[0] unused; without the tenant level, all claims are in tenants[1]
	tenantOf    map[string]int32
	freeTenants []int32
	tenantTree  btree[float64] // an entry per tenant index
	tenantRoot  int32
	tenantVer   uint64 // the version tenantFits and tenantLevel are for
	tenantFits  bool
	tenantLevel float64

	sums
}

type slot struct {
	band int32 // 0: the handle is free
}

// band is one priority band of one tenant, with the cached outcome of the
// last round it was asked about.
type band struct {
	tenant   int32
	priority int32
	root     int32 // the tree of its claims in State.claims
	n        int32
	ver      uint64 // the version the fields below are for
	fits     bool   // total wants fit: everyone gets its wants
	level    float64
	// PROPORTIONAL_SHARE: the unit share and the sums of alloc's
	// proportionalBand. FAIR_SHARE: level is the water level.
	unit, leftover, excess float64
}

// tenant is a tenant's claims, its bands highest priority first.
type tenant struct {
	name   string
	weight float64
	bands  []int32
	listed bool // in the tenant tree
}

// New returns an empty State with capacity 0.
func New(cfg Config) (*State, error) {
	if cfg.TenantWeight != nil && !shared(cfg.Kind) {
		return nil, fmt.Errorf("%w: a tenant level needs FAIR_SHARE or PROPORTIONAL_SHARE: %s does not divide a shared capacity", ErrInvalid, cfg.Kind)
	}
	s := &State{kind: cfg.Kind, weigh: cfg.TenantWeight, slots: make([]slot, 1), bands: make([]band, 1),
		tenants: make([]tenant, 2), tenantOf: map[string]int32{}, ver: 1}
	s.claims.grow(1)
	s.tenantTree.grow(2)
	s.sums.byPrio = map[int32]*bandTotals{}
	if s.weigh == nil {
		s.tenants[1] = tenant{weight: 1}
	} else {
		s.freeTenants = append(s.freeTenants, 1)
	}
	return s, nil
}

func shared(k allotpb.Algorithm_Kind) bool {
	return k == allotpb.Algorithm_FAIR_SHARE || k == allotpb.Algorithm_PROPORTIONAL_SHARE
}

// Len returns the number of claims.
func (s *State) Len() int { return s.live }

// Capacity returns the capacity set last.
func (s *State) Capacity() float64 { return s.capacity }

// SetCapacity sets the capacity divided among the claims. A negative one
// counts as 0, as in internal/alloc; NaN is refused.
func (s *State) SetCapacity(c float64) error {
	if math.IsNaN(c) {
		return fmt.Errorf("%w: capacity is NaN", ErrInvalid)
	}
	if c != s.capacity {
		s.capacity = c
		s.ver++
	}
	return nil
}

func checkClaim(c Claim) error {
	if math.IsNaN(c.Wants) || math.IsInf(c.Wants, 0) || c.Wants < 0 {
		return fmt.Errorf("%w: wants %v is not a finite number >= 0", ErrInvalid, c.Wants)
	}
	if math.IsNaN(c.Weight) || math.IsInf(c.Weight, 0) || c.Weight <= 0 {
		return fmt.Errorf("%w: weight %v is not a finite number > 0", ErrInvalid, c.Weight)
	}
	return nil
}

// check validates c and, for a tenant that has no claims yet, its weight.
func (s *State) check(c Claim) error {
	if err := checkClaim(c); err != nil {
		return err
	}
	if s.weigh == nil {
		return nil
	}
	if _, ok := s.tenantOf[c.Tenant]; ok {
		return nil
	}
	if w := s.weigh(c.Tenant); math.IsNaN(w) || math.IsInf(w, 0) || w <= 0 {
		return fmt.Errorf("%w: tenant %q has weight %v, not a finite number > 0", ErrInvalid, c.Tenant, w)
	}
	return nil
}

func (s *State) known(h Handle) bool {
	return h > 0 && int(h) < len(s.slots) && s.slots[h].band != 0
}

// Touch reads what Claim and Target read of claim h first, and returns a
// figure made of it: a caller reading ahead for many claims in a row
// (their cache misses then overlap) keeps it so the reads stay. It
// changes nothing.
func (s *State) Touch(h Handle) uint64 {
	if !s.known(h) {
		return 0
	}
	return uint64(s.slots[h].band) + uint64(s.claims.vals.at(int32(h)).a)
}

// Add adds a claim and returns its handle.
func (s *State) Add(c Claim) (Handle, error) {
	if err := s.check(c); err != nil {
		return 0, err
	}
	if len(s.free) == 0 && len(s.slots) == math.MaxInt32 {
		return 0, fmt.Errorf("%w: a State holds at most %d claims", ErrInvalid, math.MaxInt32-1)
	}
	h := Handle(take(&s.slots, &s.free))
	s.claims.grow(len(s.slots))
	s.retenant(s.attach(h, c))
	s.live++
	s.ver++
	return h, nil
}

// Set changes claim h to c: any of its wants, weight, priority and tenant.
func (s *State) Set(h Handle, c Claim) error {
	if !s.known(h) {
		return fmt.Errorf("%w: %d", ErrUnknownHandle, h)
	}
	if err := s.check(c); err != nil {
		return err
	}
	if bd := &s.bands[s.slots[h].band]; bd.priority == c.Priority && (s.weigh == nil || s.tenants[bd.tenant].name == c.Tenant) {
		// The claim stays in its band: only its place in the band's tree
		// and the sums move, and of those only what changed (a claim's
		// wants change far more often than its weight).
		e := s.claims.val(int32(h))
		bd.root = s.claims.remove(bd.root, int32(h))
		s.claims.set(int32(h), c.Wants/c.Weight, c.Wants, c.Weight)
		bd.root = s.claims.insert(bd.root, int32(h))
		s.sums.change(c.Priority, e.a, c.Wants, e.b, c.Weight)
		s.retenant(bd.tenant)
		s.ver++
		return nil
	}
	from := s.detach(h)
	to := s.attach(h, c)
	s.retenant(from)
	if to != from {
		s.retenant(to)
	}
	s.ver++
	return nil
}

// Remove removes claim h.
func (s *State) Remove(h Handle) error {
	if !s.known(h) {
		return fmt.Errorf("%w: %d", ErrUnknownHandle, h)
	}
	s.retenant(s.detach(h))
	s.free = append(s.free, int32(h))
	s.live--
	s.ver++
	return nil
}

// Claim returns claim h as last added or set, and whether h names a
// claim. Its Tenant is the one given only with the tenant level (else "").
func (s *State) Claim(h Handle) (Claim, bool) {
	if !s.known(h) {
		return Claim{}, false
	}
	e, bd := s.claims.val(int32(h)), &s.bands[s.slots[h].band]
	return Claim{Wants: e.a, Weight: e.b, Priority: bd.priority, Tenant: s.tenants[bd.tenant].name}, true
}

// attach puts claim h (free) in its tenant's band and returns the tenant.
func (s *State) attach(h Handle, c Claim) int32 {
	t := s.tenantFor(c.Tenant)
	b := s.bandFor(t, c.Priority)
	s.claims.set(int32(h), c.Wants/c.Weight, c.Wants, c.Weight)
	bd := &s.bands[b]
	bd.root = s.claims.insert(bd.root, int32(h))
	bd.n++
	s.slots[h].band = b
	s.sums.add(c.Priority, c.Wants, c.Weight, 1)
	return t
}

// detach takes claim h out of its band, dropping the band if it empties,
// and returns its tenant.
func (s *State) detach(h Handle) int32 {
	b := s.slots[h].band
	bd := &s.bands[b]
	e := s.claims.val(int32(h))
	s.sums.add(bd.priority, -e.a, -e.b, -1)
	bd.root = s.claims.remove(bd.root, int32(h))
	bd.n--
	s.slots[h].band = 0
	t := bd.tenant
	if bd.n == 0 {
		tn := &s.tenants[t]
		tn.bands = slices.DeleteFunc(tn.bands, func(x int32) bool { return x == b })
		*bd = band{}
		s.freeBands = append(s.freeBands, b)
	}
	return t
}

// tenantFor returns the index of tenant name, adding it if new (its
// weight already checked).
func (s *State) tenantFor(name string) int32 {
	if s.weigh == nil {
		return 1
	}
	if t, ok := s.tenantOf[name]; ok {
		return t
	}
	t := take(&s.tenants, &s.freeTenants)
	s.tenantTree.grow(len(s.tenants))
	s.tenants[t] = tenant{name: name, weight: s.weigh(name)}
	s.tenantOf[name] = t
	return t
}

// findBand returns the position of tenant t's band of priority p in its
// list (highest priority first), or where it would go.
func (s *State) findBand(t int32, p int32) (int, bool) {
	return slices.BinarySearchFunc(s.tenants[t].bands, p, func(b int32, p int32) int {
		switch q := s.bands[b].priority; {
		case q > p:
			return -1
		case q < p:
			return 1
		}
		return 0
	})
}

// bandFor returns tenant t's band of priority p, adding it if new.
func (s *State) bandFor(t int32, p int32) int32 {
	tn := &s.tenants[t]
	k, found := s.findBand(t, p)
	if found {
		return tn.bands[k]
	}
	b := take(&s.bands, &s.freeBands)
	s.bands[b] = band{tenant: t, priority: p}
	tn.bands = slices.Insert(tn.bands, k, b)
	return b
}

// retenant puts tenant t back in the tenant tree with what its claims
// want now, or drops it if it has none left.
func (s *State) retenant(t int32) {
	if s.weigh == nil {
		return
	}
	tn := &s.tenants[t]
	if tn.listed {
		s.tenantRoot = s.tenantTree.remove(s.tenantRoot, t)
		tn.listed = false
	}
	if len(tn.bands) == 0 {
		delete(s.tenantOf, tn.name)
		*tn = tenant{}
		s.freeTenants = append(s.freeTenants, t)
		return
	}
	var wants float64
	for _, b := range tn.bands {
		a, _ := s.claims.sums(s.bands[b].root)
		wants += a
	}
	s.tenantTree.set(t, wants/tn.weight, wants, tn.weight)
	s.tenantRoot = s.tenantTree.insert(s.tenantRoot, t)
	tn.listed = true
}

// take returns an index of pool to reuse from free, or else a new one at
// its end.
func take[T any](pool *[]T, free *[]int32) int32 {
	if k := len(*free); k > 0 {
		i := (*free)[k-1]
		*free = (*free)[:k-1]
		return i
	}
	*pool = append(*pool, *new(T))
	return int32(len(*pool) - 1)
}
