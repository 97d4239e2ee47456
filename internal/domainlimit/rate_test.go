package domainlimit

import (
	"errors"
	"testing"
	"time"
)

var epoch = time.Unix(1_700_000_000, 0)

// step is one request and what it must answer; phases, if set, are the
// states of tiers 1, 2, … right after it.
type step struct {
	at           time.Duration
	domain       string
	copies, min  int64
	granted      int64
	tier         int
	tierHits     int64
	burst        bool
	hard, global bool
	phases       []string
}

func runSteps(t *testing.T, r *Rate, steps []step) {
	t.Helper()
	for i, s := range steps {
		d := s.domain
		if d == "" {
			d = "acme"
		}
		now := epoch.Add(s.at)
		res, err := r.Request(now.UnixNano(), d, s.copies, max(s.min, 1))
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Granted != s.granted || res.Tier != s.tier || res.TierHits != s.tierHits || res.Burst != s.burst ||
			res.HardLimited != s.hard || res.GlobalLimited != s.global {
			t.Fatalf("step %d (at %v, %d copies, min %d): got %+v\nwant granted %d tier %d tier hits %d burst %v hard %v global %v",
				i, s.at, s.copies, s.min, res, s.granted, s.tier, s.tierHits, s.burst, s.hard, s.global)
		}
		for j, want := range s.phases {
			got, _, err := r.TierPhase(now.UnixNano(), d, j+1)
			if err != nil || got != want {
				t.Fatalf("step %d: tier %d is %s (%v), want %s", i, j+1, got, err, want)
			}
		}
	}
}

// figureTiers: tier 1 allows 3 hits a second for 10s with no cooldown;
// tier 2 allows 5 more a second, but only for 2s, then cools down for 5s.
var figureTiers = []Tier{
	{Limit: 3, Window: time.Second, Active: 10 * time.Second},
	{Limit: 5, Window: time.Second, Active: 2 * time.Second, Cooldown: 5 * time.Second},
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestFigure2SuccessfulBurst replays the paper's Figure 2 ("Successful
// bursting", section 2.1): the domain starts in the fake tier 0, whose
// limit is 0, so its first hit bursts into tier 1. Once tier 1's window
// holds L1 hits the next hit bursts into tier 2, which starts its active
// period and becomes the current tier; when tier 2's active period ends
// it cools down and the domain falls back to tier 1, still active.
func TestFigure2SuccessfulBurst(t *testing.T) {
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: figureTiers})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		{at: 0, copies: 1, granted: 1, tier: 1, tierHits: 1, burst: true, phases: []string{"active", "inactive"}},
		{at: ms(100), copies: 1, granted: 1, tier: 1, tierHits: 2},
		{at: ms(200), copies: 1, granted: 1, tier: 1, tierHits: 3},
		// Tier 1's window is full: burst into tier 2.
		{at: ms(300), copies: 1, granted: 1, tier: 2, tierHits: 1, burst: true, phases: []string{"active", "active"}},
		{at: ms(400), copies: 4, granted: 4, tier: 2, tierHits: 5},
		// Tier 2 full and no tier 3: rejected, nothing changes.
		{at: ms(500), copies: 1, granted: 0, tier: 2, tierHits: 5},
		// Tier 2's window slides: its first hit is in the window until
		// now > t + T^w, so there is room again just after 1.3s.
		{at: ms(1300), copies: 1, granted: 0, tier: 2, tierHits: 5},
		{at: ms(1301), copies: 2, min: 1, granted: 1, tier: 2, tierHits: 5},
		// 2s after it was entered tier 2 cools down: fallback to tier 1,
		// whose window (1s) is empty by now.
		{at: ms(2300), copies: 1, granted: 1, tier: 1, tierHits: 1, phases: []string{"active", "cooldown"}},
	})
}

// TestFigure3BurstBlockedByCooldown replays Figure 3 ("Burst blocked by
// cooldown"): after the burst of Figure 2, tier 2 is in its cooldown
// period; when tier 1's window fills again the next hit cannot burst
// (tier 2 is not skippable) and is refused, until tier 2's cooldown
// ends and it is inactive again, when the same request bursts.
func TestFigure3BurstBlockedByCooldown(t *testing.T) {
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: figureTiers})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		// Figure 2 in two requests: tier 1 filled and tier 2 entered at 0.
		{at: 0, copies: 4, granted: 4, tier: 2, tierHits: 1, burst: true},
		// Tier 2 cools down at 2s (until 7s); tier 1 is current again.
		{at: ms(2000), copies: 3, granted: 3, tier: 1, tierHits: 3, phases: []string{"active", "cooldown"}},
		// Tier 1 full, tier 2 in cooldown: the burst is blocked.
		{at: ms(2100), copies: 1, granted: 0, tier: 1, tierHits: 3},
		{at: ms(6900), copies: 3, granted: 3, tier: 1, tierHits: 3},
		{at: ms(6950), copies: 1, granted: 0, tier: 1, tierHits: 3, phases: []string{"active", "cooldown"}},
		// At 7s tier 2 is inactive again: the burst succeeds.
		{at: ms(7000), copies: 1, granted: 1, tier: 2, tierHits: 1, burst: true, phases: []string{"active", "active"}},
	})
}

// TestSkippableTierInCooldownIsSkipped: with tier 2 skippable, the
// blocked burst of Figure 3 goes on to tier 3.
func TestSkippableTierInCooldownIsSkipped(t *testing.T) {
	tiers := append([]Tier(nil), figureTiers...)
	tiers[1].Skippable = true
	tiers = append(tiers, Tier{Limit: 1, Window: time.Second, Active: time.Minute, Cooldown: time.Hour})
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		{at: 0, copies: 8, granted: 8, tier: 2, tierHits: 5, burst: true},
		{at: ms(2000), copies: 3, granted: 3, tier: 1, tierHits: 3, phases: []string{"active", "cooldown", "inactive"}},
		{at: ms(2100), copies: 1, granted: 1, tier: 3, tierHits: 1, burst: true, phases: []string{"active", "cooldown", "active"}},
		// The "prison" tier: full for its minute, then an hour's cooldown.
		{at: ms(3000), copies: 1, granted: 0, tier: 3, tierHits: 1},
	})
}

// TestBulkPassesThroughTiers: one bulk request from tier 0 fills tier 1
// and tier 2 and ends in tier 3 (paper 3.1: a request "may pass
// completely through an entire burst tier").
func TestBulkPassesThroughTiers(t *testing.T) {
	tiers := append([]Tier(nil), figureTiers...)
	tiers = append(tiers, Tier{Limit: 10, Window: time.Second, Active: time.Second})
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: tiers})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		{at: 0, copies: 20, min: 20, granted: 0, tier: 0}, // 3+5+10 < 20: nothing
		{at: 0, copies: 20, min: 10, granted: 18, tier: 3, tierHits: 10, burst: true, phases: []string{"active", "active", "active"}},
	})
}

// TestBatchProcessing is the paper's "Batch Processing" pattern (2.3):
// 5000 hits in 5 minutes, then nothing for the rest of the day.
func TestBatchProcessing(t *testing.T) {
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: []Tier{
		{Limit: 5000, Window: 300 * time.Second, Active: 300 * time.Second, Cooldown: 86100 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		{at: 0, copies: 4000, granted: 4000, tier: 1, tierHits: 4000, burst: true},
		{at: time.Minute, copies: 2000, min: 1, granted: 1000, tier: 1, tierHits: 5000},
		{at: 5 * time.Minute, copies: 1, granted: 0, tier: 0},
		{at: 23 * time.Hour, copies: 1, granted: 0, tier: 0},
		{at: 24 * time.Hour, copies: 1, granted: 1, tier: 1, tierHits: 1, burst: true},
	})
}

func TestHardAndGlobalLimits(t *testing.T) {
	r, err := NewRate(RateSpec{Hard: 5, Global: 8, Tiers: []Tier{{Limit: Unlimited, Window: time.Second, Active: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		// min_copies above the hard limit always fails.
		{at: 0, copies: 6, min: 6, granted: 0, hard: true},
		{at: 0, copies: 6, min: 1, granted: 5, tier: 1, tierHits: 5, burst: true, hard: true},
		{at: ms(500), copies: 1, granted: 0, tier: 1, tierHits: 5, hard: true},
		{at: ms(500), domain: "other", copies: 5, min: 1, granted: 3, tier: 1, tierHits: 3, burst: true, hard: false, global: true},
		// Just over a second after the first hits, the hard limit has
		// room again, but the global one holds the other domain's 3
		// until 1.5s.
		{at: ms(1001), copies: 5, min: 1, granted: 5, tier: 1, tierHits: 5},
		{at: ms(1002), copies: 1, min: 1, granted: 0, tier: 1, tierHits: 5, hard: true, global: true},
	})
	res, _ := r.Request(epoch.Add(ms(1002)).UnixNano(), "third", 1, 1)
	if res.DomainLastSecond != 0 || res.GlobalLastSecond != 8 || res.HardLimit != 5 || res.GlobalLimit != 8 {
		t.Fatalf("context data %+v", res)
	}
}

func TestNoTiersIsInaccessible(t *testing.T) {
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited})
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := r.Request(epoch.UnixNano(), "x", 1, 1); res.Granted != 0 || r.Domains() != 0 {
		t.Fatalf("granted %+v with no tiers; %d domains remembered", res, r.Domains())
	}
}

func TestDomainOverrideAndReload(t *testing.T) {
	r, err := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: []Tier{{Limit: 1, Window: time.Second, Active: time.Hour}},
		Domains: map[string][]Tier{"big": {{Limit: 10, Window: time.Second, Active: time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		{at: 0, domain: "small", copies: 5, min: 1, granted: 1, tier: 1, tierHits: 1, burst: true},
		{at: 0, domain: "big", copies: 5, min: 1, granted: 5, tier: 1, tierHits: 5, burst: true},
	})
	// Reload: "small" gets a larger limit and keeps its hit.
	if err := r.SetSpec(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: []Tier{{Limit: 3, Window: time.Second, Active: time.Hour}}}); err != nil {
		t.Fatal(err)
	}
	runSteps(t, r, []step{
		{at: ms(10), domain: "small", copies: 5, min: 1, granted: 2, tier: 1, tierHits: 3},
		{at: ms(10), domain: "big", copies: 5, min: 1, granted: 0, tier: 1, tierHits: 5}, // over its new limit
	})
	// A bad spec changes nothing.
	if err := r.SetSpec(RateSpec{Hard: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("SetSpec(hard -1) = %v", err)
	}
	if r.Spec().Tiers[0].Limit != 3 {
		t.Fatalf("bad SetSpec changed the spec: %+v", r.Spec())
	}
}

func TestSweep(t *testing.T) {
	r, _ := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: figureTiers})
	for _, d := range []string{"a", "b"} {
		if _, err := r.Request(epoch.UnixNano(), d, 4, 4); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.Sweep(epoch.Add(5 * time.Second).UnixNano()); n != 2 {
		t.Fatalf("Sweep during tier 2's cooldown left %d domains, want 2", n)
	}
	if n := r.Sweep(epoch.Add(10 * time.Second).UnixNano()); n != 0 || r.Domains() != 0 {
		t.Fatalf("Sweep after everything expired left %d domains", n)
	}
}

func TestRequestBadInput(t *testing.T) {
	r, _ := NewRate(RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: figureTiers})
	for _, c := range []struct {
		domain      string
		copies, min int64
	}{
		{"", 1, 1}, {"a b", 1, 1}, {"a\x00", 1, 1}, {string(make([]byte, 257)), 1, 1}, {"\xff", 1, 1},
		{"a", 0, 1}, {"a", -1, 1}, {"a", 1, -1}, {"a", 0, 0}, {"a", 2, 3}, {"a", MaxLimit + 1, 1}, {"a", 5, -5},
	} {
		res, err := r.Request(epoch.UnixNano(), c.domain, c.copies, c.min)
		if !errors.Is(err, ErrInvalid) || res != (RateResult{}) {
			t.Errorf("Request(%q, %d, %d) = %+v, %v; want ErrInvalid", c.domain, c.copies, c.min, res, err)
		}
	}
	if r.Domains() != 0 {
		t.Fatalf("bad requests created %d domains", r.Domains())
	}
}

func TestClockGoingBackIsHarmless(t *testing.T) {
	r, _ := NewRate(RateSpec{Hard: 2, Global: Unlimited, Tiers: []Tier{{Limit: Unlimited, Window: time.Second, Active: time.Hour}}})
	r.Request(epoch.Add(time.Second).UnixNano(), "a", 2, 2)
	if res, _ := r.Request(epoch.UnixNano(), "a", 1, 1); res.Granted != 0 {
		t.Fatalf("a clock going back reopened the window: %+v", res)
	}
}
