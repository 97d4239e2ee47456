package domainlimit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestShare: each limit's share is the client's own copies under it and
// an even part of the room left, among the clients seen under it, the
// asker included; an unlimited limit is an unlimited share.
func TestShare(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: Unlimited, GlobalLimit: 10, Domains: map[string]int64{"a": 4},
		Groups: []Group{{Name: "free", Limit: 6, Domains: []string{"a", "b"}}}})
	h := NewHolders(time.Second)
	hold := func(client, domain string, n int64) {
		t.Helper()
		res, err := c.Reserve(domain, n, n)
		if err != nil || res.Granted != n {
			t.Fatalf("reserve %d of %s: %+v, %v", n, domain, res, err)
		}
		h.Add(client, domain, res.GroupNames(), n, epoch.UnixNano())
	}
	hold("A", "a", 2)
	hold("B", "b", 1)
	hold("B", "z", 1) // in no group
	for _, c2 := range []struct {
		client, domain string
		want           Share
	}{
		// Global: 4 held, 6 left among A and B. Domain a: A alone, 2 of 4
		// left. Group free: 3 held, 3 left among A and B.
		{"A", "a", Share{Global: 2 + 3, Domain: 2 + 2, Groups: []GroupShare{{"free", 2 + 1}}}},
		{"B", "z", Share{Global: 2 + 3, Domain: 1 + 9}}, // the domain limit is the global one
		// C is new: it counts itself everywhere it asks (a third of the
		// 6 left globally, half of a's 2, a third of free's 3).
		{"C", "a", Share{Global: 0 + 2, Domain: 0 + 1, Groups: []GroupShare{{"free", 0 + 1}}}},
		// A's share shrinks now that C is seen too.
		{"A", "a", Share{Global: 2 + 2, Domain: 2 + 1, Groups: []GroupShare{{"free", 2 + 1}}}},
	} {
		if got := h.Share(c, c2.client, c2.domain, epoch.UnixNano()); !reflect.DeepEqual(got, c2.want) {
			t.Errorf("share of %s for %s = %+v, want %+v", c2.client, c2.domain, got, c2.want)
		}
	}
	// A limit below what is held leaves no room: the share is what the
	// client holds.
	if err := c.SetSpec(CopySpec{DomainLimit: Unlimited, GlobalLimit: 3}); err != nil {
		t.Fatal(err)
	}
	if got := h.Share(c, "A", "a", epoch.UnixNano()); got.Global != 2 || got.Domain != 2 || got.Groups != nil {
		t.Errorf("share above the limit = %+v, want what A holds", got)
	}
	// Permissive: unlimited.
	if err := c.SetSpec(PermissiveCopies()); err != nil {
		t.Fatal(err)
	}
	if got := h.Share(c, "A", "a", epoch.UnixNano()); got.Global != Unlimited || got.Domain != Unlimited {
		t.Errorf("permissive share = %+v", got)
	}
}

// TestHoldersWindow: a client that stops holding copies still counts for
// the window after it was last seen, and is forgotten by the next sweep
// after that; a client that holds copies is never forgotten.
func TestHoldersWindow(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: Unlimited, GlobalLimit: 9})
	h := NewHolders(time.Second)
	h.Add("A", "a", nil, 3, epoch.UnixNano())
	if _, err := c.Reserve("a", 3, 3); err != nil {
		t.Fatal(err)
	}
	if got := h.Share(c, "B", "b", epoch.UnixNano()).Global; got != 6/2 {
		t.Fatalf("B's share = %d, want half the room", got)
	}
	if err := h.Remove("A", "a", nil, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Release("a", nil, 3); err != nil {
		t.Fatal(err)
	}
	h.Sweep(epoch.Add(999 * time.Millisecond).UnixNano())
	if got := h.Share(c, "B", "b", epoch.Add(999*time.Millisecond).UnixNano()).Global; got != 9/2 {
		t.Fatalf("B's share while A still counts = %d, want %d", got, 9/2)
	}
	h.Sweep(epoch.Add(time.Second).UnixNano())
	if got := h.Share(c, "B", "b", epoch.Add(time.Second).UnixNano()).Global; got != 9 {
		t.Fatalf("B's share once A is forgotten = %d, want 9", got)
	}
	// B holds: it stays seen long after the window.
	h.Add("B", "b", nil, 1, epoch.Add(time.Second).UnixNano())
	h.Sweep(epoch.Add(time.Hour).UnixNano())
	if _, ok := h.clients["B"].domains["b"]; !ok || h.Empty() {
		t.Fatal("a holder was forgotten")
	}
	if err := h.Remove("B", "b", nil, 1); err != nil {
		t.Fatal(err)
	}
	h.Sweep(epoch.Add(time.Hour).UnixNano())
	if !h.Empty() {
		t.Fatalf("holders not empty after the last one left: %+v", h)
	}
}

// TestHoldersRemoveNotHeld: removing more than a client holds is an
// error and changes nothing.
func TestHoldersRemoveNotHeld(t *testing.T) {
	h := NewHolders(time.Second)
	h.Add("A", "a", []string{"g"}, 2, epoch.UnixNano())
	for _, c := range []struct {
		client, domain string
		groups         []string
		n              int64
	}{{"B", "a", nil, 1}, {"A", "b", nil, 1}, {"A", "a", []string{"g"}, 3}, {"A", "a", []string{"g", "h"}, 1}, {"A", "a", nil, -1}} {
		if err := h.Remove(c.client, c.domain, c.groups, c.n); !errors.Is(err, ErrNotHeld) {
			t.Errorf("Remove(%+v) = %v, want ErrNotHeld", c, err)
		}
	}
	if a := h.clients["A"]; a.total != 2 || a.domains["a"].held != 2 || a.groups["g"].held != 2 {
		t.Fatalf("a refused removal changed the counts: %+v", a)
	}
}

// shareHold is a hold of the reference model: copies a client holds, or
// staged (client "") by a transfer.
type shareHold struct {
	client, domain string
	groups         []string
	copies         int64
}

// TestSharesAddUp drives Copies and Holders with random reserves,
// releases, transfers, refreshes, reloads and time, checking Holders'
// counts against a list of holds, that every holder is seen, and the
// property shares exist for: under each limit, the shares of the clients
// seen there add up to at most the limit whenever the copies held are
// within it.
func TestSharesAddUp(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 14))
	const window = time.Second
	clients, domains := []string{"c0", "c1", "c2", "c3"}, []string{"a", "b", "c"}
	for seq := range 300 {
		c, err := NewCopies(randomCopySpec(rng))
		if err != nil {
			t.Fatal(err)
		}
		h := NewHolders(window)
		var holds []shareHold
		now := epoch
		for step := range 60 {
			where := fmt.Sprintf("seq %d step %d", seq, step)
			client, d := clients[rng.IntN(len(clients))], domains[rng.IntN(len(domains))]
			switch op := rng.IntN(10); {
			case op < 4: // reserve, then the reply's share
				n := 1 + rng.Int64N(4)
				res, err := c.Reserve(d, n, 1)
				if err != nil {
					t.Fatal(err)
				}
				if res.Granted > 0 {
					h.Add(client, d, res.GroupNames(), res.Granted, now.UnixNano())
					holds = append(holds, shareHold{client, d, res.GroupNames(), res.Granted})
				}
				h.Share(c, client, d, now.UnixNano())
			case op < 6 && len(holds) > 0: // release or transfer part of a hold
				i := rng.IntN(len(holds))
				x := &holds[i]
				if x.client == "" {
					break
				}
				n := 1 + rng.Int64N(x.copies)
				if err := h.Remove(x.client, x.domain, x.groups, n); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				if rng.IntN(2) == 0 {
					if err := c.Release(x.domain, x.groups, n); err != nil {
						t.Fatalf("%s: %v", where, err)
					}
				} else {
					holds = append(holds, shareHold{"", x.domain, x.groups, n}) // staged: still counted in c
					x = &holds[i]
				}
				if x.copies -= n; x.copies == 0 {
					holds = slices.Delete(holds, i, i+1)
				}
			case op < 8: // a refresh: every hold of the client, then a share per domain
				for _, x := range holds {
					if x.client == client {
						h.Touch(client, x.domain, x.groups, now.UnixNano())
						h.Share(c, client, x.domain, now.UnixNano())
					}
				}
			case op < 9:
				now = now.Add(time.Duration(rng.Int64N(int64(window))))
				h.Sweep(now.UnixNano())
			default:
				if err := c.SetSpec(randomCopySpec(rng)); err != nil {
					t.Fatal(err)
				}
			}
			checkShares(t, where, c, h, holds)
		}
	}
}

func checkShares(t *testing.T, where string, c *Copies, h *Holders, holds []shareHold) {
	t.Helper()
	sum := func(client string, in func(shareHold) bool) int64 {
		var n int64
		for _, x := range holds {
			if x.client == client && in(x) {
				n += x.copies
			}
		}
		return n
	}
	seenAll, seenDomains, seenGroups := seenUnder(t, where, h)
	for client, ch := range h.clients {
		if ch.total != sum(client, func(shareHold) bool { return true }) {
			t.Fatalf("%s: %s holds %d, model %d", where, client, ch.total, sum(client, func(shareHold) bool { return true }))
		}
	}
	for _, x := range holds {
		if x.client == "" {
			continue
		}
		ch := h.clients[x.client]
		if ch == nil || heldIn(ch.domains, x.domain) != sum(x.client, func(y shareHold) bool { return y.domain == x.domain }) {
			t.Fatalf("%s: %s's copies of %s: %+v", where, x.client, x.domain, ch)
		}
		if !seenAll[x.client] {
			t.Fatalf("%s: holder %s is not seen", where, x.client)
		}
		if !seenDomains[x.domain][x.client] {
			t.Fatalf("%s: holder %s is not seen under domain %s", where, x.client, x.domain)
		}
		for _, g := range x.groups {
			if heldIn(ch.groups, g) != sum(x.client, func(y shareHold) bool { return slices.Contains(y.groups, g) }) {
				t.Fatalf("%s: %s's copies in group %s: %d", where, x.client, g, heldIn(ch.groups, g))
			}
			if !seenGroups[g][x.client] {
				t.Fatalf("%s: holder %s is not seen under group %s", where, x.client, g)
			}
		}
	}
	// The property: under each limit, the seen clients' shares add up to
	// at most the limit when what is held is within it.
	addUp := func(what string, limit, held int64, seen map[string]bool, share func(client string) int64) {
		if limit == Unlimited || held > limit {
			return
		}
		var total int64
		for client := range seen {
			total += share(client)
		}
		if total > limit {
			t.Fatalf("%s: the shares of %s add up to %d, above its limit %d (%d held, %d clients)", where, what, total, limit, held, len(seen))
		}
	}
	addUp("the resource", c.spec.GlobalLimit, c.global, seenAll, func(client string) int64 { return h.shareOf(c, client, "a").Global })
	for d, seen := range seenDomains {
		addUp("domain "+d, c.DomainLimit(d), c.Holds(d), seen, func(client string) int64 { return h.shareOf(c, client, d).Domain })
	}
	for g, seen := range seenGroups {
		var member string // a domain in g now
		for d, gs := range c.groupsOf {
			if slices.Contains(gs, g) {
				member = d
			}
		}
		limit, ok := c.groupLimit[g]
		if member == "" || !ok {
			continue
		}
		addUp("group "+g, limit, c.groups[g], seen, func(client string) int64 {
			for _, s := range h.shareOf(c, client, member).Groups {
				if s.Name == g {
					return s.Share
				}
			}
			t.Fatalf("%s: no share of group %s for domain %s", where, g, member)
			return 0
		})
	}
}

// seenUnder returns the clients h sees under the resource's limit and by
// domain and group, checking that h counts them so.
func seenUnder(t *testing.T, where string, h *Holders) (all map[string]bool, domains, groups map[string]map[string]bool) {
	t.Helper()
	all, domains, groups = map[string]bool{}, map[string]map[string]bool{}, map[string]map[string]bool{}
	add := func(m map[string]map[string]bool, scope, client string) {
		if m[scope] == nil {
			m[scope] = map[string]bool{}
		}
		m[scope][client] = true
	}
	for client, c := range h.clients {
		all[client] = true
		for d, s := range c.domains {
			add(domains, d, client)
			if s.seen > c.seen {
				t.Fatalf("%s: %s seen under domain %s after it was seen at all", where, client, d)
			}
		}
		for g := range c.groups {
			add(groups, g, client)
		}
	}
	for _, x := range []struct {
		counts map[string]int
		sets   map[string]map[string]bool
	}{{h.domains, domains}, {h.groups, groups}} {
		if len(x.counts) != len(x.sets) {
			t.Fatalf("%s: %d scopes counted, %d seen", where, len(x.counts), len(x.sets))
		}
		for scope, set := range x.sets {
			if x.counts[scope] != len(set) {
				t.Fatalf("%s: %d clients counted under %s, %d seen", where, x.counts[scope], scope, len(set))
			}
		}
	}
	return all, domains, groups
}

// TestAddShare: AddShare tells what Add then Share would and leaves the
// holders as they would, over a random run of reserves by clients across
// domains in groups and not.
func TestAddShare(t *testing.T) {
	spec := CopySpec{DomainLimit: 5, GlobalLimit: 40, Groups: []Group{{Name: "free", Limit: 12, Domains: []string{"a", "b"}},
		{Name: "paid", Limit: 20, Domains: []string{"b", "c"}}}}
	c := mustCopies(t, spec)
	seen, again := NewHolders(time.Second), NewHolders(time.Second)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		client, domain := "c"+strconv.Itoa(rng.IntN(6)), string(rune('a'+rng.IntN(5)))
		now := epoch.UnixNano() + int64(i)*int64(time.Millisecond)
		res, err := c.Reserve(domain, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if res.Granted == 0 {
			continue
		}
		got := seen.AddShare(c, client, domain, res.GroupNames(), 1, now)
		again.Add(client, domain, res.GroupNames(), 1, now)
		if want := again.Share(c, client, domain, now); !reflect.DeepEqual(got, want) {
			t.Fatalf("reserve %d of %s by %s: AddShare %+v, Share %+v", i, domain, client, got, want)
		}
		if !reflect.DeepEqual(seen, again) {
			t.Fatalf("reserve %d of %s by %s: the holders differ after AddShare and Add, Share", i, domain, client)
		}
	}
}

// shareOf is client's share of c's limits for domain, without seeing it.
func (h *Holders) shareOf(c *Copies, client, domain string) Share {
	mine := h.clients[client]
	if mine == nil {
		mine = &holder{}
	}
	return h.share(c, mine, heldIn(mine.domains, domain), domain)
}

// TestHoldersClockBack: a client seen under a domain later than it was
// last seen at all (the clock went back) stays counted there until that
// scope is stale, and the counts stay those of the clients seen.
func TestHoldersClockBack(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: 8, GlobalLimit: Unlimited})
	h := NewHolders(time.Second)
	h.Touch("A", "a", nil, epoch.Add(10*time.Second).UnixNano())
	h.Touch("A", "b", nil, epoch.UnixNano()) // back
	h.Sweep(epoch.Add(10500 * time.Millisecond).UnixNano())
	if h.domains["a"] != 1 || h.domains["b"] != 0 || h.Empty() {
		t.Fatalf("after the sweep: %d clients under a, %d under b, empty %v", h.domains["a"], h.domains["b"], h.Empty())
	}
	if got := h.Share(c, "B", "a", epoch.Add(10500*time.Millisecond).UnixNano()).Domain; got != 8/2 {
		t.Fatalf("B's share of a beside A = %d, want %d", got, 8/2)
	}
	h.Sweep(epoch.Add(time.Minute).UnixNano())
	if !h.Empty() || len(h.domains) != 0 {
		t.Fatalf("a minute later: %d clients, %d domains counted", len(h.clients), len(h.domains))
	}
}
