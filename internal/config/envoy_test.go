package config

import (
	"strings"
	"testing"
)

const edgeYAML = `domain: edge
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 100}
`

func TestParseEnvoy(t *testing.T) {
	d, err := ParseEnvoy("edge", 7, []byte(edgeYAML))
	if err != nil {
		t.Fatal(err)
	}
	if d.Revision != 7 || d.Domain.Name != "edge" || len(d.Domain.Descriptors) != 1 {
		t.Fatalf("parsed %+v", d)
	}
	for _, tc := range []struct {
		name, domain, doc, want string
	}{
		{"another domain", "edge2", edgeYAML, `domain "edge" is not the key's: store it under envoy.edge`},
		{"two documents", "edge", edgeYAML + "---\n" + strings.Replace(edgeYAML, "edge", "other", 1), "holds 2 YAML documents"},
		{"strict parsing", "edge", "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: sec, requests_per_unit: 1}\n", `envoy.edge: descriptors[0].rate_limit.unit: invalid rate limit unit "sec"`},
		{"a key in the wrong place", "edge", "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}\n", "shadow_mode"},
		{"no document", "edge", "", "no domain"},
		{"too large", "edge", edgeYAML + "#" + strings.Repeat("x", MaxEnvoyDocumentSize), "the limit is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnvoy(tc.domain, 1, []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestEnvoyKeys(t *testing.T) {
	name, c, ok := CompileKey("envoy.edge", 3, []byte(edgeYAML))
	if !ok || name != "edge" || c.Err != nil || c.Envoy == nil || c.Revision() != 3 || !c.Valid() {
		t.Fatalf("CompileKey: %q %+v %v", name, c, ok)
	}
	if _, err := CheckValue("envoy.edge", 0, []byte("domain: other\ndescriptors: []\n")); err == nil {
		t.Fatal("CheckValue accepted another domain")
	}
	if _, ok := EnvoyFromKey("envoy."); ok {
		t.Fatal(`EnvoyFromKey("envoy.") is a key`)
	}
	set, err := NewSet(1, nil, nil).WithEnvoy(c.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	if first, again := set.Envoy(), set.Envoy(); set.EnvoyDomains()["edge"] != c.Envoy || first == nil || first != again {
		t.Fatalf("set: %v", set.EnvoyDomains())
	}
	// Without Envoy domains the configuration is empty, not missing.
	if NewSet(1, nil, nil).Envoy() == nil || len(NewSet(1, nil, nil).EnvoyDomains()) != 0 {
		t.Fatal("a Set without Envoy domains has no empty configuration")
	}
}
