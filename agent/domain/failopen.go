package domain

import (
	"fmt"
	"slices"
	"time"

	"github.com/allot/allot/internal/domainwire"
)

// Failing open within bounds: what the client may grant itself when no
// domain service answers, and what it remembers of the service's replies
// to justify it (docs/domains-client.md, "Failing open").

// FailMode is a namespace's fail mode, as the domain service tells its
// clients: what a client does when no service answers.
type FailMode string

// Fail modes (the namespace's "fail" field, docs/domains.md).
const (
	// FailShare ("share"): Reserve grants a local hold only within the
	// client's share (Share); Request grants its min copies, as FailOpen
	// does.
	FailShare FailMode = domainwire.FailShare
	// FailOpen ("open"): Request and Reserve grant their min copies.
	FailOpen FailMode = domainwire.FailOpen
	// FailClosed ("closed"): Request and Reserve grant nothing and return
	// an error wrapping ErrUnavailable.
	FailClosed FailMode = domainwire.FailClosed
)

// Share is what the client may have of a copy-limited resource for one
// domain, its holds and its local holds together, while no domain
// service answers, as the service last told it: its copies under each
// limit and an even part of the room left among the clients seen there
// lately. Limits not configured are -1.
type Share struct {
	Resource string
	Domain   string
	// Fail is the namespace's fail mode.
	Fail FailMode
	// DomainShare bounds the client's copies of the domain, GlobalShare
	// its copies of the resource (all domains), Groups its copies in the
	// pools of the domain's groups.
	DomainShare int64
	GlobalShare int64
	Groups      []GroupShare
	// At is when the client sent the call whose answer told it the
	// domain's share (the global and group shares may be newer).
	At time.Time
}

// GroupShare is the client's share of one domain group's pool.
type GroupShare struct {
	Name  string
	Share int64
}

// shareRec is a domain's share as a reply told it.
type shareRec struct {
	limit  int64
	groups []string
	at     time.Time
}

// scopeShare is the share of a limit several domains have in common (the
// resource's, a group's): the newest reply's.
type scopeShare struct {
	limit int64
	at    time.Time
}

// failState is what a resource's entry remembers to fail open within
// bounds. Guarded by Client.mu.
type failState struct {
	shares map[string]*shareRec   // by domain
	global scopeShare             // the resource's limit
	groups map[string]*scopeShare // by group
	// pruneAt is the number of domains' shares at which stale ones are
	// dropped.
	pruneAt int
	// failingSince is when the service stopped answering about the
	// resource (zero while it answers): a share older than one hold ttl
	// then is stale.
	failingSince time.Time
	// locals are the open local holds (degraded and shadow), counted
	// with the holds against the shares.
	locals map[*Hold]struct{}
}

// maxModes bounds the namespaces whose fail mode the client remembers.
// Only a configured namespace's replies tell one, so it is not reached
// but by a deployment of that many namespaces; beyond it their calls fail
// as for a namespace never heard of.
const maxModes = 4096

// learnMode records the fail mode of namespace ns a reply told, if it
// told one: it is the namespace's, so it holds for all its resources.
// Called with c.mu held.
func (c *Client) learnMode(ns, mode string) {
	if _, known := c.modes[ns]; mode != "" && (known || len(c.modes) < maxModes) {
		c.modes[ns] = FailMode(mode)
	}
}

// learnTTL records the hold ttl a reply told, for a resource whose holds
// do not set it. Called with c.mu held.
func (r *domainRes) learnTTL(ttlMillis int64) {
	if ttlMillis > 0 && len(r.holds) == 0 && !r.shared {
		r.ttl = fromMillis(ttlMillis, domainwire.MaxHoldTTL)
	}
}

// learnShare records the share of domain a reply told, asked at at.
// Called with c.mu held.
func (r *domainRes) learnShare(domain string, s *domainwire.Share, at time.Time) {
	if s == nil || r.shared {
		return
	}
	f := &r.fail
	if old := f.shares[domain]; old != nil && old.at.After(at) {
		return
	}
	if f.shares == nil {
		f.shares, f.groups = map[string]*shareRec{}, map[string]*scopeShare{}
	}
	rec := &shareRec{limit: s.Domain, at: at}
	for _, g := range s.Groups {
		rec.groups = append(rec.groups, g.Name)
		if old := f.groups[g.Name]; old == nil || !old.at.After(at) {
			f.groups[g.Name] = &scopeShare{g.Share, at}
		}
	}
	if !f.global.at.After(at) {
		f.global = scopeShare{s.Global, at}
	}
	f.shares[domain] = rec
	if len(f.shares) >= f.pruneAt {
		r.pruneShares(at)
	}
}

// pruneShares drops the shares a gap starting now could not use (older
// than one hold ttl), so that the domains of old calls do not pile up.
func (r *domainRes) pruneShares(now time.Time) {
	f := &r.fail
	ttl := r.holdTTL()
	for d, rec := range f.shares {
		if now.Sub(rec.at) >= ttl {
			delete(f.shares, d)
		}
	}
	for g, s := range f.groups {
		if now.Sub(s.at) >= ttl {
			delete(f.groups, g)
		}
	}
	f.pruneAt = max(64, 2*len(f.shares))
}

// holdTTL is the hold ttl the service last said, or the default.
func (r *domainRes) holdTTL() time.Duration {
	if r.ttl > 0 {
		return r.ttl
	}
	return defaultHoldTTL
}

// addLocal counts a new local hold. Called with c.mu held.
func (r *domainRes) addLocal(h *Hold) {
	if r.fail.locals == nil {
		r.fail.locals = map[*Hold]struct{}{}
	}
	r.fail.locals[h] = struct{}{}
	h.entry = r
	r.st.LocalHolds++
	r.st.LocalCopies += h.copies
}

// failMode returns the fail mode the client goes by for namespace ns,
// and why it fails closed: the namespace's, or for a namespace it was
// never told about FailOpen with WithFailOpenUnseen and FailClosed
// without. Called with c.mu held.
func (c *Client) failMode(ns string) (FailMode, string) {
	switch mode := c.modes[ns]; {
	case mode == FailClosed:
		return FailClosed, "its namespace fails closed"
	case mode == FailOpen || mode == FailShare:
		return mode, ""
	case c.o.failOpenUnseen:
		return FailOpen, ""
	}
	return FailClosed, fmt.Sprintf("no domain service has answered about namespace %q yet, so its fail mode is unknown (domain.WithFailOpenUnseen)", ns)
}

// mayDegrade decides whether the client may grant itself n copies of
// domain of r's resource while no service answers, and returns the
// groups the copies count in (those of the domain's share), or why not.
// Called with c.mu held.
func (c *Client) mayDegrade(ns string, r *domainRes, domain string, n int64) (groups []string, why string) {
	mode, why := c.failMode(ns)
	if mode != FailShare {
		return nil, why
	}
	f := &r.fail
	rec := f.shares[domain]
	switch {
	case rec == nil:
		return nil, fmt.Sprintf("no share of domain %q is known: the service has not answered about it lately", domain)
	case f.failingSince.Sub(rec.at) >= r.holdTTL():
		return nil, fmt.Sprintf("the share of domain %q is older than one hold ttl (%v)", domain, r.holdTTL())
	}
	dom, all, inGroups := r.own(domain, rec.groups)
	over := func(what string, have, share int64) string {
		if share >= 0 && have+n > share {
			return fmt.Sprintf("%d more copies would make %d of %s, above the client's share of %d", n, have+n, what, share)
		}
		return ""
	}
	if why := over(fmt.Sprintf("domain %q", domain), dom, rec.limit); why != "" {
		return nil, why
	}
	if why := over("the resource", all, f.global.limit); why != "" {
		return nil, why
	}
	for i, g := range rec.groups {
		s := f.groups[g]
		if s == nil {
			return nil, fmt.Sprintf("no share of group %q is known", g)
		}
		if why := over(fmt.Sprintf("group %q", g), inGroups[i], s.limit); why != "" {
			return nil, why
		}
	}
	return rec.groups, ""
}

// own sums the copies the client has of r (holds the service knows and
// local holds): of domain, in all, and in each of groups. Called with
// c.mu held.
func (r *domainRes) own(domain string, groups []string) (dom, all int64, inGroups []int64) {
	inGroups = make([]int64, len(groups))
	count := func(h *Hold) {
		n := h.Copies()
		all += n
		if h.domain == domain {
			dom += n
		}
		for i, g := range groups {
			if slices.Contains(h.groups, g) {
				inGroups[i] += n
			}
		}
	}
	for _, h := range r.holds {
		count(h)
	}
	for h := range r.fail.locals {
		count(h)
	}
	return dom, all, inGroups
}

// Share returns what the client may have of resource ("namespace:
// resource") for domain while no domain service answers, as the service
// last told it, and whether it told it at all. The client learns it from
// every reserve, seize and refresh reply; a holder's is renewed with
// every refresh. In fail mode FailShare, Reserve grants a local hold only
// if the client's copies with it stay within every share, and only with
// a share told within one hold ttl before the service stopped answering.
func (c *Client) Share(resource, domain string) (Share, bool) {
	ns, res, err := domainwire.SplitResource(resource)
	if err != nil {
		return Share{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.res[ns+":"+res]
	if r == nil || r.fail.shares[domain] == nil {
		return Share{}, false
	}
	f := &r.fail
	rec := f.shares[domain]
	out := Share{Resource: r.name, Domain: domain, Fail: c.modes[ns], DomainShare: rec.limit, GlobalShare: f.global.limit, At: rec.at}
	for _, g := range rec.groups {
		if s := f.groups[g]; s != nil {
			out.Groups = append(out.Groups, GroupShare{Name: g, Share: s.limit})
		}
	}
	return out, true
}
