package envoyrl

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	yaml "go.yaml.in/yaml/v2"
)

// Domain is one YAML document of the reference's configuration: a domain
// and the descriptor tree whose limits apply to requests for it.
type Domain struct {
	// Name is the document's "domain".
	Name string
	// Descriptors are the top-level descriptors, in document order.
	Descriptors []Descriptor
	// Source names the document in errors: the file name, and the
	// document's number when the file holds more than one.
	Source string
}

// Descriptor is one node of a domain's descriptor tree.
type Descriptor struct {
	// Key must equal the request entry's key.
	Key string
	// Value, when set, must equal the entry's value (or match it, when it
	// ends in "*"); when empty, the node matches any value and counts each
	// value apart.
	Value string
	// RateLimit is the limit of requests whose descriptor ends at this
	// node; nil when only deeper nodes limit.
	RateLimit *RateLimit
	// Descriptors are the nodes matching the request's next entry.
	Descriptors []Descriptor
	// ShadowMode counts and reports the limit but never refuses.
	ShadowMode bool
	// QuotaMode reports an exceeded limit as OK (the reference uses it
	// to signal quota exhaustion through metadata).
	QuotaMode bool
	// DetailedMetric and ValueToMetric only shape the reference's
	// statistics; they are kept so configurations load unchanged.
	DetailedMetric bool
	// ValueToMetric: see DetailedMetric.
	ValueToMetric bool
	// ShareThreshold makes every value matched by this wildcard node
	// share one counter.
	ShareThreshold bool
}

// RateLimit is a descriptor's limit.
type RateLimit struct {
	// RequestsPerUnit is how many hits a window admits.
	RequestsPerUnit uint32
	// Unit is the window's unit; RateLimitResponse_RateLimit_UNKNOWN for
	// an unlimited limit.
	Unit rlspb.RateLimitResponse_RateLimit_Unit
	// UnitMultiplier is how many units one window spans (1 unless set;
	// an allot extension).
	UnitMultiplier uint32
	// Unlimited exempts matching descriptors from limiting.
	Unlimited bool
	// Name names the limit in responses and in other limits' Replaces.
	Name string
	// Replaces names limits that this one disables when both apply to
	// the same request.
	Replaces []string
}

// ParseOptions select how Parse reads configuration.
type ParseOptions struct {
	// Reference accepts and refuses exactly what envoyproxy/ratelimit
	// does: unit_multiplier is an unknown key; a known key in the wrong
	// place (shadow_mode under rate_limit) is ignored, not refused; a
	// repeated key keeps its last value; only a file's first YAML
	// document is read.
	Reference bool
}

// ConfigError is an invalid configuration.
type ConfigError struct {
	// Source names the file (and document) at fault.
	Source string
	// Path is the offending field ("descriptors[0].rate_limit.unit");
	// empty when the document as a whole is at fault.
	Path string
	// Msg says what is wrong.
	Msg string
}

// Error implements error.
func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.Source != "" {
		b.WriteString(e.Source)
		b.WriteString(": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Parse reads one file of the reference's YAML configuration, one domain
// per YAML document. name identifies the file in errors. Errors are
// *ConfigError.
func Parse(name string, data []byte, opts ParseOptions) ([]Domain, error) {
	generic := yaml.NewDecoder(bytes.NewReader(data))
	typed := yaml.NewDecoder(bytes.NewReader(data))
	var domains []Domain
	for doc := 1; ; doc++ {
		source := name
		if doc > 1 {
			source = fmt.Sprintf("%s (document %d)", name, doc)
		}
		var tree yaml.MapSlice
		err := generic.Decode(&tree)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if strings.Contains(err.Error(), "into yaml.Map") {
				return nil, &ConfigError{Source: source, Msg: "a document must be a mapping with domain and descriptors"}
			}
			return nil, &ConfigError{Source: source, Msg: "invalid YAML: " + err.Error()}
		}
		if len(tree) == 0 && !opts.Reference {
			// An empty document (a trailing "---") holds no domain.
			if err := typed.Decode(new(any)); err != nil {
				return nil, &ConfigError{Source: source, Msg: "invalid YAML: " + err.Error()}
			}
			continue
		}
		w := walker{source: source, ref: opts.Reference}
		if err := w.root(tree); err != nil {
			return nil, err
		}
		var root yamlRoot
		if err := typed.Decode(&root); err != nil {
			return nil, &ConfigError{Source: source, Msg: "invalid YAML: " + err.Error()}
		}
		d, err := root.domain(source)
		if err != nil {
			return nil, err
		}
		domains = append(domains, d)
		if opts.Reference {
			break // yaml.v2's Unmarshal reads the first document only
		}
	}
	if len(domains) == 0 {
		if opts.Reference {
			return nil, &ConfigError{Source: name, Msg: "config file cannot have empty domain"}
		}
		return nil, &ConfigError{Source: name, Msg: "no domain: the file holds no YAML document"}
	}
	return domains, nil
}

// The typed view of a document, decoded by yaml.v2 as the reference does,
// so that a scalar means the same text (value: 010 is "010", value: yes
// is "yes").
type yamlRoot struct {
	Domain      string           `yaml:"domain"`
	Descriptors []yamlDescriptor `yaml:"descriptors"`
}

type yamlDescriptor struct {
	Key            string           `yaml:"key"`
	Value          string           `yaml:"value"`
	RateLimit      *yamlRateLimit   `yaml:"rate_limit"`
	Descriptors    []yamlDescriptor `yaml:"descriptors"`
	ShadowMode     bool             `yaml:"shadow_mode"`
	QuotaMode      bool             `yaml:"quota_mode"`
	DetailedMetric bool             `yaml:"detailed_metric"`
	ValueToMetric  bool             `yaml:"value_to_metric"`
	ShareThreshold bool             `yaml:"share_threshold"`
}

type yamlRateLimit struct {
	RequestsPerUnit uint32         `yaml:"requests_per_unit"`
	Unit            string         `yaml:"unit"`
	UnitMultiplier  *uint32        `yaml:"unit_multiplier"`
	Unlimited       bool           `yaml:"unlimited"`
	Name            string         `yaml:"name"`
	Replaces        []yamlReplaces `yaml:"replaces"`
}

type yamlReplaces struct {
	Name string `yaml:"name"`
}

// domain checks what the reference checks when it loads a document and
// converts it.
func (r *yamlRoot) domain(source string) (Domain, error) {
	if r.Domain == "" {
		return Domain{}, &ConfigError{Source: source, Path: "domain", Msg: "config file cannot have empty domain"}
	}
	ds, err := descriptors(source, "", r.Descriptors)
	if err != nil {
		return Domain{}, err
	}
	return Domain{Name: r.Domain, Descriptors: ds, Source: source}, nil
}

func descriptors(source, parent string, in []yamlDescriptor) ([]Descriptor, error) {
	out := make([]Descriptor, 0, len(in))
	seen := make(map[string]bool, len(in))
	for i, y := range in {
		path := fmt.Sprintf("%sdescriptors[%d]", parent, i)
		fail := func(field, format string, args ...any) error {
			p := path
			if field != "" {
				p += "." + field
			}
			return &ConfigError{Source: source, Path: p, Msg: fmt.Sprintf(format, args...)}
		}
		if y.Key == "" {
			return nil, fail("key", "descriptor has empty key")
		}
		fk := finalKey(y.Key, y.Value)
		if seen[fk] {
			return nil, fail("", "duplicate descriptor composite key %q", fk)
		}
		seen[fk] = true
		d := Descriptor{
			Key: y.Key, Value: y.Value,
			ShadowMode: y.ShadowMode, QuotaMode: y.QuotaMode,
			DetailedMetric: y.DetailedMetric, ValueToMetric: y.ValueToMetric,
			ShareThreshold: y.ShareThreshold,
		}
		if y.RateLimit != nil {
			rl, err := y.RateLimit.limit(fail)
			if err != nil {
				return nil, err
			}
			d.RateLimit = rl
		}
		if y.ShareThreshold && !strings.HasSuffix(fk, "*") {
			return nil, fail("share_threshold", "share_threshold can only be used with wildcard values (ending with '*'), but found key %q", fk)
		}
		children, err := descriptors(source, path+".", y.Descriptors)
		if err != nil {
			return nil, err
		}
		d.Descriptors = children
		out = append(out, d)
	}
	return out, nil
}

func (y *yamlRateLimit) limit(fail func(field, format string, args ...any) error) (*RateLimit, error) {
	unit, validUnit := parseUnit(y.Unit)
	if y.Unlimited {
		if validUnit {
			return nil, fail("rate_limit.unit", "should not specify rate limit unit when unlimited")
		}
		if y.UnitMultiplier != nil {
			return nil, fail("rate_limit.unit_multiplier", "should not specify unit_multiplier when unlimited")
		}
		unit = rlspb.RateLimitResponse_RateLimit_UNKNOWN
	} else if !validUnit {
		return nil, fail("rate_limit.unit", "invalid rate limit unit %q (want second, minute, hour, day, week, month or year)", y.Unit)
	}
	rl := &RateLimit{
		RequestsPerUnit: y.RequestsPerUnit,
		Unit:            unit,
		UnitMultiplier:  1,
		Unlimited:       y.Unlimited,
		Name:            y.Name,
	}
	if y.UnitMultiplier != nil {
		if *y.UnitMultiplier == 0 {
			return nil, fail("rate_limit.unit_multiplier", "unit_multiplier must be at least 1")
		}
		rl.UnitMultiplier = *y.UnitMultiplier
	}
	for j, r := range y.Replaces {
		if r.Name == "" {
			return nil, fail(fmt.Sprintf("rate_limit.replaces[%d].name", j), "should not have an empty replaces entry")
		}
		if r.Name == y.Name {
			return nil, fail(fmt.Sprintf("rate_limit.replaces[%d].name", j), "replaces should not contain name of same descriptor (%q)", r.Name)
		}
		rl.Replaces = append(rl.Replaces, r.Name)
	}
	return rl, nil
}

// parseUnit reads a unit name as the reference does: case-insensitively,
// UNKNOWN excluded.
func parseUnit(s string) (rlspb.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || v == int32(rlspb.RateLimitResponse_RateLimit_UNKNOWN) {
		return rlspb.RateLimitResponse_RateLimit_UNKNOWN, false
	}
	return rlspb.RateLimitResponse_RateLimit_Unit(v), true
}

// finalKey is the reference's name of a descriptor node among its
// siblings: the key, or key_value.
func finalKey(key, value string) string {
	if value == "" {
		return key
	}
	return key + "_" + value
}
