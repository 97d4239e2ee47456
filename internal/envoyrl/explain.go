package envoyrl

import (
	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// Applied is the limit one descriptor gets, as ShouldRateLimit finds it.
type Applied struct {
	// Known reports whether the configuration has the domain.
	Known bool
	// Limit is the limit that applies; nil when none does (no node
	// matches, or the node of the descriptor's last entry has no limit).
	Limit *RateLimit
	// ShadowMode and QuotaMode are the limit's node's settings.
	ShadowMode, QuotaMode bool
	// Entries are the descriptor's entries as its counter names them:
	// the share_threshold pattern in place of a value it covers.
	Entries []Entry
}

// Explain returns the limit a request descriptor of domain gets, leaving
// aside what the request's other descriptors change (replaces) and limit
// overrides (a descriptor carrying its own limit gets it).
func (c *Config) Explain(domain string, d *rlv3.RateLimitDescriptor) Applied {
	a := Applied{Known: c.domains[domain] != nil}
	m, err := c.lookup(domain, &rlv3.RateLimitDescriptor{Entries: d.GetEntries()}, nil)
	if err != nil || m == nil {
		return a
	}
	s := m.spec
	a.Limit = &RateLimit{RequestsPerUnit: s.requestsPerUnit, Unit: s.unit, UnitMultiplier: s.multiplier,
		Unlimited: s.unlimited, Name: s.name, Replaces: s.replaces}
	a.ShadowMode, a.QuotaMode = s.shadow, s.quota
	for i, e := range d.GetEntries() {
		v := e.GetValue()
		if i < len(m.sharedValues) && m.sharedValues[i] != "" {
			v = m.sharedValues[i]
		}
		a.Entries = append(a.Entries, Entry{Key: e.GetKey(), Value: v})
	}
	return a
}
