package domainlimit

import (
	"fmt"
	"slices"
	"strings"
)

// CopyResult is the answer to a reserve (paper 3.1, reserve).
type CopyResult struct {
	// Granted is n, the copies reserved; 0 on rejection.
	Granted int64
	// DomainLimit is the domain's effective limit, GlobalLimit the
	// resource's.
	DomainLimit, GlobalLimit int64
	// DomainHolds and GlobalHolds are the holds after this reservation.
	DomainHolds, GlobalHolds int64
	// Groups lists each group the domain belongs to now, sorted by name:
	// release and transfer name them.
	Groups []GroupHolds
}

// GroupHolds is a group's limit and holds (after the reservation).
type GroupHolds struct {
	Name         string
	Limit, Holds int64
}

// GroupNames returns the names of res.Groups, as release takes them.
func (res CopyResult) GroupNames() []string {
	out := make([]string, len(res.Groups))
	for i, g := range res.Groups {
		out[i] = g.Name
	}
	return out
}

// domainHolds is what one domain holds: in all, under the groups the
// domain has now, and under each other set of groups (comma-joined
// sorted names: names cannot contain a comma) that holds reserved before
// a reload changed the domain's groups keep. One map lookup finds all of
// a domain's counts: a reserve and a release each look the domain up
// once (they looked up four maps, one of them keyed by two strings).
type domainHolds struct {
	holds int64
	// current is the copies held under the domain's groups now (those of
	// groupsOf, none if it has none).
	current int64
	// others is the copies held under other sets of groups, by joined
	// names; nil when there are none.
	others map[string]int64
}

// Copies is the copy log of one copy-limited resource: holds per domain
// and groups they were reserved under, per group and globally. It is not
// safe for concurrent use.
type Copies struct {
	spec       CopySpec
	groupLimit map[string]int64
	groupsOf   map[string][]string // domain → sorted names of its groups
	joinedOf   map[string]string   // domain → its groups, comma-joined

	// domains has an entry for each domain holding copies.
	domains map[string]*domainHolds
	groups  map[string]int64
	global  int64
}

// NewCopies returns an empty copy log for spec, which is normalized
// first.
func NewCopies(spec CopySpec) (*Copies, error) {
	c := &Copies{domains: make(map[string]*domainHolds), groups: make(map[string]int64)}
	if err := c.SetSpec(spec); err != nil {
		return nil, err
	}
	return c, nil
}

// SetSpec replaces the configuration (hot reload). Holds are kept: a
// domain, group or the resource over its new limit just cannot reserve
// more until releases bring it under. Holds keep the groups they were
// reserved under, so releases name those. On error nothing changes.
func (c *Copies) SetSpec(spec CopySpec) error {
	n, err := spec.Normalize()
	if err != nil {
		return err
	}
	limits := make(map[string]int64, len(n.Groups))
	of := make(map[string][]string)
	for _, g := range n.Groups {
		limits[g.Name] = g.Limit
		for _, d := range g.Domains {
			of[d] = append(of[d], g.Name)
		}
	}
	joined := make(map[string]string, len(of))
	for d, gs := range of {
		slices.Sort(gs)
		joined[d] = strings.Join(gs, ",")
	}
	// A domain whose groups change keeps its holds under the groups they
	// were reserved under.
	for d, dh := range c.domains {
		if was, now := c.joinedOf[d], joined[d]; was != now {
			dh.set(was, dh.current)
			dh.current = dh.others[now]
			dh.set(now, 0)
		}
	}
	c.spec, c.groupLimit, c.groupsOf, c.joinedOf = n, limits, of, joined
	return nil
}

// set records that dh holds n copies under the other set of groups
// joined.
func (dh *domainHolds) set(joined string, n int64) {
	switch {
	case n != 0:
		if dh.others == nil {
			dh.others = make(map[string]int64)
		}
		dh.others[joined] = n
	case dh.others != nil:
		if delete(dh.others, joined); len(dh.others) == 0 {
			dh.others = nil
		}
	}
}

// groupsOfDomain returns domain's groups, sorted, and their joined names.
func (c *Copies) groupsOfDomain(domain string) ([]string, string) {
	if len(c.groupsOf) == 0 { // no groups: no hashing
		return nil, ""
	}
	return c.groupsOf[domain], c.joinedOf[domain]
}

// Spec returns the normalized configuration in use.
func (c *Copies) Spec() CopySpec { return c.spec }

// DomainLimit returns domain's effective limit.
func (c *Copies) DomainLimit(domain string) int64 {
	if len(c.spec.Domains) == 0 { // no overrides: no hashing
		return c.spec.DomainLimit
	}
	if l, ok := c.spec.Domains[domain]; ok {
		return l
	}
	return c.spec.DomainLimit
}

// Reserve holds the largest n in [minCopies, copies] copies for domain
// that the domain limit, the global limit and the limit of every group
// the domain belongs to allow, or nothing (paper 3.1, reserve). A
// domain in several groups takes one copy from each group's pool per
// copy. A minCopies of 0 decides as 1 does (see Rate.Request). Bad
// input is an error wrapping ErrInvalid and changes nothing.
func (c *Copies) Reserve(domain string, copies, minCopies int64) (CopyResult, error) {
	if err := ValidateDomain(domain); err != nil {
		return CopyResult{}, err
	}
	minCopies, err := checkCopies(copies, minCopies)
	if err != nil {
		return CopyResult{}, err
	}
	limit := c.DomainLimit(domain)
	gs, _ := c.groupsOfDomain(domain)
	dh := c.domains[domain]
	var held int64
	if dh != nil {
		held = dh.holds
	}
	n := min(copies, room(limit, held), room(c.spec.GlobalLimit, c.global))
	for _, g := range gs {
		n = min(n, room(c.groupLimit[g], c.groups[g]))
	}
	res := CopyResult{DomainLimit: limit, GlobalLimit: c.spec.GlobalLimit, DomainHolds: held}
	if n >= minCopies {
		if dh == nil {
			dh = &domainHolds{}
			c.domains[domain] = dh
		}
		dh.current += n
		c.add(dh, gs, n)
		res.Granted, res.DomainHolds = n, dh.holds
	}
	res.GlobalHolds = c.global
	if len(gs) > 0 {
		res.Groups = make([]GroupHolds, len(gs))
		for i, g := range gs {
			res.Groups[i] = GroupHolds{Name: g, Limit: c.groupLimit[g], Holds: c.groups[g]}
		}
	}
	return res, nil
}

// add records n more copies of dh, a domain's holds, under groups gs
// (the caller counted them under their groups in dh).
func (c *Copies) add(dh *domainHolds, gs []string, n int64) {
	dh.holds += n
	for _, g := range gs {
		c.groups[g] += n
	}
	c.global += n
}

// key validates a release or restore and returns its sorted groups, and
// their joined names unless they are the domain's groups now (current).
func (c *Copies) key(domain string, groups []string, copies int64) (gs []string, joined string, current bool, err error) {
	if err := ValidateDomain(domain); err != nil {
		return nil, "", false, err
	}
	if copies < 1 || copies > MaxLimit {
		return nil, "", false, invalidf("copies %d is outside [1, %d]", copies, MaxLimit)
	}
	gs = groups
	if !slices.IsSorted(gs) {
		gs = slices.Sorted(slices.Values(groups))
	}
	for i, g := range gs {
		if err := ValidateName("group", g); err != nil {
			return nil, "", false, err
		}
		if i > 0 && gs[i-1] == g {
			return nil, "", false, invalidf("group %q is named twice", g)
		}
	}
	if cur, _ := c.groupsOfDomain(domain); slices.Equal(gs, cur) {
		return gs, "", true, nil // the common case, without allocating
	}
	return gs, strings.Join(gs, ","), false, nil
}

// keyHeld returns the copies dh holds under groups joined, or current.
func (dh *domainHolds) keyHeld(joined string, current bool) int64 {
	switch {
	case dh == nil:
		return 0
	case current:
		return dh.current
	}
	return dh.others[joined]
}

// Release gives back copies held by domain under groups (the groups its
// reserve returned; any order). Partial releases are fine; releasing
// more than the (domain, groups) key holds is an error wrapping
// ErrNotHeld, and bad input one wrapping ErrInvalid; neither changes
// anything.
func (c *Copies) Release(domain string, groups []string, copies int64) error {
	gs, joined, current, err := c.key(domain, groups, copies)
	if err != nil {
		return err
	}
	dh := c.domains[domain]
	held := dh.keyHeld(joined, current)
	if held < copies {
		return fmt.Errorf("%w: release of %d copies: domain %q holds %d under groups [%s]", ErrNotHeld, copies, domain, held, strings.Join(gs, ","))
	}
	if current {
		dh.current -= copies
	} else {
		dh.set(joined, held-copies)
	}
	if dh.holds -= copies; dh.holds == 0 {
		delete(c.domains, domain) // maps do not grow with every domain ever seen
	}
	for _, g := range gs {
		decrement(c.groups, g, copies)
	}
	c.global -= copies
	return nil
}

// decrement takes n from m[name], dropping the entry at 0 so that maps
// do not grow with every domain ever seen.
func decrement(m map[string]int64, name string, n int64) {
	if v := m[name] - n; v != 0 {
		m[name] = v
	} else {
		delete(m, name)
	}
}

// Restore adds a hold without any limit check: a new leader rebuilding
// what its predecessor recorded (staged transfers) must count it, even
// above a limit lowered meanwhile; one adopting a hold a client lists
// checks Room first. Input is validated as for Release.
func (c *Copies) Restore(domain string, groups []string, copies int64) error {
	gs, joined, current, err := c.key(domain, groups, copies)
	if err != nil {
		return err
	}
	dh := c.domains[domain]
	if dh == nil {
		dh = &domainHolds{}
		c.domains[domain] = dh
	}
	if current {
		dh.current += copies
	} else {
		dh.set(joined, dh.others[joined]+copies)
	}
	c.add(dh, gs, copies)
	return nil
}

// Room returns how many more copies domain could take under groups (a
// hold's groups, which may differ from the domain's groups now; groups
// no longer configured have no limit) within the domain, global and
// group limits in force. A new leader adopts a hold it learns from a
// refresh only if it fits.
func (c *Copies) Room(domain string, groups []string) int64 {
	n := min(room(c.DomainLimit(domain), c.Holds(domain)), room(c.spec.GlobalLimit, c.global))
	for _, g := range groups {
		if l, ok := c.groupLimit[g]; ok {
			n = min(n, room(l, c.groups[g]))
		}
	}
	return n
}

// Holds returns the copies domain holds (all groups).
func (c *Copies) Holds(domain string) int64 {
	if dh := c.domains[domain]; dh != nil {
		return dh.holds
	}
	return 0
}

// Global returns the copies held across all domains.
func (c *Copies) Global() int64 { return c.global }

// GroupHolds returns the copies held in group name's pool.
func (c *Copies) GroupHolds(name string) int64 { return c.groups[name] }

// KeyHolds returns the copies domain holds under groups (any order); 0
// for bad input.
func (c *Copies) KeyHolds(domain string, groups []string) int64 {
	_, joined, current, err := c.key(domain, groups, 1)
	if err != nil {
		return 0
	}
	return c.domains[domain].keyHeld(joined, current)
}
