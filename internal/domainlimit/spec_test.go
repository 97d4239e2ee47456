package domainlimit

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"
)

func TestRateSpecNormalize(t *testing.T) {
	s := time.Second
	for _, c := range []struct {
		name    string
		in, out []Tier
		err     string
	}{
		{name: "unchanged", in: []Tier{{Limit: 10, Window: s, Active: 10 * s, Cooldown: 20 * s}}, out: []Tier{{Limit: 10, Window: s, Active: 10 * s, Cooldown: 20 * s}}},
		{name: "active 0 dropped", in: []Tier{{Limit: 1, Window: s, Active: 0}, {Limit: 2, Window: s, Active: s}}, out: []Tier{{Limit: 2, Window: s, Active: s}}},
		{name: "window shortened to active", in: []Tier{{Limit: 1, Window: 10 * s, Active: 3 * s}}, out: []Tier{{Limit: 1, Window: 3 * s, Active: 3 * s}}},
		{name: "active trimmed to whole windows", in: []Tier{{Limit: 1, Window: 2 * s, Active: 7 * s, Cooldown: 0}}, out: []Tier{{Limit: 1, Window: 2 * s, Active: 6 * s}}},
		{name: "paper batch example unchanged", in: []Tier{{Limit: 5000, Window: 300 * s, Active: 300 * s, Cooldown: 86100 * s}}, out: []Tier{{Limit: 5000, Window: 300 * s, Active: 300 * s, Cooldown: 86100 * s}}},
		{name: "unlimited tier", in: []Tier{{Limit: Unlimited, Window: s, Active: s}}, out: []Tier{{Limit: Unlimited, Window: s, Active: s}}},
		{name: "zero window", in: []Tier{{Limit: 1, Active: s}}, err: "tiers[0].window: is 0"},
		{name: "negative limit", in: []Tier{{Limit: -1, Window: s, Active: s}}, err: "tiers[0].limit: -1 is outside"},
		{name: "huge limit", in: []Tier{{Limit: MaxLimit + 1, Window: s, Active: s}}, err: "tiers[0].limit"},
		{name: "negative cooldown", in: []Tier{{Limit: 1, Window: s, Active: s, Cooldown: -s}}, err: "tiers[0].cooldown"},
		{name: "huge active", in: []Tier{{Limit: 1, Window: s, Active: MaxDuration + 1}}, err: "tiers[0].active"},
		{name: "second tier", in: []Tier{{Limit: 1, Window: s, Active: s}, {Limit: 1, Window: -s, Active: s}}, err: "tiers[1].window"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := RateSpec{Hard: Unlimited, Global: Unlimited, Tiers: c.in}.Normalize()
			if c.err != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got.Tiers, c.out) {
				t.Fatalf("got %+v, %v; want %+v", got.Tiers, err, c.out)
			}
		})
	}
	for _, bad := range []RateSpec{
		{Hard: -1, Global: Unlimited}, {Hard: Unlimited, Global: MaxLimit + 1},
		{Hard: Unlimited, Global: Unlimited, Domains: map[string][]Tier{"": nil}},
		{Hard: Unlimited, Global: Unlimited, Domains: map[string][]Tier{"x": {{Limit: 1, Active: time.Second}}}},
	} {
		if _, err := bad.Normalize(); !errors.Is(err, ErrInvalid) {
			t.Errorf("Normalize(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestCopySpecNormalize(t *testing.T) {
	in := CopySpec{DomainLimit: 50, GlobalLimit: 20, Domains: map[string]int64{"big": 30, "small": 2},
		Groups: []Group{{Name: "free", Limit: 25, Domains: []string{"b", "a"}}, {Name: "vip", Limit: 5}}}
	got, err := in.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := CopySpec{DomainLimit: 20, GlobalLimit: 20, Domains: map[string]int64{"big": 20, "small": 2},
		Groups: []Group{{Name: "free", Limit: 20, Domains: []string{"a", "b"}}, {Name: "vip", Limit: 5}}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	if in.Groups[0].Domains[0] != "b" {
		t.Fatal("Normalize modified its input")
	}
	for _, c := range []struct {
		spec CopySpec
		err  string
	}{
		{CopySpec{DomainLimit: -1, GlobalLimit: Unlimited}, "domain_limit"},
		{CopySpec{DomainLimit: 1, GlobalLimit: MaxLimit + 1}, "global_limit"},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Domains: map[string]int64{"x": -5}}, "domains.x.domain_limit"},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Domains: map[string]int64{"a b": 5}}, "domains: domain \"a b\""},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Groups: []Group{{Name: "a.b", Limit: 1}}}, "groups[0].name"},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Groups: []Group{{Name: "g", Limit: 1}, {Name: "g", Limit: 2}}}, "groups[1].name: group \"g\" is defined twice"},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Groups: []Group{{Name: "g", Limit: -1}}}, "groups[0].limit"},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Groups: []Group{{Name: "g", Limit: 1, Domains: []string{"x", "x"}}}}, "listed twice"},
		{CopySpec{DomainLimit: 1, GlobalLimit: 1, Groups: []Group{{Name: "g", Limit: 1, Domains: []string{""}}}}, "groups[0].domains"},
	} {
		if _, err := c.spec.Normalize(); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
			t.Errorf("Normalize(%+v) = %v, want an error containing %q", c.spec, err, c.err)
		}
	}
}

func TestValidateNames(t *testing.T) {
	for _, ok := range []string{"a", "api-v2", "under_score", strings.Repeat("x", MaxNameLen)} {
		if !ValidName(ok) {
			t.Errorf("ValidName(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", "a.b", "a b", "*", ">", "é", strings.Repeat("x", MaxNameLen+1)} {
		if ValidName(bad) {
			t.Errorf("ValidName(%q) = true", bad)
		}
	}
	for _, ok := range []string{"user@example.com", "tenant:42", "é", strings.Repeat("x", MaxDomainLen)} {
		if err := ValidateDomain(ok); err != nil {
			t.Errorf("ValidateDomain(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", " ", "a\tb", "a\nb", "\x7f", "\xff", "a\u00a0b", strings.Repeat("x", MaxDomainLen+1)} {
		if err := ValidateDomain(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateDomain(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// TestValidateDomainBytes: ValidateDomain (with its fast path for ASCII)
// accepts exactly the UTF-8 without spaces or control characters, for
// every string of one or two bytes and some longer ones.
func TestValidateDomainBytes(t *testing.T) {
	valid := func(d string) bool {
		if !utf8.ValidString(d) {
			return false
		}
		for _, r := range d {
			if unicode.IsSpace(r) || unicode.IsControl(r) {
				return false
			}
		}
		return true
	}
	check := func(d string) {
		if got := ValidateDomain(d) == nil; got != valid(d) {
			t.Errorf("domain %q: valid %v, want %v", d, got, valid(d))
		}
	}
	for a := range 256 {
		check(string([]byte{byte(a)}))
		for b := range 256 {
			check(string([]byte{byte(a), byte(b)}))
		}
	}
	for _, d := range []string{"acme.example", "ä-gmbh", "a\u00a0b", "a\u2028b", "tab\there", "x\x7f", "\u0085x", "日本"} {
		check(d)
	}
}
