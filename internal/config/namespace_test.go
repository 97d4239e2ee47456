package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/quota"
)

const loginsJSON = `{
  "buckets": {"alice": {"size": 10, "fill_rate": 1, "wait_timeout": "0s", "soft_limit": 0.8, "critical_reserve": 0.2,
                        "ban": {"threshold": 100, "interval": "1s", "duration": "1m"}}},
  "default_bucket": {"algorithm": "FIXED_WINDOW", "limit": 100, "window": "1m"},
  "dynamic_bucket_template": {"size": 5, "fill_rate": 0.5, "max_idle": "10m", "max_debt": "2s", "max_tokens_per_request": 3}
}`

const loginsYAML = `
buckets:
  alice:
    size: 10
    fill_rate: 1
    wait_timeout: 0s
    soft_limit: 0.8
    critical_reserve: 0.2
    ban: {threshold: 100, interval: 1s, duration: 1m}
default_bucket:
  algorithm: FIXED_WINDOW
  limit: 100
  window: 1m
dynamic_bucket_template:
  size: 5
  fill_rate: 0.5
  max_idle: 10m
  max_debt: 2s
  max_tokens_per_request: 3
`

func TestParseNamespace(t *testing.T) {
	for name, doc := range map[string]string{"json": loginsJSON, "yaml": loginsYAML} {
		t.Run(name, func(t *testing.T) {
			ns, notes, err := ParseNamespace("logins", 7, []byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			alice := ns.Buckets["alice"]
			want := quota.Spec{Algorithm: quota.TokenBucket, Size: 10, FillRate: 1, WaitTimeout: 0, MaxDebt: 10 * time.Second,
				MaxTokensPerRequest: 1, SoftLimit: 0.8, CriticalReserve: 0.2, Ban: quota.Ban{Threshold: 100, Interval: time.Second, Duration: time.Minute}}
			if *alice != want {
				t.Errorf("alice = %+v\nwant %+v", *alice, want)
			}
			wantDef := quota.Spec{Algorithm: quota.FixedWindow, Limit: 100, Window: time.Minute, WaitTimeout: time.Second, MaxTokensPerRequest: 100}
			if *ns.Default != wantDef {
				t.Errorf("default = %+v\nwant %+v", *ns.Default, wantDef)
			}
			wantDyn := quota.Spec{Algorithm: quota.TokenBucket, Size: 5, FillRate: 0.5, WaitTimeout: time.Second, MaxIdle: 10 * time.Minute, MaxDebt: 2 * time.Second, MaxTokensPerRequest: 3}
			if *ns.Dynamic != wantDyn {
				t.Errorf("dynamic = %+v\nwant %+v", *ns.Dynamic, wantDyn)
			}
			if ns.Name != "logins" || ns.Revision != 7 || ns.MaxDynamicBuckets != DefaultMaxDynamicBuckets {
				t.Errorf("namespace = %+v", ns)
			}
			if len(notes) != 1 || !strings.Contains(notes[0], "max_dynamic_buckets") {
				t.Errorf("notes = %q", notes)
			}
		})
	}
}

// TestParseNamespaceDefaults: an empty bucket object is quotaservice's
// default token bucket.
func TestParseNamespaceDefaults(t *testing.T) {
	ns, _, err := ParseNamespace("_default", 1, []byte(`{"defaultBucket": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := quota.Spec{Algorithm: quota.TokenBucket, Size: 100, FillRate: 50, WaitTimeout: time.Second, MaxDebt: 10 * time.Second, MaxTokensPerRequest: 50}
	if *ns.Default != want {
		t.Errorf("default = %+v, want %+v", *ns.Default, want)
	}
	if *ns.Default != quota.DefaultSpec() {
		t.Errorf("default = %+v, the core's DefaultSpec is %+v", *ns.Default, quota.DefaultSpec())
	}
	ns, _, err = ParseNamespace("gcra", 1, []byte(`{"default_bucket": {"algorithm": "GCRA", "limit": 10, "window": "1s", "size": 3}, "dynamic_bucket_template": {}, "max_dynamic_buckets": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	if ns.Default.Size != 3 || ns.Default.Limit != 10 || ns.MaxDynamicBuckets != 5 {
		t.Errorf("gcra = %+v, %+v", ns, ns.Default)
	}
}

func TestParseNamespaceErrors(t *testing.T) {
	for _, c := range []struct{ name, doc, want string }{
		{"logins", ``, "namespace is empty"},
		{"logins", `[]`, "must be a JSON object"},
		{"logins", `{"bukets": {}}`, "bukets: unknown field"},
		{"logins", `{"shadow": "yes"}`, "shadow: want true or false, got a string"},
		{"logins", `{"tenants": "A"}`, "tenants: want a list of tenant"},
		{"logins", `{"tenants": []}`, "tenants: lists 0 tenants"},
		{"logins", `{"tenants": ["A", 2]}`, "tenants[1]: want a tenant name"},
		{"logins", `{"tenants": [""]}`, "tenants[0]: is empty"},
		{"logins", `{"tenants": ["A.B"]}`, "tenants[0]: \"A.B\" is not an account name"},
		{"logins", `{"tenants": ["A", "A"]}`, "tenants[1]: tenant \"A\" is listed twice"},
		{"logins", `{"buckets": {"a": {}}, "buckets": {}}`, "buckets: field appears twice"},
		{"logins", `{"default_bucket": {}, "defaultBucket": {}}`, "field is set twice"},
		{"logins", `{"buckets": []}`, "buckets: want an object"},
		{"logins", `{"buckets": {"al ice": {}}}`, `buckets.al ice: bucket name "al ice" contains " "`},
		{"logins", `{"buckets": {"` + strings.Repeat("a", 65) + `": {}}}`, "the limit is 64"},
		{"logins", `{"buckets": {"a": 5}}`, "buckets.a: want a bucket object"},
		{"logins", `{"buckets": {"a": {"sise": 5}}}`, "buckets.a.sise: unknown field"},
		{"logins", `{"default_bucket": {"algorithm": "TOKENBUCKET"}}`, `default_bucket.algorithm: unknown algorithm "TOKENBUCKET"`},
		{"logins", `{"default_bucket": {"algorithm": 1}}`, "default_bucket.algorithm: want an algorithm name"},
		{"logins", `{"default_bucket": {"size": -1}}`, "default_bucket.size: -1 is outside [1, 1000000000000]"},
		{"logins", `{"default_bucket": {"size": 0}}`, "default_bucket.size: 0 is outside"},
		{"logins", `{"default_bucket": {"size": 1.5}}`, "default_bucket.size: 1.5 is not a whole number"},
		{"logins", `{"default_bucket": {"size": 1e30}}`, "default_bucket.size: 1e30 is outside"},
		{"logins", `{"default_bucket": {"size": 99999999999999999999999}}`, "is outside"},
		{"logins", `{"default_bucket": {"size": "100"}}`, `default_bucket.size: want an integer, got a string ("100"): write numbers without quotes`},
		{"logins", `{"default_bucket": {"fill_rate": "NaN"}}`, "default_bucket.fill_rate: want a number, got a string"},
		{"logins", `{"default_bucket": {"fill_rate": 0}}`, "default_bucket.fill_rate: 0 is outside (0, 1e+09]"},
		{"logins", `{"default_bucket": {"fill_rate": -5}}`, "fill_rate: -5 is outside"},
		{"logins", `{"default_bucket": {"fill_rate": 1e400}}`, "fill_rate: 1e400 is not a finite number"},
		{"logins", `{"default_bucket": {"wait_timeout": "1 second"}}`, `default_bucket.wait_timeout: invalid duration "1 second"`},
		{"logins", `{"default_bucket": {"wait_timeout": 1}}`, "default_bucket.wait_timeout: want a duration string"},
		{"logins", `{"default_bucket": {"max_idle": "-1s"}}`, "default_bucket.max_idle: -1s is negative"},
		{"logins", `{"default_bucket": {"max_debt": "1000h"}}`, "max_debt: 1000h0m0s is longer than the limit of 744h0m0s"},
		{"logins", `{"default_bucket": {"max_tokens_per_request": 0}}`, "max_tokens_per_request: 0 is outside"},
		{"logins", `{"default_bucket": {"soft_limit": 1}}`, "default_bucket.soft_limit: 1 is outside [0, 1)"},
		{"logins", `{"default_bucket": {"critical_reserve": -0.1}}`, "critical_reserve: -0.1 is outside [0, 1)"},
		{"logins", `{"default_bucket": {"ban": {"threshold": 5}}}`, "default_bucket.ban.interval: is required when ban is set"},
		{"logins", `{"default_bucket": {"ban": {"threshold": 5, "interval": "1s", "duration": "0s"}}}`, "ban.duration: 0s is shorter than the minimum"},
		{"logins", `{"default_bucket": {"ban": {"threshold": 5, "interval": "1s", "duration": "1s", "x": 1}}}`, "ban.x: unknown field"},
		{"logins", `{"default_bucket": {"algorithm": "FIXED_WINDOW", "limit": 5}}`, "default_bucket.window: is required for FIXED_WINDOW"},
		{"logins", `{"default_bucket": {"algorithm": "FIXED_WINDOW", "limit": 5, "window": "1m", "fill_rate": 3}}`, "default_bucket.fill_rate: does not apply to FIXED_WINDOW"},
		{"logins", `{"default_bucket": {"algorithm": "SLIDING_WINDOW_LOG", "limit": 5, "window": "1m", "size": 3}}`, "default_bucket.size: does not apply to SLIDING_WINDOW_LOG"},
		{"logins", `{"default_bucket": {"algorithm": "FIXED_WINDOW", "limit": 5, "window": "10us"}}`, "default_bucket.window: 10µs is shorter than the minimum of 1ms"},
		{"logins", `{"default_bucket": {"limit": 5}}`, "default_bucket.limit: does not apply to TOKEN_BUCKET"},
		{"logins", `{"default_bucket": {"algorithm": "LEAKY_BUCKET", "max_debt": "1s"}}`, "default_bucket.max_debt: does not apply to LEAKY_BUCKET"},
		{"logins", `{"max_dynamic_buckets": 5}`, "max_dynamic_buckets: is set but dynamic_bucket_template is not"},
		{"logins", `{"dynamic_bucket_template": {}, "max_dynamic_buckets": 0}`, "max_dynamic_buckets: 0 is outside [1, 1000000]"},
		{"logins", `{"dynamic_bucket_template": {}, "max_dynamic_buckets": 10000000}`, "max_dynamic_buckets: 10000000 is outside"},
		{"_default", `{"buckets": {"a": {}}, "default_bucket": {}}`, "namespace _default holds only default_bucket"},
		{"_default", `{}`, "default_bucket: is required in namespace _default"},
		{"log-ins", `{}`, `name: namespace name "log-ins" contains "-"`},
		{"", `{}`, "namespace name is empty"},
		{"logins", "buckets: [a", "invalid YAML"},
		{"logins", `{"a": 1} {}`, "unexpected data after the object"},
		{"logins", strings.Repeat(" ", MaxTemplateSize+1), "the limit is 65536"},
	} {
		_, _, err := ParseNamespace(c.name, 1, []byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseNamespace(%q, %s) = %v, want error containing %q", c.name, c.doc, err, c.want)
			continue
		}
		if !IsValidationError(err) {
			t.Errorf("%s: %v is not a validation error", c.doc, err)
		}
	}
}

func TestNamespaceKeys(t *testing.T) {
	if k := NamespaceKey("logins"); k != "namespaces.logins" {
		t.Errorf("NamespaceKey = %q", k)
	}
	if ns, ok := NamespaceFromKey("namespaces.logins"); !ok || ns != "logins" {
		t.Errorf("NamespaceFromKey = %q, %v", ns, ok)
	}
	if _, ok := NamespaceFromKey("templates.logins"); ok {
		t.Error("a template key is a namespace key")
	}
}

func TestExplainBucket(t *testing.T) {
	logins, _, err := ParseNamespace("logins", 3, []byte(loginsJSON))
	if err != nil {
		t.Fatal(err)
	}
	plain, _, err := ParseNamespace("plain", 4, []byte(`{"default_bucket": {"size": 7}}`))
	if err != nil {
		t.Fatal(err)
	}
	empty, _, err := ParseNamespace("empty", 5, []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	global, _, err := ParseNamespace("_default", 9, []byte(`{"default_bucket": {"size": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	withGlobal := NewQuotaConfig(logins, plain, empty, global)
	without := NewQuotaConfig(logins, plain, empty)
	for _, c := range []struct {
		cfg    *quota.Config
		bucket string
		src    BucketSource
		spec   *quota.Spec
		rev    uint64
	}{
		{withGlobal, "logins:alice", SourceNamed, logins.Buckets["alice"], 3},
		{withGlobal, "logins:bob", SourceDynamic, logins.Dynamic, 3},
		{withGlobal, "plain:bob", SourceDefault, plain.Default, 4},
		{withGlobal, "empty:bob", SourceGlobalDefault, global.Default, 9},
		{withGlobal, "nope:bob", SourceGlobalDefault, global.Default, 9},
		{without, "nope:bob", SourceNone, nil, 0},
		{without, "Plain:bob", SourceNone, nil, 0}, // case-sensitive
	} {
		m, err := ExplainBucket(c.cfg, c.bucket)
		if err != nil {
			t.Fatalf("%s: %v", c.bucket, err)
		}
		if m.Source != c.src || m.Spec != c.spec || m.Revision != c.rev {
			t.Errorf("%s: got %s %+v rev %d, want %s rev %d", c.bucket, m.Source, m.Spec, m.Revision, c.src, c.rev)
		}
		if !strings.Contains(m.String(), c.bucket) {
			t.Errorf("%s: String() = %q", c.bucket, m.String())
		}
	}
	for _, bad := range []string{"", "logins", "logins:", ":x", "logins:al-ice", "a:b:c", "logins:" + strings.Repeat("x", 200)} {
		if _, err := ExplainBucket(withGlobal, bad); err == nil {
			t.Errorf("ExplainBucket(%q) accepted", bad)
		}
	}
}

// TestMarshalNamespaceRoundTrip: the normalized document reads back as
// the same namespace.
func TestMarshalNamespaceRoundTrip(t *testing.T) {
	for _, doc := range []string{loginsJSON, `{"default_bucket": {"algorithm": "GCRA", "limit": 10, "window": "1s", "size": 3}}`, `{}`,
		`{"buckets": {"x": {"algorithm": "LEAKY_BUCKET", "fill_rate": 0.25}}, "dynamic_bucket_template": {"algorithm": "SLIDING_WINDOW_COUNTER", "limit": 5, "window": "1h"}, "max_dynamic_buckets": 7}`,
		`{"default_bucket": {"size": 3}, "shadow": true, "tenants": ["TENANT_A", "TENANT_B"]}`} {
		ns, _, err := ParseNamespace("n", 2, []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		out, err := MarshalNamespaceJSON(ns)
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := ParseNamespace("n", 2, out)
		if err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if !reflect.DeepEqual(ns, back) {
			t.Errorf("%s\nreads back as %+v, want %+v", out, back, ns)
		}
	}
}

// TestParseNamespaceCoreRules: what the decision core would skip as
// invalid is refused by the parser, so a namespace that parses is always
// served whole.
func TestParseNamespaceCoreRules(t *testing.T) {
	for _, c := range []struct{ doc, want string }{
		{`{"default_bucket": {"algorithm": "SLIDING_WINDOW_LOG", "limit": 100001, "window": "1m"}}`, "default_bucket: limit: 100001 is out of range"},
		{`{"default_bucket": {"size": 1000000000000, "fill_rate": 0.001}}`, "default_bucket: size: 1000000000000 tokens take longer than"},
	} {
		_, _, err := ParseNamespace("n", 1, []byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.doc, err, c.want)
		}
	}
}

// TestParseNamespaceShadow: "shadow" reaches the compiled namespace, in
// JSON and YAML, also in the global default.
func TestParseNamespaceShadow(t *testing.T) {
	for name, doc := range map[string]string{
		"logins":   `{"shadow": true, "default_bucket": {}}`,
		"tenants":  "shadow: true\ndefault_bucket: {}\n",
		"_default": `{"shadow": true, "default_bucket": {}}`,
	} {
		ns, _, err := ParseNamespace(name, 1, []byte(doc))
		if err != nil || !ns.Shadow {
			t.Errorf("%s: %v, shadow %v", name, err, ns != nil && ns.Shadow)
		}
	}
	if ns, _, err := ParseNamespace("logins", 1, []byte(`{"default_bucket": {}}`)); err != nil || ns.Shadow {
		t.Errorf("without shadow: %v, shadow %v", err, ns != nil && ns.Shadow)
	}
}

// TestParseNamespaceReportsEveryProblem: every problem of a namespace
// document is reported at once, across its buckets and fields.
func TestParseNamespaceReportsEveryProblem(t *testing.T) {
	doc := `{"buckets": {"a": {"size": -1, "fill_rate": 0, "wait_timeout": "soon"}, "b": {"algorithm": "FIXED_WINDOW", "fill_rate": 2}},
	         "max_dynamic_buckets": 5, "shadow": "yes", "unknown": 1}`
	_, _, err := ParseNamespace("logins", 1, []byte(doc))
	want := []string{
		"unknown: unknown field",
		"buckets.a.size: -1 is outside",
		"buckets.a.fill_rate: 0 is outside",
		`buckets.a.wait_timeout: invalid duration "soon"`,
		"buckets.b.fill_rate: does not apply to FIXED_WINDOW",
		"buckets.b.limit: is required",
		"buckets.b.window: is required",
		"max_dynamic_buckets: is set but dynamic_bucket_template is not",
		"shadow: want true or false",
	}
	got := ProblemList(err)
	if len(got) != len(want) {
		t.Fatalf("%d problems, want %d: %q", len(got), len(want), got)
	}
	for i, w := range want {
		if !strings.Contains(got[i], w) {
			t.Errorf("problem %d is %q, want it to say %q", i, got[i], w)
		}
	}
}

// TestNamespaceDurationForms: a namespace's durations read the same in
// Go's syntax and in protojson's, as quota requests' max_wait does.
func TestNamespaceDurationForms(t *testing.T) {
	for _, form := range []string{`"250ms"`, `"0.250s"`, `"0.25s"`} {
		ns, _, err := ParseNamespace("n", 1, []byte(`{"default_bucket": {"wait_timeout": `+form+`, "max_idle": "1m30s"}}`))
		if err != nil || ns.Default.WaitTimeout != 250*time.Millisecond || ns.Default.MaxIdle != 90*time.Second {
			t.Errorf("wait_timeout %s: %+v, %v", form, ns, err)
		}
	}
}
