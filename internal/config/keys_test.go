package config

import (
	"strings"
	"testing"

	"github.com/allot/allot/internal/domainlimit"
)

func TestCheckValueDomains(t *testing.T) {
	if _, err := CheckValue(DomainsKey("shop"), 0, []byte(`{"resources": {"r": {"kind": "copies", "domain_limit": 3}}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckValue(DomainsKey("shop"), 0, []byte(`{"resources": {"r": {"kind": "copies", "tiers": []}}}`)); err == nil {
		t.Fatal("CheckValue accepted a copy resource with tiers")
	}
	if _, err := CheckValue(DomainsKey("a.b"), 0, []byte(`{}`)); err == nil {
		t.Fatal("CheckValue accepted a bad namespace name")
	}
	if d := (&Set{}).Domains(); d == nil {
		t.Fatal("Domains() returned nil")
	}
	var _ map[string]*domainlimit.Namespace = NewSet(0, nil, nil).Domains()
}

func TestReadGlob(t *testing.T) {
	for doc, want := range map[string]string{
		`{"identifier_glob":"redis/**","capacity":-1}`: "redis/*",
		"identifierGlob: \"a?\"\ncapacity: lots\n":     "a?",
		`{"identifier_glob":"a","identifierGlob":"b"}`: "", // ambiguous
		`{"identifier_glob":5}`:                        "",
		`{"identifier_glob":"has space"}`:              "",
		`{"capacity":1}`:                               "",
		"identifier_glob: x\ncapacity: [":              "",
		`[{"identifier_glob":"x"}]`:                    "",
		"":                                             "",
		`{"identifier_glob":"x","description":"` + strings.Repeat("y", MaxTemplateSize) + `"}`: "",
	} {
		if got := ReadGlob([]byte(doc)); got != want {
			t.Errorf("ReadGlob(%.60q) = %q, want %q", doc, got, want)
		}
	}
}

func TestUnknownKeyProblem(t *testing.T) {
	for key, guess := range map[string]string{
		"tempaltes.typo":   `"templates.typo"`,
		"template.db":      `"templates.db"`,
		"Namespaces.login": `"namespaces.login"`,
		"domain.app":       `"domains.app"`,
		"envoi.edge":       `"envoy.edge"`,
		"Envoy.edge":       `"envoy.edge"`,
		"mysql-main":       `"templates.mysql-main"`,
		"status.x":         "",
		"foo.bar":          "",
		"templatesx.":      "",
	} {
		p := UnknownKeyProblem(key)
		if !strings.Contains(p, "is ignored") || !strings.Contains(p, "templates.<name>") || !strings.Contains(p, "envoy.<domain>") {
			t.Errorf("%s: %q", key, p)
		}
		if guess == "" && strings.Contains(p, "did you mean") || guess != "" && !strings.Contains(p, "did you mean "+guess) {
			t.Errorf("%s: %q, want the guess %s", key, p, guess)
		}
	}
}
