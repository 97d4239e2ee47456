package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/allot/allot/internal/envoyrl"
)

// Envoy rate limit domains (docs/envoy.md): envoyproxy/ratelimit's YAML,
// one domain per key "envoy.<domain>".
const (
	// EnvoyPrefix starts every Envoy domain key: "envoy.<domain>".
	EnvoyPrefix = "envoy."
	// MaxEnvoyDocumentSize bounds an Envoy domain document.
	MaxEnvoyDocumentSize = 1 << 20
)

// EnvoyKey returns the KV key of Envoy rate limit domain domain.
func EnvoyKey(domain string) string { return EnvoyPrefix + domain }

// EnvoyFromKey returns the domain of an Envoy domain key, and false if the
// key is not one.
func EnvoyFromKey(key string) (string, bool) {
	d, ok := strings.CutPrefix(key, EnvoyPrefix)
	return d, ok && d != ""
}

// EnvoyDomain is the configuration of one Envoy rate limit domain: the
// document stored under EnvoyKey(Domain.Name).
type EnvoyDomain struct {
	// Domain is the parsed document.
	Domain envoyrl.Domain
	// Revision is the KV revision it was stored at.
	Revision uint64
}

// ParseEnvoy parses and validates revision rev of key EnvoyKey(domain):
// envoyproxy/ratelimit's YAML, read strictly (envoyrl.Parse), holding
// exactly one domain, the key's.
func ParseEnvoy(domain string, rev uint64, data []byte) (*EnvoyDomain, error) {
	if len(data) > MaxEnvoyDocumentSize {
		return nil, fmt.Errorf("the document is %d bytes; the limit is %d", len(data), MaxEnvoyDocumentSize)
	}
	ds, err := envoyrl.Parse(EnvoyKey(domain), data, envoyrl.ParseOptions{})
	if err != nil {
		return nil, err
	}
	if len(ds) != 1 {
		return nil, fmt.Errorf("%s holds %d YAML documents: a key holds one domain (store each under envoy.<its domain>)", EnvoyKey(domain), len(ds))
	}
	d := ds[0]
	if d.Name != domain {
		return nil, fmt.Errorf("%s: domain %q is not the key's: store it under %s", EnvoyKey(domain), d.Name, EnvoyKey(d.Name))
	}
	// What only the compiled tree can tell (a descriptor defined twice).
	if _, err := envoyrl.NewConfig(ds, envoyrl.ConfigOptions{}); err != nil {
		return nil, err
	}
	return &EnvoyDomain{Domain: d, Revision: rev}, nil
}

// envoySet is a Set's Envoy configuration: the domains and their
// compiled tree.
type envoySet struct {
	domains map[string]*EnvoyDomain
	cfg     *envoyrl.Config
}

// WithEnvoy returns a copy of s whose Envoy configuration holds ds (one
// per domain; of two with the same domain, the later wins). Sets are
// immutable; the copy shares s's templates, quota and domains.
func (s *Set) WithEnvoy(ds ...*EnvoyDomain) (*Set, error) {
	m := make(map[string]*EnvoyDomain, len(ds))
	for _, d := range ds {
		m[d.Domain.Name] = d
	}
	doms := make([]envoyrl.Domain, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		doms = append(doms, m[name].Domain)
	}
	cfg, err := envoyrl.NewConfig(doms, envoyrl.ConfigOptions{})
	if err != nil {
		return nil, fmt.Errorf("envoy domains: %w", err)
	}
	c := *s
	c.envoy = &envoySet{domains: m, cfg: cfg}
	return &c, nil
}

// noEnvoy is the Envoy configuration of a Set without Envoy domains:
// every request is answered OK with no limit, as for an unknown domain.
func noEnvoy() *envoySet {
	cfg, _ := envoyrl.NewConfig(nil, envoyrl.ConfigOptions{}) // nothing to refuse
	return &envoySet{domains: map[string]*EnvoyDomain{}, cfg: cfg}
}

// Envoy returns the compiled Envoy rate limit configuration of the set,
// from the "envoy.<domain>" keys: for each key its latest valid revision,
// or when that is invalid the last valid one in its history (a key with
// none is absent: its domain is unknown). It never returns nil, and
// returns the same pointer for the same Set.
func (s *Set) Envoy() *envoyrl.Config {
	return s.envoy.cfg
}

// EnvoyDomains returns the Envoy domains the set serves, by name. The map
// and the domains are shared by every holder of the set: read them, never
// modify them.
func (s *Set) EnvoyDomains() map[string]*EnvoyDomain {
	return s.envoy.domains
}
