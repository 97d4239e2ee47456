// Package domainlimit is the decision core of Charon-style domain limits
// (docs/domains.md): rate-limited resources with a hard limit,
// a global limit and burst tiers per domain, and copy-limited resources
// with domain, global and domain-group limits.
//
// The package is pure: it does no I/O, the clock is passed in, and its
// types are not safe for concurrent use (the server serializes calls).
// Times are int64 nanoseconds on one clock the caller keeps, which only
// has to move forward: Unix nanoseconds, or (as the server does) a
// monotonic offset from its start, which a step of the wall clock does
// not move.
package domainlimit

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"
	"unicode"
	"unicode/utf8"
)

// Unlimited is the value of a limit that is not configured (paper:
// "effectively unbounded").
const Unlimited int64 = math.MaxInt64

// Bounds of configuration and requests.
const (
	// MaxLimit bounds every configured limit other than Unlimited, and
	// the copies of a request: a larger value is a mistake, and keeping
	// sums of limits far from overflow keeps the arithmetic simple.
	MaxLimit int64 = 1e12
	// MaxDuration bounds window, active and cooldown times.
	MaxDuration = 366 * 24 * time.Hour
	// MaxDomainLen bounds a domain name, in bytes.
	MaxDomainLen = 256
	// MaxNameLen bounds resource, group and namespace names.
	MaxNameLen = 64
)

// Sentinel errors; every error of the package wraps one of them, so the
// server can map them to status codes.
var (
	// ErrInvalid: bad input (configuration or request arguments); 400.
	ErrInvalid = errors.New("invalid")
	// ErrNotHeld: a release of more copies than the (domain, groups) key
	// holds; 409.
	ErrNotHeld = errors.New("not held")
)

// invalidError is bad input; it wraps ErrInvalid without repeating
// "invalid" in every message.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }
func (e *invalidError) Unwrap() error { return ErrInvalid }

func invalidf(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Tier is one burst tier (L_i, T_i^w, T_i^a, T_i^c, S_i) of paper 2.1.
type Tier struct {
	Limit     int64         // L_i: hits allowed in the sliding window (Unlimited allowed)
	Window    time.Duration // T^w
	Active    time.Duration // T^a
	Cooldown  time.Duration // T^c
	Skippable bool          // S_i
}

// RateSpec configures one rate-limited resource (paper 2.1).
type RateSpec struct {
	Hard    int64             // H per domain per second; Unlimited if not configured
	Global  int64             // G across all domains per second; Unlimited if not configured
	Tiers   []Tier            // default tiers, in order (tier 1 first)
	Domains map[string][]Tier // domain-specific tier lists, replacing Tiers for that domain
}

// CopySpec configures one copy-limited resource (paper 2.2).
type CopySpec struct {
	DomainLimit int64            // per domain; Unlimited if not configured
	GlobalLimit int64            // Unlimited if not configured
	Domains     map[string]int64 // domain-specific domain limits
	Groups      []Group
}

// Group is a domain group with its limit: the copies held by all its
// domains together.
type Group struct {
	Name    string
	Limit   int64
	Domains []string
}

// PermissiveRate is the most permissive rate spec (paper 4.3, "allow
// unconfigured"): no hard or global limit, one unlimited tier with a
// short window and no cooldown. Requests under it are always granted and
// still counted.
func PermissiveRate() RateSpec {
	return RateSpec{Hard: Unlimited, Global: Unlimited,
		Tiers: []Tier{{Limit: Unlimited, Window: time.Second, Active: MaxDuration}}}
}

// PermissiveCopies is the most permissive copy spec: no limit at all.
func PermissiveCopies() CopySpec {
	return CopySpec{DomainLimit: Unlimited, GlobalLimit: Unlimited}
}

// ValidName reports whether s is a valid resource, group or namespace
// name: 1 to MaxNameLen characters from [A-Za-z0-9_-], as they become
// NATS subject tokens.
func ValidName(s string) bool { return ValidateName("name", s) == nil }

// ValidateName checks a resource, group or namespace name (what names it
// in the error).
func ValidateName(what, s string) error {
	if s == "" {
		return invalidf("%s is empty", what)
	}
	if len(s) > MaxNameLen {
		return invalidf("%s is %d characters long; the limit is %d", what, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return invalidf("%s %q contains %q; use only letters, digits, '_' and '-'", what, s, string(rune(c)))
		}
	}
	return nil
}

// ValidateDomain checks a domain name: 1 to MaxDomainLen bytes of UTF-8
// without spaces or control characters.
func ValidateDomain(d string) error {
	if d == "" {
		return invalidf("domain is empty")
	}
	if len(d) > MaxDomainLen {
		return invalidf("domain is %d bytes long; the limit is %d", len(d), MaxDomainLen)
	}
	if printableASCII(d) {
		return nil // the common case, without decoding runes
	}
	if !utf8.ValidString(d) {
		return invalidf("domain %q is not valid UTF-8", d)
	}
	for _, r := range d {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return invalidf("domain %q contains %q; spaces and control characters are not allowed", d, r)
		}
	}
	return nil
}

// printableASCII reports whether d is all ASCII letters, digits and
// punctuation: neither spaces nor control characters.
func printableASCII(d string) bool {
	for i := range len(d) {
		if d[i] <= ' ' || d[i] >= 0x7f {
			return false
		}
	}
	return true
}

// checkLimit accepts Unlimited or [0, MaxLimit].
func checkLimit(field string, v int64) error {
	if v != Unlimited && (v < 0 || v > MaxLimit) {
		return invalidf("%s: %d is outside [0, %d] (leave it out for no limit)", field, v, MaxLimit)
	}
	return nil
}

func checkDuration(field string, d time.Duration) error {
	if d < 0 || d > MaxDuration {
		return invalidf("%s: %s is outside [0, %s]", field, d, MaxDuration)
	}
	return nil
}

// Normalize applies section 4.1 and validates: limits are Unlimited or
// in [0, MaxLimit], durations in [0, MaxDuration]; tiers with an active
// time of 0 are dropped; a window longer than the active time is
// shortened to it; the active time is trimmed to a whole number of
// windows; a tier left with a zero window is an error. Domain names must
// pass ValidateDomain. Errors name the field ("domains.x.tiers[1].window")
// and wrap ErrInvalid. s is not modified.
func (s RateSpec) Normalize() (RateSpec, error) {
	if err := checkLimit("hard_limit", s.Hard); err != nil {
		return RateSpec{}, err
	}
	if err := checkLimit("global_limit", s.Global); err != nil {
		return RateSpec{}, err
	}
	out := RateSpec{Hard: s.Hard, Global: s.Global}
	var err error
	if out.Tiers, err = normalizeTiers("tiers", s.Tiers); err != nil {
		return RateSpec{}, err
	}
	if len(s.Domains) > 0 {
		out.Domains = make(map[string][]Tier, len(s.Domains))
		for _, d := range slices.Sorted(maps.Keys(s.Domains)) { // deterministic errors
			if err := ValidateDomain(d); err != nil {
				return RateSpec{}, invalidf("domains: %v", err)
			}
			if out.Domains[d], err = normalizeTiers("domains."+d+".tiers", s.Domains[d]); err != nil {
				return RateSpec{}, err
			}
		}
	}
	return out, nil
}

func normalizeTiers(field string, tiers []Tier) ([]Tier, error) {
	out := make([]Tier, 0, len(tiers))
	for i, t := range tiers {
		at := fmt.Sprintf("%s[%d]", field, i)
		if err := checkLimit(at+".limit", t.Limit); err != nil {
			return nil, err
		}
		for _, c := range []struct {
			name string
			d    time.Duration
		}{{"window", t.Window}, {"active", t.Active}, {"cooldown", t.Cooldown}} {
			if err := checkDuration(at+"."+c.name, c.d); err != nil {
				return nil, err
			}
		}
		if t.Active == 0 {
			continue // never active: it can never be entered
		}
		if t.Window == 0 {
			return nil, invalidf("%s.window: is 0; a tier needs a window span", at)
		}
		t.Window = min(t.Window, t.Active)
		t.Active -= t.Active % t.Window // no partial window at the tail
		out = append(out, t)
	}
	return out, nil
}

// Normalize applies the effective-limit rule of section 4.1 (a domain
// limit, domain override or group limit above the global limit is
// lowered to it) and validates: limits Unlimited or in [0, MaxLimit],
// valid and unique group names, valid domain names, no domain twice in a
// group. Groups keep their order; each group's domains are sorted.
// Errors name the field and wrap ErrInvalid. s is not modified.
func (s CopySpec) Normalize() (CopySpec, error) {
	if err := checkLimit("global_limit", s.GlobalLimit); err != nil {
		return CopySpec{}, err
	}
	if err := checkLimit("domain_limit", s.DomainLimit); err != nil {
		return CopySpec{}, err
	}
	out := CopySpec{GlobalLimit: s.GlobalLimit, DomainLimit: min(s.DomainLimit, s.GlobalLimit)}
	if len(s.Domains) > 0 {
		out.Domains = make(map[string]int64, len(s.Domains))
		for _, d := range slices.Sorted(maps.Keys(s.Domains)) {
			if err := ValidateDomain(d); err != nil {
				return CopySpec{}, invalidf("domains: %v", err)
			}
			if err := checkLimit("domains."+d+".domain_limit", s.Domains[d]); err != nil {
				return CopySpec{}, err
			}
			out.Domains[d] = min(s.Domains[d], s.GlobalLimit)
		}
	}
	seen := make(map[string]bool, len(s.Groups))
	for i, g := range s.Groups {
		at := fmt.Sprintf("groups[%d]", i)
		if err := ValidateName(at+".name", g.Name); err != nil {
			return CopySpec{}, err
		}
		if seen[g.Name] {
			return CopySpec{}, invalidf("%s.name: group %q is defined twice", at, g.Name)
		}
		seen[g.Name] = true
		if err := checkLimit(at+".limit", g.Limit); err != nil {
			return CopySpec{}, err
		}
		ds := slices.Clone(g.Domains)
		slices.Sort(ds)
		for j, d := range ds {
			if err := ValidateDomain(d); err != nil {
				return CopySpec{}, invalidf("%s.domains: %v", at, err)
			}
			if j > 0 && ds[j-1] == d {
				return CopySpec{}, invalidf("%s.domains: domain %q is listed twice", at, d)
			}
		}
		out.Groups = append(out.Groups, Group{Name: g.Name, Limit: min(g.Limit, s.GlobalLimit), Domains: ds})
	}
	return out, nil
}

// checkCopies validates the copies and min_copies of a request and
// returns the fewest copies that are a grant: min_copies, or 1 for a
// min_copies of 0. The paper's range [min_copies, copies] allows 0, and
// n = 0 applies nothing, so [0, copies] and [1, copies] decide alike:
// the largest n that fits, and a reply of 0 when none does.
func checkCopies(copies, minCopies int64) (int64, error) {
	switch {
	case copies < 1 || copies > MaxLimit:
		return 0, invalidf("copies %d is outside [1, %d]", copies, MaxLimit)
	case minCopies < 0 || minCopies > copies:
		return 0, invalidf("min_copies %d is outside [0, copies=%d]", minCopies, copies)
	}
	return max(minCopies, 1), nil
}
