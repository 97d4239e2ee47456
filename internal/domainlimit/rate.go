package domainlimit

import "time"

// RateResult is the answer to a request (paper 3.1, request).
type RateResult struct {
	// Granted is n, the hits granted; 0 on rejection.
	Granted int64
	// HardLimit and GlobalLimit are the resource's; TierLimit is L of the
	// domain's current tier after the request (0 for tier 0).
	HardLimit, GlobalLimit, TierLimit int64
	// DomainLastSecond and GlobalLastSecond are the hits in the last
	// second, after this request.
	DomainLastSecond, GlobalLastSecond int64
	// TierHits is the hits in the current tier's window.
	TierHits int64
	// Tier is the current tier index after the request (0 = the fake
	// tier: no tier active).
	Tier int
	// Burst: the request entered at least one higher tier.
	Burst bool
	// HardLimited and GlobalLimited: the hard (global) limit alone would
	// not have allowed all the copies asked for.
	HardLimited, GlobalLimited bool
}

// tierState is the state of one burst tier of one domain.
type tierState struct {
	// activated is when the tier last entered its active period (nanoseconds);
	// meaningful only if entered.
	activated int64
	entered   bool
	hits      ring // the hits this tier accepted, in its window
}

type phase uint8

const (
	inactive phase = iota
	active
	cooldown
)

// phase is the tier's state at now: active in [a, a+T^a), cooling down
// in [a+T^a, a+T^a+T^c), inactive after.
func (s *tierState) phase(t *Tier, now int64) phase {
	if !s.entered {
		return inactive
	}
	e := now - s.activated
	switch {
	case e < int64(t.Active):
		return active
	case e < int64(t.Active)+int64(t.Cooldown):
		return cooldown
	}
	return inactive
}

// domainRate is one domain's access log for a rate-limited resource.
type domainRate struct {
	tiers  []Tier // the domain's tier configuration (shared with the spec)
	st     []tierState
	second ring // hits in the last second, for the hard limit
}

// Rate is the state of one rate-limited resource: the access log of
// each domain and the global one. It is not safe for concurrent use.
type Rate struct {
	spec    RateSpec
	domains map[string]*domainRate
	global  ring
	last    int64 // newest time seen: the clock never goes back
	scratch domainRate
}

// NewRate returns the state of a resource configured by spec, which is
// normalized first.
func NewRate(spec RateSpec) (*Rate, error) {
	r := &Rate{domains: make(map[string]*domainRate)}
	if err := r.SetSpec(spec); err != nil {
		return nil, err
	}
	return r, nil
}

// SetSpec replaces the configuration (hot reload) and keeps the hit
// history: the last-second counts, and each domain's tiers by index,
// with the hits in their windows and, if active or cooling down, their
// activation time, now judged by the new durations. A longer window does
// not bring back hits the old one had let go, nor does a longer active
// time revive an inactive tier, so the outcome does not depend on when
// idle domains were swept. Tiers beyond the new count are dropped, new
// ones start inactive. On error nothing changes.
func (r *Rate) SetSpec(spec RateSpec) error {
	n, err := spec.Normalize()
	if err != nil {
		return err
	}
	r.spec = n
	for name, d := range r.domains {
		d.expire(r.last) // under the old windows
		for i := range d.st {
			if d.st[i].phase(&d.tiers[i], r.last) == inactive {
				d.st[i].entered = false
			}
		}
		d.setTiers(r.tiersOf(name))
	}
	return nil
}

// Spec returns the normalized configuration in use.
func (r *Rate) Spec() RateSpec { return r.spec }

func (r *Rate) tiersOf(domain string) []Tier {
	if t, ok := r.spec.Domains[domain]; ok {
		return t
	}
	return r.spec.Tiers
}

func (d *domainRate) setTiers(tiers []Tier) {
	d.tiers = tiers
	if len(d.st) > len(tiers) {
		clear(d.st[len(tiers):])
		d.st = d.st[:len(tiers)]
	}
	for len(d.st) < len(tiers) {
		d.st = append(d.st, tierState{})
	}
}

// clock is now (nanoseconds), never earlier than a time seen
// before, so the windows stay in time order.
func (r *Rate) clock(now int64) int64 {
	r.last = max(r.last, now)
	return r.last
}

// expire drops the hits that left every window at now.
func (d *domainRate) expire(now int64) {
	d.second.expire(now - int64(time.Second))
	for i := range d.st {
		d.st[i].hits.expire(now - int64(d.tiers[i].Window))
	}
}

// current is the index of the highest active tier, 0 if none (the fake
// tier).
func (d *domainRate) current(now int64) int {
	for i := len(d.st) - 1; i >= 0; i-- {
		if d.st[i].phase(&d.tiers[i], now) == active {
			return i + 1
		}
	}
	return 0
}

// walk places up to want hits from the current tier cur upward and
// returns how many fit (paper 2.1, "Moving Through Tiers"): the current
// tier takes what its window has room for; when it is full the next hit
// bursts into tier cur+1. A tier in cooldown blocks the burst unless it
// is skippable; a skippable tier that is full is skipped; a
// non-skippable full tier is entered and passed through. With apply,
// the hits are recorded and entered tiers become active; last is the
// tier the last hit went to and burst whether a tier was entered.
func (d *domainRate) walk(now int64, cur int, want int64, apply bool) (placed int64, last int, burst bool) {
	last = cur
	if cur > 0 {
		s := &d.st[cur-1]
		take := min(want, room(d.tiers[cur-1].Limit, s.hits.sum))
		if apply {
			s.hits.add(now, take)
		}
		placed = take
	}
	for j := cur + 1; j <= len(d.tiers) && placed < want; j++ {
		t, s := &d.tiers[j-1], &d.st[j-1]
		free, cooling := room(t.Limit, s.hits.sum), s.phase(t, now) == cooldown
		if (cooling || free == 0) && t.Skippable {
			continue
		}
		if cooling {
			break
		}
		take := min(want-placed, free)
		if apply {
			s.entered, s.activated = true, now
			s.hits.add(now, take)
		}
		placed += take
		last, burst = j, true
	}
	return placed, last, burst
}

// Request applies the largest n in [minCopies, copies] hits for domain
// at now that the hard limit, the global limit and the domain's burst
// tiers allow, or nothing (paper 3.1, request). 0 ≤ minCopies ≤ copies
// ≤ MaxLimit; a minCopies of 0 is the paper's best effort, the largest n
// in [0, copies], and decides as 1 does (n = 0 applies nothing and is a
// rejection). A minCopies above the hard limit always fails. Bad input is an error wrapping ErrInvalid and changes nothing.
// A domain is remembered only once it is granted a hit.
func (r *Rate) Request(now int64, domain string, copies, minCopies int64) (RateResult, error) {
	if err := ValidateDomain(domain); err != nil {
		return RateResult{}, err
	}
	minCopies, err := checkCopies(copies, minCopies)
	if err != nil {
		return RateResult{}, err
	}
	t := r.clock(now)
	r.global.expire(t - int64(time.Second))
	d := r.domains[domain]
	if d == nil {
		d = &r.scratch
		d.setTiers(r.tiersOf(domain))
	}
	d.expire(t)
	cur := d.current(t)

	res := RateResult{HardLimit: r.spec.Hard, GlobalLimit: r.spec.Global}
	hard := room(r.spec.Hard, d.second.sum)
	global := room(r.spec.Global, r.global.sum)
	res.HardLimited, res.GlobalLimited = hard < copies, global < copies
	want := min(copies, hard, global)
	n := int64(0)
	if want >= minCopies {
		n, _, _ = d.walk(t, cur, want, false)
	}
	if n >= minCopies {
		if d == &r.scratch {
			d = &domainRate{}
			d.setTiers(r.scratch.tiers)
			r.domains[domain] = d
		}
		_, cur, res.Burst = d.walk(t, cur, n, true)
		d.second.add(t, n)
		r.global.add(t, n)
		res.Granted = n
	}
	res.Tier = cur
	if cur > 0 {
		res.TierLimit, res.TierHits = d.tiers[cur-1].Limit, d.st[cur-1].hits.sum
	}
	res.DomainLastSecond, res.GlobalLastSecond = d.second.sum, r.global.sum
	return res, nil
}

// Sweep forgets the domains whose windows are empty and whose tiers are
// all inactive at now (a forgotten domain is indistinguishable from a new
// one), and returns how many domains remain.
func (r *Rate) Sweep(now int64) int {
	t := r.clock(now)
	r.global.expire(t - int64(time.Second))
	for name, d := range r.domains {
		d.expire(t)
		if d.idle(t) {
			delete(r.domains, name)
		}
	}
	return len(r.domains)
}

func (d *domainRate) idle(now int64) bool {
	if d.second.size > 0 {
		return false
	}
	for i := range d.st {
		if d.st[i].hits.size > 0 || d.st[i].phase(&d.tiers[i], now) != inactive {
			return false
		}
	}
	return true
}

// Domains returns how many domains are remembered.
func (r *Rate) Domains() int { return len(r.domains) }

// TierPhase describes a domain's tier (1-based) at now without changing
// any state, for tests and diagnostics: "inactive", "active" or
// "cooldown", and the hits in its window.
func (r *Rate) TierPhase(now int64, domain string, tier int) (string, int64, error) {
	d := r.domains[domain]
	if d == nil {
		d = &r.scratch
		d.setTiers(r.tiersOf(domain))
	}
	if tier < 1 || tier > len(d.tiers) {
		return "", 0, invalidf("tier %d: domain %q has tiers 1 to %d", tier, domain, len(d.tiers))
	}
	t := max(r.last, now)
	s, cfg := &d.st[tier-1], &d.tiers[tier-1]
	return s.phase(cfg, t).String(), s.hits.since(t - int64(cfg.Window)), nil
}

func (p phase) String() string { return [...]string{"inactive", "active", "cooldown"}[p] }
