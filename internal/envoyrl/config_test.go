package envoyrl_test

import (
	"errors"
	"strings"
	"testing"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/allot/allot/internal/envoyrl"
)

func TestParseReadsEveryField(t *testing.T) {
	doc := `
domain: edge
descriptors:
  - key: remote_address
    shadow_mode: yes
    detailed_metric: true
    value_to_metric: true
    rate_limit:
      unit: Minute
      requests_per_unit: 0x10
      unit_multiplier: 5
      name: per_ip
      replaces:
        - name: global
  - key: path
    value: 010
    quota_mode: true
    descriptors:
      - key: method
        value: GET*
        share_threshold: true
        rate_limit: {unlimited: true}
`
	ds, err := envoyrl.Parse("edge.yaml", []byte(doc), envoyrl.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || ds[0].Name != "edge" || len(ds[0].Descriptors) != 2 {
		t.Fatalf("got %+v", ds)
	}
	ip := ds[0].Descriptors[0]
	want := envoyrl.RateLimit{
		RequestsPerUnit: 16, Unit: rlspb.RateLimitResponse_RateLimit_MINUTE, UnitMultiplier: 5,
		Name: "per_ip", Replaces: []string{"global"},
	}
	if ip.Key != "remote_address" || !ip.ShadowMode || !ip.DetailedMetric || !ip.ValueToMetric || ip.RateLimit == nil ||
		ip.RateLimit.RequestsPerUnit != want.RequestsPerUnit || ip.RateLimit.Unit != want.Unit ||
		ip.RateLimit.UnitMultiplier != want.UnitMultiplier || ip.RateLimit.Name != want.Name ||
		strings.Join(ip.RateLimit.Replaces, ",") != "global" {
		t.Errorf("first descriptor %+v (limit %+v)", ip, ip.RateLimit)
	}
	path := ds[0].Descriptors[1]
	// yaml.v2, as the reference, reads a scalar into a string as written.
	if path.Value != "010" || !path.QuotaMode || path.RateLimit != nil || len(path.Descriptors) != 1 {
		t.Errorf("second descriptor %+v", path)
	}
	m := path.Descriptors[0]
	if m.Value != "GET*" || !m.ShareThreshold || m.RateLimit == nil || !m.RateLimit.Unlimited ||
		m.RateLimit.Unit != rlspb.RateLimitResponse_RateLimit_UNKNOWN || m.RateLimit.UnitMultiplier != 1 {
		t.Errorf("nested descriptor %+v (limit %+v)", m, m.RateLimit)
	}
}

func TestParseDocuments(t *testing.T) {
	two := "domain: a\n---\n---\ndomain: b\n---\n"
	ds, err := envoyrl.Parse("f.yaml", []byte(two), envoyrl.ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].Name != "a" || ds[1].Name != "b" || ds[1].Source != "f.yaml (document 3)" {
		t.Errorf("got %+v", ds)
	}
	ds, err = envoyrl.Parse("f.yaml", []byte(two), envoyrl.ParseOptions{Reference: true})
	if err != nil || len(ds) != 1 || ds[0].Name != "a" {
		t.Errorf("reference: got %+v, %v; want the first document only", ds, err)
	}
	if _, err := envoyrl.Parse("f.yaml", []byte("---\n"), envoyrl.ParseOptions{}); err == nil {
		t.Error("a file of no document parsed")
	}
}

const head = "domain: d\ndescriptors:\n"

// refuseCase is a document Parse refuses.
type refuseCase struct {
	name, doc string
	// path and msg are what the error must contain.
	path, msg string
	// ref says whether the reference refuses it too (TestParseReference
	// checks that against the reference's recorded verdicts).
	ref bool
}

var refuseCases = []refuseCase{
	{"empty domain", "descriptors: []\n", "domain", "empty domain", true},
	{"empty file", "", "", "no domain", true},
	{"not a mapping", "- a\n", "", "must be a mapping", true},
	{"bad YAML", "domain: [\n", "", "invalid YAML", true},
	{"unknown key", "domain: d\ndomian: e\n", "domian", `unknown key "domian"`, true},
	{"unknown nested key", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 2}\n",
		"descriptors[0].rate_limit.burst", `unknown key "burst"`, true},
	{"misplaced key", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n",
		"descriptors[0].rate_limit.shadow_mode", "belongs in a descriptor", false},
	{"duplicate key", "domain: d\ndomain: e\n", "domain", "duplicate key", false},
	{"empty key", head + "  - value: v\n", "descriptors[0].key", "empty key", true},
	{"duplicate descriptor", head + "  - key: k\n  - key: j\n  - key: k\n", "descriptors[2]", `duplicate descriptor composite key "k"`, true},
	{"composite key clash", head + "  - key: a_b\n  - key: a\n    value: b\n", "descriptors[1]", `"a_b"`, true},
	{"nested duplicate", head + "  - key: k\n    descriptors:\n      - key: x\n        value: 1\n      - key: x\n        value: 1\n",
		"descriptors[0].descriptors[1]", "duplicate", true},
	{"bad unit", head + "  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", "descriptors[0].rate_limit.unit", `"fortnight"`, true},
	{"unknown unit", head + "  - key: k\n    rate_limit: {unit: unknown, requests_per_unit: 1}\n", "rate_limit.unit", "invalid rate limit unit", true},
	{"no unit", head + "  - key: k\n    rate_limit: {requests_per_unit: 1}\n", "rate_limit.unit", "invalid rate limit unit", true},
	{"unit when unlimited", head + "  - key: k\n    rate_limit: {unlimited: true, unit: second}\n", "rate_limit.unit", "unlimited", true},
	{"multiplier when unlimited", head + "  - key: k\n    rate_limit: {unlimited: true, unit_multiplier: 2}\n", "rate_limit.unit_multiplier", "unlimited", true},
	{"multiplier 0", head + "  - key: k\n    rate_limit: {unit: second, unit_multiplier: 0}\n", "rate_limit.unit_multiplier", "from 1", true},
	{"negative", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}\n", "requests_per_unit", "integer from 0", true},
	{"too big", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: 4294967296}\n", "requests_per_unit", "integer from 0", true},
	{"quoted number", head + "  - key: k\n    rate_limit: {unit: second, requests_per_unit: \"5\"}\n", "requests_per_unit", "integer", true},
	{"float", head + "  - key: k\n    value: 1.5\n", "descriptors[0].value", "must be a string", true},
	{"bool as string", head + "  - key: k\n    shadow_mode: \"true\"\n", "shadow_mode", "true or false", true},
	{"descriptors not a list", "domain: d\ndescriptors: {key: k}\n", "descriptors", "list of mappings", true},
	{"list of scalars", "domain: d\ndescriptors: [k]\n", "descriptors[0]", "other than map", true},
	{"rate_limit a list", head + "  - key: k\n    rate_limit: [{unit: second}]\n", "rate_limit", "must be a mapping", true},
	{"empty replaces", head + "  - key: k\n    rate_limit: {unit: second, name: n, replaces: [{name: \"\"}]}\n", "replaces[0].name", "empty replaces", true},
	{"replaces itself", head + "  - key: k\n    rate_limit: {unit: second, name: n, replaces: [{name: n}]}\n", "replaces[0].name", "same descriptor", true},
	{"share_threshold without wildcard", head + "  - key: k\n    value: v\n    share_threshold: true\n", "share_threshold", "wildcard", true},
	{"key not a string", "domain: d\n1: x\n", "", "not of type string", true},
	{"metadata", head + "  - key: k\n    metadata: {a: b}\n", "metadata", "unknown key", true},
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range refuseCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := envoyrl.Parse("t.yaml", []byte(tc.doc), envoyrl.ParseOptions{})
			var ce *envoyrl.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if !strings.Contains(ce.Path, tc.path) || !strings.Contains(err.Error(), tc.msg) || ce.Source != "t.yaml" {
				t.Errorf("error %q (path %q), want path %q and %q", err, ce.Path, tc.path, tc.msg)
			}
			_, refErr := envoyrl.Parse("t.yaml", []byte(tc.doc), envoyrl.ParseOptions{Reference: true})
			if (refErr != nil) != tc.ref {
				t.Errorf("reference mode: error %v, want refused=%t", refErr, tc.ref)
			}
		})
	}
}

func TestParseReferenceRefusesUnitMultiplier(t *testing.T) {
	doc := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, unit_multiplier: 2}\n"
	if _, err := envoyrl.Parse("t.yaml", []byte(doc), envoyrl.ParseOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := envoyrl.Parse("t.yaml", []byte(doc), envoyrl.ParseOptions{Reference: true})
	if err == nil || !strings.Contains(err.Error(), `unknown key "unit_multiplier"`) {
		t.Errorf("reference mode: %v", err)
	}
}

func TestNewConfigDomains(t *testing.T) {
	parse := func(doc string) []envoyrl.Domain {
		ds, err := envoyrl.Parse("t.yaml", []byte(doc), envoyrl.ParseOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	a := parse("domain: d\ndescriptors: [{key: k}]\n")
	b := parse("domain: d\ndescriptors: [{key: j}]\n")
	c := parse("domain: d\ndescriptors: [{key: k}]\n")
	if _, err := envoyrl.NewConfig(append(a, b...), envoyrl.ConfigOptions{}); err == nil || !strings.Contains(err.Error(), `duplicate domain "d"`) {
		t.Errorf("a domain twice: %v", err)
	}
	if _, err := envoyrl.NewConfig(append(a, b...), envoyrl.ConfigOptions{MergeDomains: true}); err != nil {
		t.Errorf("merging: %v", err)
	}
	if _, err := envoyrl.NewConfig(append(a, c...), envoyrl.ConfigOptions{MergeDomains: true}); err == nil || !strings.Contains(err.Error(), "duplicate descriptor composite key") {
		t.Errorf("merging a descriptor twice: %v", err)
	}
}
