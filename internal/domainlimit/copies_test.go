package domainlimit

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func mustCopies(t *testing.T, spec CopySpec) *Copies {
	t.Helper()
	c, err := NewCopies(spec)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCopiesGroups: a domain in several groups takes one copy from each
// group's pool; a reserve needs room in the domain, the global pool and
// every group (paper 2.2, "Bulkheads").
func TestCopiesGroups(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: 5, GlobalLimit: 100, Domains: map[string]int64{"big": 20},
		Groups: []Group{{Name: "free", Limit: 6, Domains: []string{"a", "b"}}, {Name: "eu", Limit: 4, Domains: []string{"b", "big"}}}})
	res, err := c.Reserve("b", 10, 1)
	if err != nil {
		t.Fatal(err)
	}
	// b: domain limit 5, free 6, eu 4 → 4.
	want := CopyResult{Granted: 4, DomainLimit: 5, GlobalLimit: 100, DomainHolds: 4, GlobalHolds: 4,
		Groups: []GroupHolds{{"eu", 4, 4}, {"free", 6, 4}}}
	if !equalCopyResult(res, want) {
		t.Fatalf("reserve b: %+v, want %+v", res, want)
	}
	// eu is full: big (limit 20) gets nothing; a (free only) gets 2.
	if res, _ := c.Reserve("big", 1, 1); res.Granted != 0 || res.DomainLimit != 20 {
		t.Fatalf("reserve big with eu full: %+v", res)
	}
	if res, _ := c.Reserve("a", 5, 2); res.Granted != 2 || res.Groups[0].Holds != 6 {
		t.Fatalf("reserve a: %+v", res)
	}
	// Partial releases under b's groups, in any order.
	if err := c.Release("b", []string{"free", "eu"}, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Release("b", []string{"eu", "free"}, 2); err != nil {
		t.Fatal(err)
	}
	if c.Holds("b") != 1 || c.GroupHolds("eu") != 1 || c.GroupHolds("free") != 3 || c.Global() != 3 {
		t.Fatalf("after releases: b %d eu %d free %d global %d", c.Holds("b"), c.GroupHolds("eu"), c.GroupHolds("free"), c.Global())
	}
	// Over-release, or under the wrong groups: ErrNotHeld, nothing changes.
	for _, gs := range [][]string{{"eu", "free"}, {"eu"}, nil} {
		if err := c.Release("b", gs, 2); !errors.Is(err, ErrNotHeld) {
			t.Fatalf("Release(b, %v, 2) = %v, want ErrNotHeld", gs, err)
		}
	}
	if c.Holds("b") != 1 || c.Global() != 3 {
		t.Fatal("a refused release changed the counts")
	}
}

func equalCopyResult(a, b CopyResult) bool {
	return a.Granted == b.Granted && a.DomainLimit == b.DomainLimit && a.GlobalLimit == b.GlobalLimit &&
		a.DomainHolds == b.DomainHolds && a.GlobalHolds == b.GlobalHolds && slices.Equal(a.Groups, b.Groups)
}

// TestCopiesGroupChangeWhileHeld: a domain moved out of a group keeps
// its old holds under the old groups (release names them); new holds
// take the new groups (paper 3.1, release).
func TestCopiesGroupChangeWhileHeld(t *testing.T) {
	spec := CopySpec{DomainLimit: Unlimited, GlobalLimit: Unlimited, Groups: []Group{{Name: "probation", Limit: 2, Domains: []string{"new"}}}}
	c := mustCopies(t, spec)
	if res, _ := c.Reserve("new", 2, 2); res.Granted != 2 {
		t.Fatalf("reserve: %+v", res)
	}
	spec.Groups[0].Domains = nil // trusted now
	if err := c.SetSpec(spec); err != nil {
		t.Fatal(err)
	}
	res, _ := c.Reserve("new", 3, 3)
	if res.Granted != 3 || len(res.Groups) != 0 || res.DomainHolds != 5 {
		t.Fatalf("reserve after leaving the group: %+v", res)
	}
	if err := c.Release("new", nil, 4); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release of 4 without groups: %v", err)
	}
	if err := c.Release("new", []string{"probation"}, 2); err != nil || c.GroupHolds("probation") != 0 {
		t.Fatalf("release under the old group: %v, group holds %d", err, c.GroupHolds("probation"))
	}
}

// TestCopiesReloadBelowHolds: a domain over its new, lower limit keeps
// its holds and cannot reserve more; Restore counts holds past limits.
func TestCopiesReloadBelowHolds(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: 10, GlobalLimit: Unlimited})
	c.Reserve("a", 8, 8)
	if err := c.SetSpec(CopySpec{DomainLimit: 5, GlobalLimit: Unlimited}); err != nil {
		t.Fatal(err)
	}
	if res, _ := c.Reserve("a", 1, 1); res.Granted != 0 || res.DomainHolds != 8 {
		t.Fatalf("reserve over the new limit: %+v", res)
	}
	if err := c.Restore("a", nil, 3); err != nil || c.Holds("a") != 11 {
		t.Fatalf("Restore: %v, holds %d", err, c.Holds("a"))
	}
	if err := c.Release("a", nil, 7); err != nil {
		t.Fatal(err)
	}
	if res, _ := c.Reserve("a", 5, 1); res.Granted != 1 {
		t.Fatalf("reserve once back under the limit: %+v", res)
	}
}

func TestCopiesBadInput(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: 5, GlobalLimit: Unlimited, Groups: []Group{{Name: "g", Limit: 3, Domains: []string{"a"}}}})
	c.Reserve("a", 2, 2)
	for _, r := range []struct {
		domain      string
		copies, min int64
	}{{"", 1, 1}, {"a b", 1, 1}, {"a", 0, 1}, {"a", 1, 2}, {"a", -1, -1}, {"a", MaxLimit + 1, 1}, {"a", 2, -1}, {"a", 0, 0}} {
		if res, err := c.Reserve(r.domain, r.copies, r.min); !errors.Is(err, ErrInvalid) || res.Granted != 0 {
			t.Errorf("Reserve(%q, %d, %d) = %+v, %v; want ErrInvalid", r.domain, r.copies, r.min, res, err)
		}
	}
	for _, r := range []struct {
		domain string
		groups []string
		copies int64
	}{{"", []string{"g"}, 1}, {"a", []string{"g", "g"}, 1}, {"a", []string{"g.x"}, 1}, {"a", []string{""}, 1}, {"a", []string{"g"}, 0}, {"a", []string{"g"}, -2}} {
		if err := c.Release(r.domain, r.groups, r.copies); !errors.Is(err, ErrInvalid) {
			t.Errorf("Release(%q, %q, %d) = %v; want ErrInvalid", r.domain, r.groups, r.copies, err)
		}
		if err := c.Restore(r.domain, r.groups, r.copies); !errors.Is(err, ErrInvalid) {
			t.Errorf("Restore(%q, %q, %d) = %v; want ErrInvalid", r.domain, r.groups, r.copies, err)
		}
	}
	if c.Holds("a") != 2 || c.GroupHolds("g") != 2 || c.Global() != 2 {
		t.Fatal("bad input changed the counts")
	}
	if err := c.SetSpec(CopySpec{DomainLimit: -3}); !errors.Is(err, ErrInvalid) || c.Spec().DomainLimit != 5 {
		t.Fatalf("SetSpec(bad) = %v, spec now %+v", err, c.Spec())
	}
}

// TestMinCopiesZero: a min_copies of 0 is the paper's range [0, copies]:
// the largest n that fits is granted (not all or nothing), and when none
// fits the answer is 0 and nothing changes, as with min_copies 1.
func TestMinCopiesZero(t *testing.T) {
	c := mustCopies(t, CopySpec{DomainLimit: Unlimited, GlobalLimit: 10})
	if res, _ := c.Reserve("a", 7, 7); res.Granted != 7 {
		t.Fatalf("reserve 7 of 10: %+v", res)
	}
	for _, s := range []struct{ copies, min, want, global int64 }{
		{5, 5, 0, 7}, // all or nothing: refused
		{5, 0, 3, 10},
		{5, 0, 0, 10}, // nothing left: 0, as min_copies 1 would answer
		{5, 1, 0, 10},
	} {
		res, err := c.Reserve("b", s.copies, s.min)
		if err != nil || res.Granted != s.want || res.GlobalHolds != s.global {
			t.Fatalf("Reserve(b, %d, %d) = %+v, %v; want %d granted, %d held", s.copies, s.min, res, err, s.want, s.global)
		}
	}
	r, _ := NewRate(RateSpec{Hard: 10, Global: Unlimited, Tiers: []Tier{{Limit: Unlimited, Window: time.Second, Active: time.Hour}}})
	if res, _ := r.Request(epoch.UnixNano(), "a", 7, 7); res.Granted != 7 {
		t.Fatalf("request 7 of 10: %+v", res)
	}
	for _, s := range []struct{ copies, min, want, hits int64 }{{5, 5, 0, 7}, {5, 0, 3, 10}, {5, 0, 0, 10}} {
		res, err := r.Request(epoch.UnixNano(), "a", s.copies, s.min)
		if err != nil || res.Granted != s.want || res.DomainLastSecond != s.hits {
			t.Fatalf("Request(a, %d, %d) = %+v, %v; want %d granted, %d hits", s.copies, s.min, res, err, s.want, s.hits)
		}
	}
}

// FuzzOperations: no input panics; bad input is ErrInvalid (or
// ErrNotHeld for a release) and changes nothing; a grant is in
// [minCopies, copies].
func FuzzOperations(f *testing.F) {
	f.Add("alice", int64(3), int64(1), "free", int64(2))
	f.Add("", int64(0), int64(-1), "", int64(-5))
	f.Add("a b", int64(1e13), int64(1), "g,h", int64(1))
	f.Fuzz(func(t *testing.T, domain string, copies, minCopies int64, group string, release int64) {
		r, _ := NewRate(RateSpec{Hard: 10, Global: Unlimited, Tiers: figureTiers})
		res, err := r.Request(epoch.UnixNano(), domain, copies, minCopies)
		if err != nil {
			if !errors.Is(err, ErrInvalid) || res != (RateResult{}) || r.Domains() != 0 {
				t.Fatalf("Request error %v, result %+v, %d domains", err, res, r.Domains())
			}
		} else if res.Granted != 0 && (res.Granted < minCopies || res.Granted > copies) {
			t.Fatalf("granted %d outside [%d, %d]", res.Granted, minCopies, copies)
		}
		c, _ := NewCopies(CopySpec{DomainLimit: 5, GlobalLimit: 8, Groups: []Group{{Name: "free", Limit: 3, Domains: []string{"alice"}}}})
		cres, err := c.Reserve(domain, copies, minCopies)
		if err != nil && (!errors.Is(err, ErrInvalid) || c.Global() != 0) {
			t.Fatalf("Reserve error %v, global %d", err, c.Global())
		}
		if err == nil && cres.Granted != 0 && (cres.Granted < minCopies || cres.Granted > min(copies, 5)) {
			t.Fatalf("reserved %d outside [%d, %d]", cres.Granted, minCopies, copies)
		}
		before := c.Global()
		var groups []string
		if group != "" {
			groups = strings.Split(group, ",")
		}
		if err := c.Release(domain, groups, release); err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotHeld) || c.Global() != before {
				t.Fatalf("Release error %v, global %d (was %d)", err, c.Global(), before)
			}
		} else if c.Global() != before-release || c.Global() < 0 {
			t.Fatalf("released %d: global %d (was %d)", release, c.Global(), before)
		}
	})
}

// TestCopiesRoom: Room under a domain's own groups is what a reserve of
// as many copies as possible would get; groups no longer configured have
// no limit.
func TestCopiesRoom(t *testing.T) {
	spec := CopySpec{DomainLimit: 5, GlobalLimit: 9, Domains: map[string]int64{"big": 20},
		Groups: []Group{{Name: "free", Limit: 6, Domains: []string{"a", "b"}}, {Name: "eu", Limit: 4, Domains: []string{"b", "big"}}}}
	for _, steps := range [][]string{{}, {"a"}, {"b", "a"}, {"big", "b"}, {"big", "big", "a", "a"}} {
		c := mustCopies(t, spec)
		for _, d := range steps {
			if _, err := c.Reserve(d, 2, 1); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range []string{"a", "b", "big", "lone"} {
			want := c.Room(d, c.groupsOf[d])
			probe := mustCopies(t, spec)
			for _, x := range steps {
				_, _ = probe.Reserve(x, 2, 1)
			}
			res, err := probe.Reserve(d, MaxLimit, 1)
			if err != nil {
				t.Fatal(err)
			}
			if res.Granted != want {
				t.Errorf("after %v: Room(%s) = %d, a reserve gets %d", steps, d, want, res.Granted)
			}
		}
	}
	c := mustCopies(t, spec)
	if got := c.Room("lone", []string{"gone"}); got != 5 {
		t.Errorf("Room under a group no longer configured = %d, want the domain limit 5", got)
	}
	if got := mustCopies(t, CopySpec{DomainLimit: Unlimited, GlobalLimit: Unlimited}).Room("x", nil); got != Unlimited {
		t.Errorf("Room without limits = %d", got)
	}
}
