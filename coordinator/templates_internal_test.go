package coordinator

import (
	"strings"
	"testing"

	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
)

// TestParseTemplates: templates given as the documents allot_config
// stores serve the resources they match, the rest get the built-in
// default, and invalid documents are refused with every problem named.
func TestParseTemplates(t *testing.T) {
	src, err := ParseTemplates(map[string][]byte{
		"db":    []byte(`{"identifier_glob": "db/*", "capacity": 5, "algorithm": {"kind": "FAIR_SHARE", "lease_length": "10s", "refresh_interval": "500ms"}}`),
		"batch": []byte("identifier_glob: batch\ncapacity: 7\nalgorithm: {kind: STATIC}\n"),
	})
	if err != nil {
		t.Fatal(err)
	}
	set := sources.CurrentTemplates(src)
	for id, want := range map[string]string{"db/main": "db", "batch": "batch", "other": "builtin:default"} {
		if got := set.Match(id); got == nil || got.Name != want {
			t.Errorf("Match(%q) = %+v, want template %s", id, got, want)
		}
	}
	if got := set.Match("db/main"); got.Capacity != 5 || got.RefreshInterval.String() != "500ms" {
		t.Errorf("db/main gets %+v", got)
	}

	_, err = ParseTemplates(map[string][]byte{
		"ok":        []byte(`{"identifier_glob": "a", "capacity": 1}`),
		"bad":       []byte(`{"identifier_glob": "b", "capacity": -5, "algorithm": {"kind": "FAIR_SHAER"}}`),
		"bad name!": []byte(`{"identifier_glob": "c"}`),
	})
	if err == nil {
		t.Fatal("invalid templates accepted")
	}
	for _, want := range []string{"template bad: 2 problems:", "FAIR_SHAER", "capacity: -5 is negative", "template bad name!:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// TestTemplatesFromProto: templates built in Go are checked and matched
// as documents are.
func TestTemplatesFromProto(t *testing.T) {
	src, err := TemplatesFromProto(map[string]*allotpb.ResourceTemplate{
		"db": {IdentifierGlob: "db/*", Capacity: 5, Algorithm: &allotpb.Algorithm{Kind: allotpb.Algorithm_FAIR_SHARE}},
	})
	if err != nil {
		t.Fatal(err)
	}
	set := sources.CurrentTemplates(src)
	if got := set.Match("db/main"); got == nil || got.Name != "db" || got.Capacity != 5 {
		t.Errorf("db/main gets %+v", got)
	}
	if got := set.Match("other"); got == nil || got.Name != "builtin:default" {
		t.Errorf("other gets %+v", got)
	}
	_, err = TemplatesFromProto(map[string]*allotpb.ResourceTemplate{"bad": {IdentifierGlob: "b", Capacity: -5}, "nil": nil})
	for _, want := range []string{"template bad:", "capacity: -5 is negative", "template nil:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
