package main

// allot config for Envoy rate limit domains (envoy.<domain> keys): list,
// validate and explain. See docs/envoy.md.

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/envoyrl"
	"github.com/allot/allot/internal/envoywire"
	"github.com/allot/allot/internal/rls"
)

// listEnvoy adds the Envoy domains to `allot config list`.
func listEnvoy(tw io.Writer, entries []configkv.Entry) {
	if len(entries) > 0 {
		fmt.Fprintln(tw, "\nENVOY DOMAIN\tREVISION\tDESCRIPTORS\tSTATE")
	}
	for _, e := range entries {
		d, state := servingOf(e.Envoy, e.ServingEnvoy, e.Err, func(d *config.EnvoyDomain) uint64 { return d.Revision }, "its requests are answered OK with no limit")
		desc := ""
		if d != nil {
			desc = describeEnvoy(d.Domain)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", e.Key, e.Revision, desc, state)
	}
}

// describeEnvoy summarizes a domain in a few words.
func describeEnvoy(d envoyrl.Domain) string {
	var nodes, limits int
	var walk func([]envoyrl.Descriptor)
	walk = func(ds []envoyrl.Descriptor) {
		for _, x := range ds {
			nodes++
			if x.RateLimit != nil {
				limits++
			}
			walk(x.Descriptors)
		}
	}
	walk(d.Descriptors)
	return fmt.Sprintf("%d descriptors, %d limits", nodes, limits)
}

// envoyTree writes a domain's descriptor tree, one line a node: the
// entries that reach it, its limit and settings, and whether a template
// maps its counters to leases (set: the templates in force; nil skips).
func envoyTree(w io.Writer, d envoyrl.Domain, set *config.Set) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESCRIPTOR\tLIMIT\tSETTINGS\tSIDECAR")
	var walk func(path []envoyrl.Entry, ds []envoyrl.Descriptor)
	walk = func(path []envoyrl.Entry, ds []envoyrl.Descriptor) {
		for _, x := range ds {
			p := append(append([]envoyrl.Entry{}, path...), envoyrl.Entry{Key: x.Key, Value: x.Value})
			var names []string
			for _, e := range p {
				if e.Value == "" {
					names = append(names, e.Key)
				} else {
					names = append(names, e.Key+"="+e.Value)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.Join(names, " > "), describeLimit(x.RateLimit), settings(x), leaseOfNode(d.Name, p, x, set))
			walk(p, x.Descriptors)
		}
	}
	walk(nil, d.Descriptors)
	return tw.Flush()
}

// describeLimit is a limit in words.
func describeLimit(rl *envoyrl.RateLimit) string {
	switch {
	case rl == nil:
		return "-"
	case rl.Unlimited:
		return "unlimited"
	}
	unit := strings.ToLower(rl.Unit.String())
	if rl.UnitMultiplier > 1 {
		return fmt.Sprintf("%d per %d %ss", rl.RequestsPerUnit, rl.UnitMultiplier, unit)
	}
	return fmt.Sprintf("%d per %s", rl.RequestsPerUnit, unit)
}

// settings lists a node's settings that change its answers.
func settings(x envoyrl.Descriptor) string {
	var s []string
	if rl := x.RateLimit; rl != nil {
		if rl.Name != "" {
			s = append(s, "name "+rl.Name)
		}
		if len(rl.Replaces) > 0 {
			s = append(s, "replaces "+strings.Join(rl.Replaces, ","))
		}
	}
	for _, f := range []struct {
		on   bool
		name string
	}{{x.ShadowMode, "shadow_mode"}, {x.QuotaMode, "quota_mode"}, {x.ShareThreshold, "share_threshold"}} {
		if f.on {
			s = append(s, f.name)
		}
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

// leaseOfNode says how a sidecar answers a node's counters: from leases
// of the template that maps their resource, or counted centrally. A node
// without a value has one resource per value; <value> stands for it.
func leaseOfNode(domain string, path []envoyrl.Entry, x envoyrl.Descriptor, set *config.Set) string {
	if set == nil || x.RateLimit == nil || x.RateLimit.Unlimited {
		return "-"
	}
	named := make([]envoyrl.Entry, len(path))
	for i, e := range path {
		if e.Value == "" {
			e.Value = "<value>"
		}
		named[i] = e
	}
	return leaseOf(domain, named, set)
}

// leaseOf says how a sidecar answers a counter of entries.
func leaseOf(domain string, entries []envoyrl.Entry, set *config.Set) string {
	id, ok := rls.LeaseResource(domain, entries)
	if !ok {
		return "counted centrally (" + id + " is not a valid resource id)"
	}
	if t := rls.LeaseTemplate(set, id); t != nil {
		return fmt.Sprintf("leases of %s (template %s: %s, capacity %s per second)", id, t.Name, t.Algorithm, number(t.Capacity))
	}
	return "counted centrally (no template maps " + id + ")"
}

// explainEnvoy is `allot config explain envoy.<domain> [KEY=VALUE ...]`:
// the domain's tree as the bucket holds it, and the limit a descriptor
// gets.
func explainEnvoy(ctx context.Context, env *cliEnv, cf *configFlags, args []string) error {
	key := args[0]
	domain, ok := config.EnvoyFromKey(key)
	if !ok {
		return fmt.Errorf("%q is not an Envoy domain key (envoy.<domain>)", key)
	}
	desc := &rlv3.RateLimitDescriptor{}
	for _, kv := range args[1:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("descriptor entry %q: want KEY=VALUE", kv)
		}
		desc.Entries = append(desc.Entries, &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	entries, err := cf.loadAll(ctx)
	if err != nil {
		return err
	}
	set := configkv.SetFromEntries(entries, nil)
	w := env.stdout
	var stored *configkv.Entry
	for i := range entries {
		if entries[i].Key == key {
			stored = &entries[i]
		}
	}
	served := set.EnvoyDomains()[domain]
	switch {
	case stored == nil:
		fmt.Fprintf(w, "%s is not stored: requests for domain %q are answered OK with no limit.\n", key, domain)
		return nil
	case stored.Err != nil && served != nil:
		fmt.Fprintf(w, "%s revision %d is INVALID: %v\nThe front ends serve revision %d, the last valid one:\n\n", key, stored.Revision, stored.Err, served.Revision)
	case stored.Err != nil:
		fmt.Fprintf(w, "%s revision %d is INVALID: %v\nNo valid revision is in its history: requests for domain %q are answered OK with no limit.\n", key, stored.Revision, stored.Err, domain)
		return nil
	default:
		fmt.Fprintf(w, "%s revision %d: domain %q, %s.\n\n", key, served.Revision, domain, describeEnvoy(served.Domain))
	}
	if err := envoyTree(w, served.Domain, set); err != nil {
		return err
	}
	if len(desc.Entries) == 0 {
		return nil
	}
	a := set.Envoy().Explain(domain, desc)
	fmt.Fprintf(w, "\nDescriptor %s:\n", strings.Join(args[1:], ", "))
	switch {
	case a.Limit == nil:
		fmt.Fprintln(w, "  no limit applies: answered OK, with no current_limit")
		return nil
	case a.Limit.Unlimited:
		fmt.Fprintln(w, "  unlimited: answered OK")
		return nil
	}
	fmt.Fprintf(w, "  limit: %s", describeLimit(a.Limit))
	if a.Limit.Name != "" {
		fmt.Fprintf(w, " (name %s)", a.Limit.Name)
	}
	if a.ShadowMode {
		fmt.Fprint(w, ", shadow mode: counted, never refused")
	}
	if a.QuotaMode {
		fmt.Fprint(w, ", quota mode: an exceeded limit answers OK")
	}
	fmt.Fprintln(w)
	var counter []string
	for _, e := range a.Entries {
		counter = append(counter, e.Key+"_"+e.Value)
	}
	fmt.Fprintf(w, "  counter: %s_%s_<window start>, in the partition of token %q\n", domain, strings.Join(counter, "_"), envoywire.Token(domain))
	fmt.Fprintf(w, "  sidecar: %s\n", leaseOf(domain, a.Entries, set))
	return nil
}
