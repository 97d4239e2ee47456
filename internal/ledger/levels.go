package ledger

import (
	"maps"
	"math"

	"github.com/allot/allot/internal/alloc/level"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Shares. Each resource keeps its clients' demands in a level.State,
// which gives internal/alloc's targets (the template's algorithm, its
// priority bands and, with tenants.fair, the level between tenants) at
// O(log n) per change instead of a run over every client each round:
// recount passes every change of a client's demand on, and a round only
// sets the capacity and asks for the targets of its own clients. A
// client that did not ask keeps its lease; it learns its new share at its
// next request, as before. What clients may hold is counted by the
// ledger itself (sums.go), not by the State: its rules (leases that
// count until confirmed, floors, each ending at its own time plus the
// clock skew) are the ledger's.

// levelConfig is how template t's resources divide their capacity.
func levelConfig(t *config.Template) level.Config {
	cfg := level.Config{Kind: t.Algorithm}
	if p := t.Tenants; p != nil && p.Fair && sharedKind(t.Algorithm) {
		cfg.TenantWeight = p.Weight
	}
	return cfg
}

func sharedKind(k allotpb.Algorithm_Kind) bool {
	return k == allotpb.Algorithm_FAIR_SHARE || k == allotpb.Algorithm_PROPORTIONAL_SHARE
}

// sameLevel reports whether templates a and b divide alike (algorithm,
// tenant level and tenant weights), so a State built for a serves b.
func sameLevel(a, b *config.Template) bool {
	ca, cb := levelConfig(a), levelConfig(b)
	if ca.Kind != cb.Kind || (ca.TenantWeight == nil) != (cb.TenantWeight == nil) {
		return false
	}
	return ca.TenantWeight == nil || maps.Equal(a.Tenants.Weights, b.Tenants.Weights)
}

// buildLevel makes r's State anew for its template, with every client:
// O(n log n), when a template change divides differently.
func (r *resource) buildLevel() {
	// levelConfig sets a tenant level only for the share algorithms, the
	// one thing New refuses.
	old := r.lv
	r.lv, _ = level.New(levelConfig(r.tmpl))
	for i := range r.clients.len() {
		c := r.clients.at(i)
		prio := priorityIn(old, c.h)
		c.h = 0
		r.syncClaim(int32(i), prio)
	}
}

// setTemplate changes r's template, rebuilding its State if the new one
// divides differently.
func (r *resource) setTemplate(t *config.Template, gen uint64) {
	old := r.tmpl
	r.tmpl, r.gen = t, gen
	if !sameLevel(old, t) {
		r.buildLevel()
	}
}

// demandOf is a request's wants and weight as a State takes them: wants
// finite and >= 0 (at most wire.MaxWants, as validated requests are), a
// weight > 0 (a band's is at least one client).
func demandOf(wants, weight float64) (float64, float64) {
	if !(wants >= 0) {
		wants = 0
	}
	if !(weight > 0) || math.IsInf(weight, 1) {
		weight = 1
	}
	return min(wants, wire.MaxWants), weight
}

// setDemand is the one place client i's demand changes: its wants,
// weight and band, passed on to the State if they changed (a tenant never
// changes: it is part of the record's key).
func (r *resource) setDemand(i int32, wants, weight float64, prio int32) {
	c := r.clients.at(i)
	if c.h != 0 && wants == c.wants && weight == c.weight && prio == r.priority(c) {
		return
	}
	c.wants, c.weight = wants, weight
	r.syncClaim(i, prio)
}

// priority is client c's priority band, which the State keeps (0 for a
// claim it refused; see syncClaim).
func (r *resource) priority(c *client) int32 { return priorityIn(r.lv, c.h) }

// priorityIn is the band of claim h in s (0 if s does not hold it).
func priorityIn(s *level.State, h level.Handle) int32 {
	if s == nil {
		return 0
	}
	cl, _ := s.Claim(h)
	return cl.Priority
}

// syncClaim passes client i's demand, in band prio, on to the State.
func (r *resource) syncClaim(i int32, prio int32) {
	c := r.clients.at(i)
	want := level.Claim{Wants: c.wants, Weight: c.weight, Priority: prio, Tenant: c.tenant()}
	if c.h == 0 {
		// Refused only for input demandOf rules out, or a tenant weight
		// the configuration validates: the client then gets nothing
		// (target), and the next change tries again.
		c.h, _ = r.lv.Add(want)
		return
	}
	_ = r.lv.Set(c.h, want)
}

// targets sets the capacity the algorithm divides this round.
func (r *resource) targets(capacity float64) {
	if math.IsNaN(capacity) {
		capacity = 0
	}
	_ = r.lv.SetCapacity(capacity) // NaN, the only refusal, is ruled out
}

// target is client i's share at the capacity targets set.
func (r *resource) target(i int32) float64 {
	t, err := r.lv.Target(r.clients.at(i).h)
	if err != nil {
		return 0 // not in the State (see syncClaim): nothing
	}
	return t
}
