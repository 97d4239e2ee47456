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
type Holders struct {
	window  time.Duration
	clients map[string]*clientHolds
	seen    map[string]int64            // client → last seen (ns)
	domains map[string]map[string]int64 // domain → client → last seen
	groups  map[string]map[string]int64 // group → client → last seen
}

// clientHolds is what one client holds: in all, by domain, by group.
type clientHolds struct {
	total   int64
	domains map[string]int64
	groups  map[string]int64
}

// NewHolders returns an empty Holders whose clients count as seen for
// window after they were last seen (a server uses its hold ttl: every
// holder refreshes within it).
func NewHolders(window time.Duration) *Holders {
	return &Holders{window: window, clients: map[string]*clientHolds{}, seen: map[string]int64{},
		domains: map[string]map[string]int64{}, groups: map[string]map[string]int64{}}
}

// Add records n copies that client holds of domain under groups (a
// hold's groups) from now on, and sees client there.
func (h *Holders) Add(client, domain string, groups []string, n int64, now int64) {
	h.Touch(client, domain, groups, now)
	if n <= 0 {
		return
	}
	c := h.clients[client]
	if c == nil {
		c = &clientHolds{domains: map[string]int64{}, groups: map[string]int64{}}
		h.clients[client] = c
	}
	c.total += n
	c.domains[domain] += n
	for _, g := range groups {
		c.groups[g] += n
	}
}

// Remove records that client no longer holds n of its copies of domain
// under groups. Removing more than client holds there is an error
// wrapping ErrNotHeld and changes nothing.
func (h *Holders) Remove(client, domain string, groups []string, n int64) error {
	c := h.clients[client]
	ok := c != nil && n >= 0 && c.domains[domain] >= n
	for _, g := range groups {
		ok = ok && c.groups[g] >= n
	}
	if !ok {
		return fmt.Errorf("%w: client %q does not hold %d copies of domain %q under groups %v", ErrNotHeld, client, n, domain, groups)
	}
	c.total -= n
	decrement(c.domains, domain, n)
	for _, g := range groups {
		decrement(c.groups, g, n)
	}
	if c.total == 0 {
		delete(h.clients, client)
	}
	return nil
}

// Touch sees client now under the resource's limit, domain's and those
// of groups.
func (h *Holders) Touch(client, domain string, groups []string, now int64) {
	h.seen[client] = now
	see(h.domains, domain, client, now)
	for _, g := range groups {
		see(h.groups, g, client, now)
	}
}

func see(m map[string]map[string]int64, scope, client string, now int64) {
	s := m[scope]
	if s == nil {
		s = map[string]int64{}
		m[scope] = s
	}
	s[client] = now
}

// Sweep forgets the clients not seen within the window before now under
// a limit, unless they hold copies under it. Until a sweep they still
// count, which only makes shares smaller.
func (h *Holders) Sweep(now int64) {
	stale := func(client string, at int64, holds func(*clientHolds) bool) bool {
		if now-at < int64(h.window) {
			return false
		}
		c := h.clients[client]
		return c == nil || !holds(c)
	}
	for client, at := range h.seen {
		if stale(client, at, func(c *clientHolds) bool { return c.total > 0 }) {
			delete(h.seen, client)
		}
	}
	sweepScopes(h.domains, func(scope, client string, at int64) bool {
		return stale(client, at, func(c *clientHolds) bool { return c.domains[scope] > 0 })
	})
	sweepScopes(h.groups, func(scope, client string, at int64) bool {
		return stale(client, at, func(c *clientHolds) bool { return c.groups[scope] > 0 })
	})
}

func sweepScopes(m map[string]map[string]int64, stale func(scope, client string, at int64) bool) {
	for scope, s := range m {
		for client, at := range s {
			if stale(scope, client, at) {
				delete(s, client)
			}
		}
		if len(s) == 0 {
			delete(m, scope)
		}
	}
}

// Empty reports whether no client is seen or holds copies: forgetting h
// then loses nothing.
func (h *Holders) Empty() bool { return len(h.seen) == 0 && len(h.clients) == 0 }

// Share sees client now under the limits of domain, and returns its
// share of c's limits (c is the resource's copy log, whose holds h
// follows by client).
func (h *Holders) Share(c *Copies, client, domain string, now int64) Share {
	h.Touch(client, domain, c.groupsOf[domain], now)
	return h.shareOf(c, client, domain)
}

// ShareSeen is Share for a client that Add or Touch saw under the limits
// of domain (with the domain's groups) at this moment: it does not see it
// again (a reserve's Add and its reply's share each saw it, three map
// writes a reserve spent twice).
func (h *Holders) ShareSeen(c *Copies, client, domain string) Share {
	return h.shareOf(c, client, domain)
}

// shareOf is client's share of c's limits for domain, with the clients
// seen as they are.
func (h *Holders) shareOf(c *Copies, client, domain string) Share {
	mine := h.clients[client]
	if mine == nil {
		mine = &clientHolds{}
	}
	out := Share{
		Global: part(c.spec.GlobalLimit, c.global, mine.total, len(h.seen)),
		Domain: part(c.DomainLimit(domain), c.domains[domain], mine.domains[domain], len(h.domains[domain])),
	}
	if gs := c.groupsOf[domain]; len(gs) > 0 {
		out.Groups = make([]GroupShare, len(gs))
		for i, g := range gs {
			out.Groups[i] = GroupShare{Name: g, Share: part(c.groupLimit[g], c.groups[g], mine.groups[g], len(h.groups[g]))}
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
