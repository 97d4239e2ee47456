package domainlimit

import "encoding/json"

// MarshalNamespace writes ns as an indented domains document in its
// normalized form (unlimited limits left out, durations as Go strings);
// ParseNamespace reads it back as ns.
func MarshalNamespace(ns *Namespace) ([]byte, error) {
	res := make(map[string]any, len(ns.Resources))
	for name, r := range ns.Resources {
		if r.Kind == KindRate {
			res[name] = rateDocument(r.Rate)
		} else {
			res[name] = copiesDocument(r.Copies)
		}
	}
	doc := map[string]any{"ignore_configured": ns.IgnoreConfigured, "allow_unconfigured": ns.AllowUnconfigured, "resources": res, "fail": ns.Fail.String()}
	if len(ns.Tenants) > 0 {
		doc["tenants"] = ns.Tenants
	}
	return json.MarshalIndent(doc, "", "  ") // sorted keys: stable for diffs
}

// setLimit stores a limit under key unless it is Unlimited (left out).
func setLimit(m map[string]any, key string, v int64) {
	if v != Unlimited {
		m[key] = v
	}
}

func rateDocument(s RateSpec) map[string]any {
	m := map[string]any{"kind": KindRate.String(), "tiers": tiersDocument(s.Tiers)}
	setLimit(m, "hard_limit", s.Hard)
	setLimit(m, "global_limit", s.Global)
	if len(s.Domains) > 0 {
		doms := make(map[string]any, len(s.Domains))
		for d, ts := range s.Domains {
			doms[d] = map[string]any{"tiers": tiersDocument(ts)}
		}
		m["domains"] = doms
	}
	return m
}

func tiersDocument(ts []Tier) []any {
	out := make([]any, len(ts))
	for i, t := range ts {
		m := map[string]any{"window": t.Window.String(), "active": t.Active.String(), "cooldown": t.Cooldown.String(), "skippable": t.Skippable}
		setLimit(m, "limit", t.Limit)
		out[i] = m
	}
	return out
}

func copiesDocument(s CopySpec) map[string]any {
	m := map[string]any{"kind": KindCopies.String()}
	setLimit(m, "domain_limit", s.DomainLimit)
	setLimit(m, "global_limit", s.GlobalLimit)
	if len(s.Domains) > 0 {
		doms := make(map[string]any, len(s.Domains))
		for d, l := range s.Domains {
			dm := map[string]any{}
			setLimit(dm, "domain_limit", l)
			doms[d] = dm
		}
		m["domains"] = doms
	}
	if len(s.Groups) > 0 {
		gs := make([]any, len(s.Groups))
		for i, g := range s.Groups {
			gm := map[string]any{"name": g.Name, "domains": append([]string{}, g.Domains...)}
			setLimit(gm, "limit", g.Limit)
			gs[i] = gm
		}
		m["groups"] = gs
	}
	return m
}
