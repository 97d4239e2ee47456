package config

import (
	"strings"

	"github.com/allot/allot/internal/domainlimit"
)

// Domain-limit namespaces (docs/domains.md): the Charon-style
// resources of one namespace are stored under "domains.<namespace>".
const (
	// DomainsPrefix starts every domains key: "domains.<namespace>".
	DomainsPrefix = "domains."
	// DomainsWatchPattern matches every domains key.
	DomainsWatchPattern = DomainsPrefix + ">"
)

// DomainsKey returns the KV key of domains namespace ns.
func DomainsKey(ns string) string { return DomainsPrefix + ns }

// DomainsFromKey returns the namespace name of a domains key, and false
// if the key is not one.
func DomainsFromKey(key string) (string, bool) {
	ns, ok := strings.CutPrefix(key, DomainsPrefix)
	return ns, ok && ns != ""
}

// ParseDomains parses and validates a domains namespace document stored
// under DomainsKey(name) at revision (domainlimit.ParseNamespaceNotes).
// The notes say what normalization changed.
func ParseDomains(name string, revision uint64, data []byte) (*domainlimit.Namespace, []string, error) {
	ns, notes, err := domainlimit.ParseNamespaceNotes(name, data)
	if err != nil {
		return nil, nil, err
	}
	ns.Revision = revision
	return ns, notes, nil
}

// WithDomains returns a copy of s whose Domains are nss, keyed by name.
// Sets are immutable; the copy shares s's templates and quota.
func (s *Set) WithDomains(nss ...*domainlimit.Namespace) *Set {
	c := *s
	c.domains = make(map[string]*domainlimit.Namespace, len(nss))
	for _, ns := range nss {
		c.domains[ns.Name] = ns
	}
	return &c
}

// Domains returns the domain-limit namespaces the set serves, from the
// "domains.<namespace>" keys: for each key its latest valid revision, or
// when that is invalid the last valid one in its history (a key with
// none is absent). It never returns nil. The map and namespaces are
// shared by every holder of the set: read them, never modify them. A
// watcher's Set changes Generation whenever a domains key changes.
func (s *Set) Domains() map[string]*domainlimit.Namespace {
	if s.domains == nil {
		return map[string]*domainlimit.Namespace{}
	}
	return s.domains
}
