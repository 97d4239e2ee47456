package ledger

import (
	"fmt"

	"github.com/allot/allot/internal/alloc"
	"github.com/allot/allot/internal/config"
)

// Tenants in the ledger (see config.TenantPolicy). Each client record
// knows its tenant ("" for plain-subject clients and child nodes' bands).
// A template's tenant policy bounds the priority a tenant's clients may
// claim, caps how many client ids a tenant keeps on a resource and on how
// many resources of the node it has clients, and, with fair, adds a level
// to allocation: the capacity is divided between tenants before their
// clients. Only the targets change: grants are still gated by what is
// free (shrinks first, ceilings, holder promises, learning), so every
// bound of the ledger holds as without tenants.

// tenantCounts is what the caps are checked against. perResource counts a
// resource's client records per tenant; the ledger's resources map counts
// the resources on which each tenant has records. Plain clients are not
// counted: the caps bound tenants only.
type tenantCounts struct {
	perResource map[string]int32
	resources   map[string]int // the ledger's, shared by its resources
	records     map[string]int // the ledger's: client records per tenant
}

// track counts a new record of tenant on r.
func (r *resource) track(tenant string) {
	if tenant == "" {
		return
	}
	if r.tenants.perResource == nil {
		r.tenants.perResource = make(map[string]int32)
	}
	if r.tenants.perResource[tenant]++; r.tenants.perResource[tenant] == 1 {
		r.tenants.resources[tenant]++
	}
	r.tenants.records[tenant]++
}

// untrack uncounts a record of tenant that r drops.
func (r *resource) untrack(tenant string) {
	if r.tenants.perResource[tenant] == 0 {
		return // plain, or never counted
	}
	if r.tenants.records[tenant]--; r.tenants.records[tenant] <= 0 {
		delete(r.tenants.records, tenant)
	}
	if r.tenants.perResource[tenant]--; r.tenants.perResource[tenant] > 0 {
		return
	}
	delete(r.tenants.perResource, tenant)
	if r.tenants.resources[tenant]--; r.tenants.resources[tenant] <= 0 {
		delete(r.tenants.resources, tenant)
	}
}

// tenantClients returns how many client records tenant has on r (nil: a
// new resource).
func (r *resource) tenantClients(tenant string) int {
	if r == nil {
		return 0
	}
	return int(r.tenants.perResource[tenant])
}

// tenantCap says why a new client of who may not be added on resource
// rid (state r, nil if new) under the node's caps per tenant and t's
// tenant caps, or "" if it may. addRes counts the resources the request
// already adds for the tenant and is raised when rid would be one more;
// addClients counts the client records it adds.
func (l *Ledger) tenantCap(t *config.Template, r *resource, rid string, who Claimant, addRes *int, addClients int) string {
	if !who.Tenanted() {
		return ""
	}
	n := r.tenantClients(who.Tenant)
	// The node's caps per tenant, whatever the template: one tenant
	// cannot fill the node's resource or client-record limits and lock
	// every other tenant out of new resources.
	if have := l.tenantRecs[who.Tenant] + addClients; have >= l.cfg.TenantMaxClients {
		return fmt.Sprintf("tenant %q has %d client records on this node and the limit per tenant is %d (--tenant-max-clients); a record counts until its floor ends, or until its client releases",
			who.Tenant, have, l.cfg.TenantMaxClients)
	}
	if n == 0 {
		if have := l.tenantRes[who.Tenant] + *addRes; have >= l.cfg.TenantMaxResources {
			return fmt.Sprintf("tenant %q has clients on %d resources of this node and the limit per tenant is %d (--tenant-max-resources); %q would be one more",
				who.Tenant, have, l.cfg.TenantMaxResources, rid)
		}
	}
	p := t.Tenants
	if p == nil {
		if n == 0 {
			*addRes++
		}
		return ""
	}
	if p.MaxClients > 0 && n >= p.MaxClients {
		return fmt.Sprintf("tenant %q has %d client ids on resource %q and the limit is %d (tenants.max_clients of template %q); a client id counts until a lease length after it was last seen, or until it releases",
			who.Tenant, n, rid, p.MaxClients, t.Name)
	}
	if n > 0 || p.MaxResources == 0 {
		return ""
	}
	if have := l.tenantRes[who.Tenant] + *addRes; have >= p.MaxResources {
		return fmt.Sprintf("tenant %q has clients on %d resources of this node and the limit is %d (tenants.max_resources of template %q); %q would be one more",
			who.Tenant, have, p.MaxResources, t.Name, rid)
	}
	*addRes++
	return ""
}

// tenantScratch holds the buffers of the tenant level, reused across
// rounds.
type tenantScratch struct {
	index  map[string]int32
	of     []int32
	shares []alloc.Tenant
}

// targets runs the resource's algorithm over its demands at capacity:
// with the template's tenant fairness level, between tenants first.
func (r *resource) targets(capacity float64, p *roundParams) {
	t := r.tmpl
	if t.Tenants == nil || !t.Tenants.Fair || !r.shared() {
		alloc.Run(t.Algorithm, capacity, r.demands, p.scratch)
		return
	}
	ts := p.tenants
	if ts.index == nil {
		ts.index = make(map[string]int32)
	}
	clear(ts.index)
	ts.of, ts.shares = ts.of[:0], ts.shares[:0]
	for i := range r.clients {
		name := r.clients[i].tenant
		k, ok := ts.index[name]
		if !ok {
			k = int32(len(ts.shares))
			ts.index[name] = k
			ts.shares = append(ts.shares, alloc.Tenant{Weight: t.Tenants.Weight(name)})
		}
		ts.of = append(ts.of, k)
	}
	alloc.ByTenant(t.Algorithm, capacity, r.demands, ts.of, ts.shares, p.scratch)
}

// priority is the band a request of who for t's resource is served at:
// what it asks for, capped at the template's max_priority and the bound
// of who's tenant (counted).
func (l *Ledger) priority(t *config.Template, who Claimant, asked int32) int32 {
	bound, bounded := t.MaxPriority, t.HasMaxPriority
	if t.Tenants != nil {
		if b, ok := t.Tenants.PriorityBound(who.Tenant); ok && (!bounded || b < bound) {
			bound, bounded = b, true
		}
	}
	if bounded && asked > bound {
		l.stats.PriorityCapped++
		return bound
	}
	return asked
}
