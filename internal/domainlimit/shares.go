package domainlimit

import (
	"fmt"
	"time"
)

// Shares for failing open within bounds (docs/domains-client.md, "Failing
// open"): when no domain service answers, a client of a FailShare
// namespace grants itself copies of a copy-limited resource only while
// what it has (held and granted locally) stays within its share of every
// limit. The service tells each client its share in its replies; this is
// how it works them out.

// Share is what one client may have of a copy-limited resource, held and
// granted locally together, while no domain service answers: for each
// limit that applies to a domain, the copies the client holds under it
// plus an even part of the room left, split among the clients seen
// under it within the window (Holders), the client included. Unlimited
// where the limit is.
//
// The shares of the clients seen under a limit, worked out at one
// moment, add up to at most the limit (when the copies held are within
// it): held copies are counted once, and the room once.
type Share struct {
	// Domain bounds the client's copies of the domain.
	Domain int64
	// Global bounds the client's copies of the resource, all domains.
	Global int64
	// Groups bound the client's copies in the pools of the domain's
	// groups (those a reserve of the domain takes copies from now),
	// sorted by name.
	Groups []GroupShare
}

// GroupShare is a client's share of one domain group's pool.
type GroupShare struct {
	Name  string
	Share int64
}

// Holders follows, for one copy-limited resource, the copies each client
// holds and which clients were seen lately (they asked for copies,
// refreshed holds or hold copies) under each limit: the resource's, each
// domain's and each group's. A client is seen under a limit for window
// after it was last seen there, and as long as it holds copies under it,
// so that a client that stops holding copies still counts while the share
// it was told may still be in use. It is not safe for concurrent use.
//
// What a client holds and when it was seen under a limit sit together,
// found by one lookup of the client and one of the limit: a reserve's
// Add looked up five maps, and an expiry's Remove four.
type Holders struct {
	window time.Duration
	// clients has the clients seen (not swept yet): len(clients) are the
	// clients seen under the resource's limit.
	clients map[string]*holder
	// domains and groups count the clients seen under each domain's and
	// group's limit: the holders with a scope for it.
	domains map[string]int
	groups  map[string]int
}

// holder is one client: when it was last seen, what it holds in all, and
// its scopes, the domains and groups it was seen under.
type holder struct {
	seen, total int64
	domains     map[string]*scope
	groups      map[string]*scope
}

// scope is a client under one domain's or group's limit: when it was last
// seen there, and the copies it holds there.
type scope struct {
	seen, held int64
}

// NewHolders returns an empty Holders whose clients count as seen for
// window after they were last seen (a server uses its hold ttl: every
// holder refreshes within it).
func NewHolders(window time.Duration) *Holders {
	return &Holders{window: window, clients: map[string]*holder{}, domains: map[string]int{}, groups: map[string]int{}}
}

// Add records n copies that client holds of domain under groups (a
// hold's groups) from now on, and sees client there.
func (h *Holders) Add(client, domain string, groups []string, n int64, now int64) {
	h.add(client, domain, groups, n, now)
}

// add is Add, returning the client and its scope of domain.
func (h *Holders) add(client, domain string, groups []string, n int64, now int64) (*holder, *scope) {
	c, d := h.touch(client, domain, groups, now)
	if n <= 0 {
		return c, d
	}
	c.total += n
	d.held += n
	for _, g := range groups {
		c.groups[g].held += n // touch made it
	}
	return c, d
}

// Remove records that client no longer holds n of its copies of domain
// under groups. Removing more than client holds there is an error
// wrapping ErrNotHeld and changes nothing.
func (h *Holders) Remove(client, domain string, groups []string, n int64) error {
	c := h.clients[client]
	ok := c != nil && c.total > 0 && n >= 0 && heldIn(c.domains, domain) >= n
	for _, g := range groups {
		ok = ok && heldIn(c.groups, g) >= n
	}
	if !ok {
		return fmt.Errorf("%w: client %q does not hold %d copies of domain %q under groups %v", ErrNotHeld, client, n, domain, groups)
	}
	if n == 0 {
		return nil // the client may have no scope there
	}
	// Scopes stay (the client is still seen there) until a sweep.
	c.total -= n
	c.domains[domain].held -= n
	for _, g := range groups {
		c.groups[g].held -= n
	}
	return nil
}

// heldIn is the copies held in scopes[name].
func heldIn(scopes map[string]*scope, name string) int64 {
	if s := scopes[name]; s != nil {
		return s.held
	}
	return 0
}

// Touch sees client now under the resource's limit, domain's and those
// of groups.
func (h *Holders) Touch(client, domain string, groups []string, now int64) {
	h.touch(client, domain, groups, now)
}

// touch is Touch, returning the client and its scope of domain.
func (h *Holders) touch(client, domain string, groups []string, now int64) (*holder, *scope) {
	c := h.clients[client]
	if c == nil {
		c = &holder{domains: map[string]*scope{}}
		h.clients[client] = c
	}
	c.seen = now
	d := see(&c.domains, h.domains, domain, now)
	for _, g := range groups {
		see(&c.groups, h.groups, g, now)
	}
	return c, d
}

// see sees a client now in its scope name of scopes, making it (and the
// map) if new and counting the client in seen.
func see(scopes *map[string]*scope, seen map[string]int, name string, now int64) *scope {
	s := (*scopes)[name]
	if s == nil {
		if *scopes == nil {
			*scopes = map[string]*scope{}
		}
		s = &scope{}
		(*scopes)[name] = s
		seen[name]++
	}
	s.seen = now
	return s
}

// Sweep forgets the clients not seen within the window before now under
// a limit, unless they hold copies under it. Until a sweep they still
// count, which only makes shares smaller.
func (h *Holders) Sweep(now int64) {
	stale := func(seen, held int64) bool { return now-seen >= int64(h.window) && held == 0 }
	for client, c := range h.clients {
		sweepScopes(c.domains, h.domains, stale)
		sweepScopes(c.groups, h.groups, stale)
		// Every Touch sees the client under the resource's limit too, so
		// a stale client holding nothing has no scope left, unless the
		// clock went back: it then stays while seen under a scope.
		if stale(c.seen, c.total) && len(c.domains) == 0 && len(c.groups) == 0 {
			delete(h.clients, client)
		}
	}
}

// sweepScopes drops the stale scopes, uncounting their client in seen.
func sweepScopes(scopes map[string]*scope, seen map[string]int, stale func(seen, held int64) bool) {
	for name, s := range scopes {
		if stale(s.seen, s.held) {
			delete(scopes, name)
			if seen[name]--; seen[name] <= 0 {
				delete(seen, name)
			}
		}
	}
}

// Empty reports whether no client is seen or holds copies: forgetting h
// then loses nothing.
func (h *Holders) Empty() bool { return len(h.clients) == 0 }

// Share sees client now under the limits of domain, and returns its
// share of c's limits (c is the resource's copy log, whose holds h
// follows by client).
func (h *Holders) Share(c *Copies, client, domain string, now int64) Share {
	gs, _ := c.groupsOfDomain(domain)
	mine, d := h.touch(client, domain, gs, now)
	return h.share(c, mine, d.held, domain)
}

// AddShare is Add of a grant of domain's copies under its groups (those
// c gave it), then Share: it sees the client once and works its share
// out from what it found there (a reserve's Add and its reply's share
// looked the client up twice).
func (h *Holders) AddShare(c *Copies, client, domain string, groups []string, n, now int64) Share {
	mine, d := h.add(client, domain, groups, n, now)
	return h.share(c, mine, d.held, domain)
}

// share is the share of c's limits for domain of mine, a client holding
// held copies of domain, with the clients seen as they are.
func (h *Holders) share(c *Copies, mine *holder, held int64, domain string) Share {
	out := Share{
		Global: part(c.spec.GlobalLimit, c.global, mine.total, len(h.clients)),
		Domain: part(c.DomainLimit(domain), c.Holds(domain), held, h.domains[domain]),
	}
	if gs, _ := c.groupsOfDomain(domain); len(gs) > 0 {
		out.Groups = make([]GroupShare, len(gs))
		for i, g := range gs {
			out.Groups[i] = GroupShare{Name: g, Share: part(c.groupLimit[g], c.groups[g], heldIn(mine.groups, g), h.groups[g])}
		}
	}
	return out
}

// part is a client's share of a limit under which all clients hold held
// copies and it holds mine, split among k clients: its own copies and a
// k-th of the room left, rounded down.
func part(limit, held, mine int64, k int) int64 {
	if limit == Unlimited {
		return Unlimited
	}
	return mine + room(limit, held)/int64(max(k, 1))
}
