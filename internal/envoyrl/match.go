package envoyrl

import (
	"fmt"
	"strings"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// Config is a compiled configuration: every domain's descriptor tree,
// ready to match requests. It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*node
}

// ConfigOptions select how NewConfig combines domains.
type ConfigOptions struct {
	// MergeDomains lets several documents name the same domain and adds
	// their descriptors together (the reference's MERGE_DOMAIN_CONFIG);
	// otherwise a domain named twice is an error.
	MergeDomains bool
}

// node is a descriptor tree node, keyed among its siblings the way the
// reference keys them (finalKey), so that matching agrees with it on
// every input, including keys and values that contain "_".
type node struct {
	children map[string]*node
	// wildcards are the children's final keys that end in "*", in
	// document order: the first whose prefix matches wins.
	wildcards []string
	limit     *limitSpec
	// sharePattern is the node's final key when share_threshold is set.
	sharePattern string
}

// limitSpec is a configured limit as it applies to requests.
type limitSpec struct {
	requestsPerUnit uint32
	unit            rlspb.RateLimitResponse_RateLimit_Unit
	multiplier      uint32
	unlimited       bool
	shadow          bool
	quota           bool
	name            string
	replaces        []string
}

// NewConfig compiles domains, checking what only shows across documents:
// a domain named twice, or (merging) a descriptor defined twice. Errors
// are *ConfigError.
func NewConfig(domains []Domain, opts ConfigOptions) (*Config, error) {
	c := &Config{domains: make(map[string]*node, len(domains))}
	for _, d := range domains {
		root, present := c.domains[d.Name]
		if present && !opts.MergeDomains {
			return nil, &ConfigError{Source: d.Source, Path: "domain", Msg: fmt.Sprintf("duplicate domain %q in config file", d.Name)}
		}
		if !present {
			root = newNode()
			c.domains[d.Name] = root
		}
		if err := root.add(d.Source, "", d.Descriptors); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func newNode() *node { return &node{children: map[string]*node{}} }

func (n *node) add(source, parent string, ds []Descriptor) error {
	for i, d := range ds {
		path := fmt.Sprintf("%sdescriptors[%d]", parent, i)
		fk := finalKey(d.Key, d.Value)
		if _, dup := n.children[fk]; dup {
			return &ConfigError{Source: source, Path: path, Msg: fmt.Sprintf("duplicate descriptor composite key %q", fk)}
		}
		child := newNode()
		if d.RateLimit != nil {
			child.limit = &limitSpec{
				requestsPerUnit: d.RateLimit.RequestsPerUnit,
				unit:            d.RateLimit.Unit,
				multiplier:      max(d.RateLimit.UnitMultiplier, 1),
				unlimited:       d.RateLimit.Unlimited,
				shadow:          d.ShadowMode,
				quota:           d.QuotaMode,
				name:            d.RateLimit.Name,
				replaces:        d.RateLimit.Replaces,
			}
		}
		if d.ShareThreshold && strings.HasSuffix(fk, "*") {
			child.sharePattern = fk
		}
		if strings.HasSuffix(fk, "*") {
			n.wildcards = append(n.wildcards, fk)
		}
		if err := child.add(source, path+".", d.Descriptors); err != nil {
			return err
		}
		n.children[fk] = child
	}
	return nil
}

// match is the limit that applies to one request descriptor.
type match struct {
	spec *limitSpec
	// sharedValues[i], when not empty, replaces entry i's value in the
	// counter key (share_threshold).
	sharedValues []string
}

// lookup finds the limit of a descriptor as the reference's GetLimit does:
// nil for an unknown domain; the descriptor's own override when it has
// one; else the walk down the tree, entry by entry, trying key_value,
// then the first wildcard sibling whose prefix matches, then key alone;
// the limit counts only if it sits at the node of the last entry.
func (c *Config) lookup(domain string, d *rlv3.RateLimitDescriptor, override func(*rlv3.RateLimitDescriptor_RateLimitOverride) (*limitSpec, error)) (*match, error) {
	n := c.domains[domain]
	if n == nil {
		return nil, nil
	}
	if o := d.GetLimit(); o != nil {
		spec, err := override(o)
		if err != nil {
			return nil, err
		}
		return &match{spec: spec}, nil
	}
	var found *match
	var shared map[int]string
	entries := d.GetEntries()
	for i, e := range entries {
		key, value := e.GetKey(), e.GetValue()
		fk := key + "_" + value
		next := n.children[fk]
		wildcard := ""
		if next == nil {
			for _, w := range n.wildcards {
				if strings.HasPrefix(fk, strings.TrimSuffix(w, "*")) {
					next, wildcard = n.children[w], w
					break
				}
			}
		}
		if next == nil {
			next = n.children[key]
		}
		if wildcard != "" && next != nil && next.sharePattern != "" {
			if shared == nil {
				shared = map[int]string{}
			}
			shared[i] = strings.TrimPrefix(next.sharePattern, key+"_")
		}
		if next != nil && next.limit != nil && i == len(entries)-1 {
			found = &match{spec: next.limit}
			if len(shared) > 0 {
				found.sharedValues = make([]string, len(entries))
				for j, p := range shared {
					found.sharedValues[j] = p
				}
			}
		}
		if next == nil || len(next.children) == 0 {
			break
		}
		n = next
	}
	return found, nil
}
