package config

import (
	"reflect"
	"strings"
	"testing"
)

// A template's tenant policy, written in YAML as a user would, compiles
// into bounds, weights and caps.
func TestTenantPolicyCompiles(t *testing.T) {
	doc := `
identifier_glob: "api/*"
capacity: 100
algorithm: {kind: FAIR_SHARE}
max_priority: 7
tenants:
  fair: true
  default_max_priority: 0
  max_clients: 1000
  max_resources: 20
  accounts:
    - {name: TENANT_A, weight: 2, max_priority: 10}
    - {name: TENANT_B, max_priority: -5}
    - {name: "", weight: 0.5}
`
	tm, _, err := ParseAndCompile("api", 1, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	p := tm.Tenants
	if p == nil || !p.Fair || p.MaxClients != 1000 || p.MaxResources != 20 {
		t.Fatalf("policy %+v", p)
	}
	for _, c := range []struct {
		tenant string
		weight float64
		bound  int32
		has    bool
	}{{"TENANT_A", 2, 10, true}, {"TENANT_B", 1, -5, true}, {"TENANT_C", 1, 0, true}, {PlainTenant, 0.5, 0, false}} {
		b, has := p.PriorityBound(c.tenant)
		if w := p.Weight(c.tenant); w != c.weight || b != c.bound || has != c.has {
			t.Errorf("%q: weight %v, bound %v %v; want %v, %v %v", c.tenant, w, b, has, c.weight, c.bound, c.has)
		}
	}
	// The normalized form (allot config get --normalized) compiles back
	// into the same policy and template max_priority (which it used to
	// drop).
	out, err := MarshalTemplateJSON(tm)
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := ParseAndCompile("api", 1, out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !reflect.DeepEqual(again.Tenants, tm.Tenants) || !again.HasMaxPriority || again.MaxPriority != 7 {
		t.Fatalf("round trip: %+v, want %+v\n%s", again.Tenants, tm.Tenants, out)
	}
	if tm, _, err := ParseAndCompile("api", 1, []byte(`{"identifier_glob":"a","capacity":1,"algorithm":{"kind":"FAIR_SHARE"}}`)); err != nil || tm.Tenants != nil {
		t.Fatalf("a template without tenants: %v %v", tm.Tenants, err)
	}
}

// Every mistake in a tenant policy rejects the template with a message
// naming the field.
func TestTenantPolicyErrors(t *testing.T) {
	for _, tc := range []struct{ tenants, want string }{
		{`{fair: true}`, "tenants.fair: needs algorithm FAIR_SHARE or PROPORTIONAL_SHARE"},
		{`{accounts: [{name: A, weight: 2}]}`, "tenants.accounts[0].weight: is set but tenants.fair is not"},
		{`{fair: true, accounts: [{name: A, weight: 0}]}`, "tenants.accounts[0].weight: 0 is not in (0, 1e+06]"},
		{`{fair: true, accounts: [{name: A, weight: -1}]}`, "is not in"},
		{`{fair: true, accounts: [{name: A, weight: 2e6}]}`, "is not in"},
		{`{accounts: [{name: A, max_priority: 1001}]}`, "tenants.accounts[0].max_priority: 1001 is outside [-1000, 1000]"},
		{`{default_max_priority: -1001}`, "tenants.default_max_priority: -1001 is outside"},
		{`{accounts: [{name: A, max_priority: 1}, {name: A, max_priority: 2}]}`, "tenants.accounts[1].name: tenant \"A\" is listed twice"},
		{`{accounts: [{name: "A B", max_priority: 1}]}`, "tenants.accounts[0].name: tenant name \"A B\" contains a space"},
		{`{accounts: [{name: "a.b", max_priority: 1}]}`, "is not an account name"},
		{`{accounts: [{name: "*", max_priority: 1}]}`, "is not an account name"},
		{`{accounts: [{name: A}]}`, "sets neither weight nor max_priority"},
		{`{max_clients: 2000000000}`, "tenants.max_clients: 2000000000 is above the limit"},
		{`{max_resources: -1}`, "invalid value for uint32 field maxResources: -1"},
		{`{weights: {A: 1}}`, "tenants.weights: unknown field"},
	} {
		doc := "identifier_glob: a\ncapacity: 1\nalgorithm: {kind: STATIC}\ntenants: " + tc.tenants + "\n"
		if strings.Contains(tc.tenants, "fair: true, ") {
			doc = strings.Replace(doc, "STATIC", "FAIR_SHARE", 1)
		}
		_, _, err := ParseAndCompile("a", 1, []byte(doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tenants %s: %v, want an error with %q", tc.tenants, err, tc.want)
		}
	}
}
