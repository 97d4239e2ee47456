package domainlimit

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const exampleJSON = `{
  "ignore_configured": false,
  "allow_unconfigured": true,
  "tenants": ["TENANT_A"],
  "fail": "closed",
  "resources": {
    "api": {"kind": "rate", "hard_limit": 100, "global_limit": 1000,
            "tiers": [{"limit": 10, "window": "1s", "active": "10s", "cooldown": "20s"},
                      {"limit": 50, "window": "5s", "active": "3s", "skippable": true}],
            "domains": {"bigcustomer": {"tiers": [{"limit": 100, "window": "1s", "active": "1m"}]}}},
    "sandboxes": {"kind": "copies", "domain_limit": 5, "global_limit": 100,
            "domains": {"bigcustomer": {"domain_limit": 200}},
            "groups": [{"name": "free", "limit": 10, "domains": ["b", "a"]}]}
  }
}`

const exampleYAML = `
allow_unconfigured: true
tenants: [TENANT_A]
fail: closed
resources:
  api:
    kind: rate
    hard_limit: 100
    global_limit: 1000
    tiers:
      - {limit: 10, window: 1s, active: 10s, cooldown: 20s}
      - {limit: 50, window: 5s, active: 3s, skippable: true}
    domains:
      bigcustomer:
        tiers: [{limit: 100, window: 1s, active: 1m}]
  sandboxes:
    kind: copies
    domain_limit: 5
    global_limit: 100
    domains: {bigcustomer: {domain_limit: 200}}
    groups:
      - name: free
        limit: 10
        domains: [b, a]
`

func TestParseNamespace(t *testing.T) {
	want := &Namespace{Name: "shop", AllowUnconfigured: true, Tenants: []string{"TENANT_A"}, Fail: FailClosed, Resources: map[string]Resource{
		"api": {Name: "api", Kind: KindRate, Rate: RateSpec{Hard: 100, Global: 1000,
			Tiers: []Tier{{Limit: 10, Window: time.Second, Active: 10 * time.Second, Cooldown: 20 * time.Second},
				// window 5s shortened to the active 3s
				{Limit: 50, Window: 3 * time.Second, Active: 3 * time.Second, Skippable: true}},
			Domains: map[string][]Tier{"bigcustomer": {{Limit: 100, Window: time.Second, Active: time.Minute}}}}},
		"sandboxes": {Name: "sandboxes", Kind: KindCopies, Copies: CopySpec{DomainLimit: 5, GlobalLimit: 100,
			Domains: map[string]int64{"bigcustomer": 100}, // lowered to the global limit
			Groups:  []Group{{Name: "free", Limit: 10, Domains: []string{"a", "b"}}}}},
	}}
	wantNotes := []string{"resources.api.tiers[1].window: 5s shortened to the active time 3s",
		"resources.sandboxes.domains.bigcustomer.domain_limit: 200 lowered to the global limit 100"}
	for name, doc := range map[string]string{"json": exampleJSON, "yaml": exampleYAML} {
		got, notes, err := ParseNamespaceNotes("shop", []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(notes, wantNotes) {
			t.Fatalf("%s: notes %q, want %q", name, notes, wantNotes)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: got %+v\nwant %+v", name, got, want)
		}
		doc, err := MarshalNamespace(got)
		if err != nil {
			t.Fatal(err)
		}
		if again, err := ParseNamespace("shop", doc); err != nil || !reflect.DeepEqual(again, want) {
			t.Fatalf("%s: normalized document %s reads back as %+v, %v", name, doc, again, err)
		}
	}
	// Absent limits are Unlimited; an empty namespace is valid.
	ns, err := ParseNamespace("x", []byte(`{"resources": {"r": {"kind": "copies"}, "s": {"kind": "rate", "tiers": [{"window": "1s", "active": "1s"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := ns.Resources["r"].Copies; c.DomainLimit != Unlimited || c.GlobalLimit != Unlimited {
		t.Fatalf("absent copy limits: %+v", c)
	}
	if r := ns.Resources["s"].Rate; r.Hard != Unlimited || r.Tiers[0].Limit != Unlimited {
		t.Fatalf("absent rate limits: %+v", r)
	}
	if ns, err := ParseNamespace("x", []byte("{}")); err != nil || ns.Fail != FailShare {
		t.Fatalf("empty namespace: %+v, %v; want fail mode share", ns, err)
	}
	for _, m := range []FailMode{FailOpen, FailClosed, FailShare} {
		ns, err := ParseNamespace("x", []byte(`{"fail": "`+m.String()+`"}`))
		if err != nil || ns.Fail != m {
			t.Fatalf("fail: %s read as %+v, %v", m, ns, err)
		}
	}
}

func TestNormalizationNotes(t *testing.T) {
	_, notes, err := ParseNamespaceNotes("x", []byte(`{"resources": {
		"r": {"kind": "rate", "tiers": [{"window": "1s", "active": "0s"}, {"window": "2s", "active": "7s"}],
		      "domains": {"d": {"tiers": [{"window": "1m", "active": "10s"}]}}},
		"c": {"kind": "copies", "global_limit": 10, "domain_limit": 20, "groups": [{"name": "g", "limit": 11}, {"name": "h"}]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"resources.c.domain_limit: 20 lowered to the global limit 10",
		"resources.c.groups[0].limit: 11 lowered to the global limit 10",
		"resources.r.tiers[0]: dropped: with an active time of 0s it can never be entered",
		"resources.r.tiers[1].active: 7s trimmed to 6s, a whole number of 2s windows",
		"resources.r.domains.d.tiers[0].window: 1m0s shortened to the active time 10s",
	}
	if !reflect.DeepEqual(notes, want) {
		t.Fatalf("notes\n%q\nwant\n%q", notes, want)
	}
}

func TestParseNamespaceErrors(t *testing.T) {
	for _, c := range []struct{ doc, err string }{
		{``, "document is empty"},
		{`[]`, "must be a JSON object"},
		{`{"resources": {}} {}`, "unexpected data after"},
		{`{"resourcez": {}}`, "resourcez: unknown field"},
		{`{"ignore_configured": "yes"}`, "ignore_configured: want true or false"},
		{`{"resources": []}`, "resources: want an object"},
		{`{"resources": {"a.b": {"kind": "rate"}}}`, "resources: resource name \"a.b\" contains"},
		{`{"resources": {"api": {}}}`, "resources.api.kind: is required"},
		{`{"resources": {"api": {"kind": "burst"}}}`, "resources.api.kind: \"burst\" is not a kind"},
		{`{"resources": {"api": {"kind": "rate", "domain_limit": 3}}}`, "resources.api.domain_limit: unknown field"},
		{`{"resources": {"api": {"kind": "copies", "tiers": []}}}`, "resources.api.tiers: unknown field"},
		{`{"resources": {"api": {"kind": "rate", "hard_limit": -1}}}`, "resources.api.hard_limit: -1 is outside"},
		{`{"resources": {"api": {"kind": "rate", "hard_limit": 1.5}}}`, "resources.api.hard_limit: 1.5 is not an integer"},
		{`{"resources": {"api": {"kind": "rate", "hard_limit": 1e13}}}`, "resources.api.hard_limit"},
		{`{"resources": {"api": {"kind": "rate", "hard_limit": "100"}}}`, "want an integer"},
		{`{"resources": {"api": {"kind": "rate", "tiers": [{"window": "1s"}]}}}`, "resources.api.tiers[0].active: is required"},
		{`{"resources": {"api": {"kind": "rate", "tiers": [{"window": "1 sec", "active": "1s"}]}}}`, "resources.api.tiers[0].window: \"1 sec\" is not a duration"},
		{`{"resources": {"api": {"kind": "rate", "tiers": [{"window": 1, "active": "1s"}]}}}`, "tiers[0].window: want a duration string"},
		{`{"resources": {"api": {"kind": "rate", "tiers": [{"window": "-1s", "active": "1s"}]}}}`, "tiers[0].window: -1s is outside"},
		{`{"resources": {"api": {"kind": "rate", "tiers": [{"window": "0s", "active": "1s"}]}}}`, "resources.api.tiers[0].window: is 0"},
		{`{"resources": {"api": {"kind": "rate", "tiers": [{"window": "1s", "active": "1s", "burst": 1}]}}}`, "tiers[0].burst: unknown field"},
		{`{"resources": {"api": {"kind": "rate", "domains": {"a b": {"tiers": []}}}}}`, "resources.api.domains: domain \"a b\""},
		{`{"resources": {"api": {"kind": "rate", "domains": {"x": {"limit": 1}}}}}`, "resources.api.domains.x.limit: unknown field"},
		{`{"resources": {"s": {"kind": "copies", "groups": [{"limit": 1}]}}}`, "resources.s.groups[0].name: is required"},
		{`{"resources": {"s": {"kind": "copies", "groups": [{"name": "g"}, {"name": "g"}]}}}`, "resources.s.groups[1].name: group \"g\" is defined twice"},
		{`{"resources": {"s": {"kind": "copies", "groups": [{"name": "g", "domains": [1]}]}}}`, "resources.s.groups[0].domains[0]: want a domain name"},
		{`{"resources": {"s": {"kind": "copies", "domains": {"x": {"domain_limit": -2}}}}}`, "resources.s.domains.x.domain_limit: -2 is outside"},
		{`{"resources": {"s": {"kind": "copies"}, "s": {"kind": "rate"}}}`, "resources.s: field appears twice"},
		{"resources:\n  s: [unclosed", "invalid YAML"},
		{`{"tenants": "A"}`, "tenants: want a list of tenant"},
		{`{"tenants": []}`, "tenants: lists 0 tenants"},
		{`{"tenants": ["A", 1]}`, "tenants[1]: want a tenant name"},
		{`{"tenants": ["A", "B.C"]}`, "tenants[1]: tenant name \"B.C\" contains"},
		{`{"tenants": ["A", "A"]}`, "tenants[1]: tenant \"A\" is listed twice"},
		{`{"fail": "half"}`, `fail: "half" is not a fail mode: want "open", "closed" or "share"`},
		{`{"fail": "Open"}`, `fail: "Open" is not a fail mode`},
		{`{"fail": ""}`, `fail: "" is not a fail mode`},
		{`{"fail": true}`, `fail: want "open", "closed" or "share", got a boolean`},
		{`{"fail": ["open"]}`, `fail: want "open", "closed" or "share", got`},
		{`{"fail": "open", "fail": "closed"}`, "fail: field appears twice"},
		{strings.Repeat("[", 100), "nested too deeply"},
	} {
		_, err := ParseNamespace("ns", []byte(c.doc))
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.err) {
			t.Errorf("ParseNamespace(%.60q) = %v\nwant an error containing %q", c.doc, err, c.err)
		}
	}
	if _, err := ParseNamespace("a.b", []byte("{}")); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad namespace name: %v", err)
	}
}

func TestResolve(t *testing.T) {
	ns, err := ParseNamespace("shop", []byte(exampleJSON))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ns.Resolve("api", KindRate); err != nil || r.Rate.Hard != 100 {
		t.Fatalf("Resolve(api) = %+v, %v", r, err)
	}
	if _, err := ns.Resolve("api", KindCopies); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("reserve on a rate resource: %v", err)
	}
	if _, err := ns.Resolve("sandboxes", KindRate); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("request on a copy resource: %v", err)
	}
	r, err := ns.Resolve("new", KindRate) // allow_unconfigured
	if err != nil || !reflect.DeepEqual(r.Rate, PermissiveRate()) || !r.Permissive {
		t.Fatalf("unconfigured resource: %+v, %v", r, err)
	}
	if r, err := ns.Resolve("sandboxes", KindCopies); err != nil || r.Permissive || r.Copies.DomainLimit != 5 {
		t.Fatalf("configured resource: %+v, %v", r, err)
	}
	ns.IgnoreConfigured = true
	if r, err := ns.Resolve("sandboxes", KindCopies); err != nil || !r.Permissive || r.Copies.DomainLimit != Unlimited {
		t.Fatalf("ignore_configured: %+v, %v", r, err)
	}
	if _, err := ns.Resolve("sandboxes", KindRate); !errors.Is(err, ErrWrongKind) {
		t.Fatalf("ignore_configured keeps the kind check: %v", err)
	}
	if _, err := ns.Resolve("api", 0); !errors.Is(err, ErrInvalid) {
		t.Fatalf("kind 0: %v", err)
	}
	ns.IgnoreConfigured = false
	ns.AllowUnconfigured = false
	if _, err := ns.Resolve("new", KindRate); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("unknown resource: %v", err)
	}
	if _, err := ns.Resolve("a b", KindRate); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad resource name: %v", err)
	}
	// The permissive specs are valid and grant everything.
	rate, err := NewRate(PermissiveRate())
	if err != nil {
		t.Fatal(err)
	}
	if res, _ := rate.Request(epoch.UnixNano(), "d", MaxLimit, MaxLimit); res.Granted != MaxLimit {
		t.Fatalf("permissive rate: %+v", res)
	}
}

// FuzzParseNamespace: no input panics, and what parses is valid: every
// spec passes Normalize unchanged and builds a Rate or Copies.
func FuzzParseNamespace(f *testing.F) {
	for _, s := range []string{exampleJSON, exampleYAML, `{}`, `{"resources": {"r": {"kind": "copies"}}}`, `{"fail": "open"}`, "fail: share",
		`{"resources": {"a": {"kind": "rate", "tiers": [{"limit": 0, "window": "1ns", "active": "8760h"}]}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ns, err := ParseNamespace("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		doc, err := MarshalNamespace(ns)
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseNamespace("fuzz", doc)
		if err != nil || !reflect.DeepEqual(again, ns) {
			t.Fatalf("MarshalNamespace does not round-trip: %s\n%+v\n%+v, %v", doc, ns, again, err)
		}
		for name, r := range ns.Resources {
			switch r.Kind {
			case KindRate:
				again, err := r.Rate.Normalize()
				if err != nil || !reflect.DeepEqual(again, r.Rate) {
					t.Fatalf("%s: normalized spec changes again: %+v → %+v, %v", name, r.Rate, again, err)
				}
				if _, err := NewRate(r.Rate); err != nil {
					t.Fatal(err)
				}
			case KindCopies:
				if _, err := NewCopies(r.Copies); err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatalf("%s: kind %v", name, r.Kind)
			}
		}
	})
}
