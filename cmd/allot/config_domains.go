package main

import (
	"fmt"
	"io"

	"github.com/allot/allot/internal/configkv"
	"github.com/allot/allot/internal/domainlimit"
)

// listDomains adds the domains namespaces to `allot config list`.
func listDomains(tw io.Writer, entries []configkv.Entry) {
	if len(entries) > 0 {
		fmt.Fprintln(tw, "\nDOMAINS NAMESPACE\tREVISION\tRESOURCES\tSTATE")
	}
	for _, e := range entries {
		ns, state := servingOf(e.Domains, e.ServingDomains, e.Err, func(n *domainlimit.Namespace) uint64 { return n.Revision }, "its resources are unknown")
		desc := ""
		if ns != nil {
			desc = describeDomains(ns)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", e.Key, e.Revision, desc, state)
	}
}

// describeDomains summarizes a domains namespace in a few words.
func describeDomains(ns *domainlimit.Namespace) string {
	var rate, copies int
	for _, r := range ns.Resources {
		if r.Kind == domainlimit.KindRate {
			rate++
		} else {
			copies++
		}
	}
	s := fmt.Sprintf("%d rate-limited, %d copy-limited resources", rate, copies)
	if ns.IgnoreConfigured {
		s += ", ignore_configured (limits off)"
	}
	if ns.AllowUnconfigured {
		s += ", allow_unconfigured"
	}
	return s
}
