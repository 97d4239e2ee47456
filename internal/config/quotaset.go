package config

import (
	"encoding/json"
	"fmt"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/wire"
)

// NewQuotaConfig returns a quota configuration holding namespaces, keyed
// by name (of two with the same name, the later wins).
func NewQuotaConfig(namespaces ...*quota.Namespace) *quota.Config {
	cfg := &quota.Config{Namespaces: make(map[string]*quota.Namespace, len(namespaces))}
	for _, ns := range namespaces {
		cfg.Namespaces[ns.Name] = ns
	}
	return cfg
}

// WithQuota returns a copy of s whose Quota is cfg (nil: none). Sets are
// immutable; the copy shares s's templates.
func (s *Set) WithQuota(cfg *quota.Config) *Set {
	c := *s
	c.quota = cfg
	return &c
}

// Quota returns the quota namespaces the set serves, from the
// "namespaces.<namespace>" keys: for each key its latest valid revision,
// or when that is invalid the last valid one in the key's history (a key
// with none is absent, as before it was written). It never returns nil.
// The configuration and its namespaces are shared by every holder of the
// set: read them, never modify them. A watcher's Set changes Generation
// whenever a namespace changes, as for templates.
func (s *Set) Quota() *quota.Config {
	if s.quota == nil {
		return &quota.Config{Namespaces: map[string]*quota.Namespace{}}
	}
	return s.quota
}

// BucketSource says which bucket of the configuration answers a quota
// bucket name, in lookup order.
type BucketSource string

// Bucket sources, in lookup order.
const (
	// SourceNamed: the namespace lists the name under "buckets".
	SourceNamed BucketSource = "named"
	// SourceDynamic: a bucket of its own is made from the namespace's
	// dynamic_bucket_template on first use.
	SourceDynamic BucketSource = "dynamic"
	// SourceDefault: the namespace's default_bucket, shared by every name
	// it does not list.
	SourceDefault BucketSource = "default"
	// SourceGlobalDefault: the default_bucket of namespace "_default",
	// shared by every name of every namespace without a bucket of its own.
	SourceGlobalDefault BucketSource = "global default"
	// SourceNone: no bucket; requests are REJECTED with reason no_bucket.
	SourceNone BucketSource = "none"
)

// BucketMatch is the bucket that answers a quota bucket name, as
// ExplainBucket finds it.
type BucketMatch struct {
	// Namespace and Name are the parts of the bucket name asked about.
	Namespace, Name string
	// Source says which bucket answers; Spec is its effective
	// configuration, nil for SourceNone.
	Source BucketSource
	Spec   *quota.Spec
	// Key and Revision are the configuration key the spec comes from and
	// its KV revision (empty and 0 for SourceNone).
	Key      string
	Revision uint64
	// MaxDynamicBuckets is the namespace's cap for SourceDynamic.
	MaxDynamicBuckets int
}

// ExplainBucket returns which bucket of cfg answers bucket
// ("namespace:name"), in the order named → dynamic → namespace default →
// global default → none. It errors for a malformed name (the error wraps
// wire.ErrBadRequest), as the take subject answers 400. A dynamic bucket
// is reported as such even when the namespace's max_dynamic_buckets is
// reached at run time (then requests for new names are REJECTED with
// reason too_many_buckets).
func ExplainBucket(cfg *quota.Config, bucket string) (BucketMatch, error) {
	nsName, name, err := wire.SplitBucket(bucket)
	if err != nil {
		return BucketMatch{}, err
	}
	m := BucketMatch{Namespace: nsName, Name: name, Source: SourceNone}
	from := func(src BucketSource, ns *quota.Namespace, spec *quota.Spec) (BucketMatch, error) {
		m.Source, m.Spec, m.Key, m.Revision = src, spec, NamespaceKey(ns.Name), ns.Revision
		return m, nil
	}
	if ns := cfg.Namespaces[nsName]; ns != nil {
		if spec := ns.Buckets[name]; spec != nil {
			return from(SourceNamed, ns, spec)
		}
		if ns.Dynamic != nil {
			m.MaxDynamicBuckets = ns.MaxDynamicBuckets
			return from(SourceDynamic, ns, ns.Dynamic)
		}
		if ns.Default != nil {
			return from(SourceDefault, ns, ns.Default)
		}
	}
	if g := cfg.Namespaces[quota.GlobalDefault]; g != nil && g.Default != nil {
		return from(SourceGlobalDefault, g, g.Default)
	}
	return m, nil
}

// String describes m in one line, for `allot config explain`.
func (m BucketMatch) String() string {
	bucket := m.Namespace + ":" + m.Name
	switch m.Source {
	case SourceNone:
		return fmt.Sprintf("bucket %s has no bucket: neither namespaces.%s nor namespaces.%s has one for it; requests are REJECTED (no_bucket)", bucket, m.Namespace, quota.GlobalDefault)
	case SourceDynamic:
		return fmt.Sprintf("bucket %s is a dynamic bucket of its own, made from %s revision %d's dynamic_bucket_template (at most %d live at once)", bucket, m.Key, m.Revision, m.MaxDynamicBuckets)
	case SourceNamed:
		return fmt.Sprintf("bucket %s is the named bucket buckets.%s of %s revision %d", bucket, m.Name, m.Key, m.Revision)
	}
	return fmt.Sprintf("bucket %s is answered by the %s bucket of %s revision %d (shared with every name that has no bucket of its own)", bucket, m.Source, m.Key, m.Revision)
}

// BucketDocument returns s as a BUCKET object of a namespace document
// with every default explicit: ParseNamespace reads it back as s.
func BucketDocument(s *quota.Spec) map[string]any {
	doc := map[string]any{
		"algorithm":              s.Algorithm.String(),
		"wait_timeout":           s.WaitTimeout.String(),
		"max_idle":               s.MaxIdle.String(),
		"max_tokens_per_request": s.MaxTokensPerRequest,
	}
	if s.Algorithm.Windowed() {
		doc["limit"], doc["window"] = s.Limit, s.Window.String()
		if s.Algorithm == quota.GCRA {
			doc["size"] = s.Size
		}
	} else {
		doc["size"], doc["fill_rate"] = s.Size, s.FillRate
	}
	if s.Algorithm == quota.TokenBucket {
		doc["max_debt"] = s.MaxDebt.String()
	}
	if s.SoftLimit != 0 {
		doc["soft_limit"] = s.SoftLimit
	}
	if s.CriticalReserve != 0 {
		doc["critical_reserve"] = s.CriticalReserve
	}
	if s.Ban != (quota.Ban{}) {
		doc["ban"] = map[string]any{"threshold": s.Ban.Threshold, "interval": s.Ban.Interval.String(), "duration": s.Ban.Duration.String()}
	}
	return doc
}

// MarshalNamespaceJSON writes ns as an indented namespace document with
// every default explicit; ParseNamespace reads it back as ns.
func MarshalNamespaceJSON(ns *quota.Namespace) ([]byte, error) {
	doc := map[string]any{}
	if ns.Buckets != nil {
		buckets := make(map[string]any, len(ns.Buckets))
		for name, s := range ns.Buckets {
			buckets[name] = BucketDocument(s)
		}
		doc["buckets"] = buckets
	}
	if ns.Default != nil {
		doc["default_bucket"] = BucketDocument(ns.Default)
	}
	if ns.Dynamic != nil {
		doc["dynamic_bucket_template"] = BucketDocument(ns.Dynamic)
		doc["max_dynamic_buckets"] = ns.MaxDynamicBuckets
	}
	if ns.Shadow {
		doc["shadow"] = true
	}
	if len(ns.Tenants) > 0 {
		doc["tenants"] = ns.Tenants
	}
	return json.MarshalIndent(doc, "", "  ") // sorted keys: stable for diffs
}
