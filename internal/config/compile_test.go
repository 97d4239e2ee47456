package config

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/proto/allotpb"
)

// tmpl builds a valid FAIR_SHARE template and lets a test change it.
func tmpl(edit func(*allotpb.ResourceTemplate)) *allotpb.ResourceTemplate {
	pb := &allotpb.ResourceTemplate{
		IdentifierGlob: "mysql/main",
		Capacity:       500,
		Algorithm: &allotpb.Algorithm{
			Kind:            allotpb.Algorithm_FAIR_SHARE,
			LeaseLength:     durationpb.New(60 * time.Second),
			RefreshInterval: durationpb.New(5 * time.Second),
		},
	}
	if edit != nil {
		edit(pb)
	}
	return pb
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name  string
		tname string
		edit  func(*allotpb.ResourceTemplate)
		field string
		want  string
	}{
		{"empty name", "", nil, "name", "empty"},
		{"name with dot", "a.b", nil, "name", "contains \".\""},
		{"name with space", "a b", nil, "name", "contains"},
		{"name too long", strings.Repeat("a", MaxNameLen+1), nil, "name", "limit"},
		{"empty glob", "t", func(p *allotpb.ResourceTemplate) { p.IdentifierGlob = "" }, "identifier_glob", "empty"},
		{"glob with space", "t", func(p *allotpb.ResourceTemplate) { p.IdentifierGlob = "my sql/*" }, "identifier_glob", "space"},
		{"glob with control", "t", func(p *allotpb.ResourceTemplate) { p.IdentifierGlob = "a\x01" }, "identifier_glob", "control"},
		{"glob invalid utf8", "t", func(p *allotpb.ResourceTemplate) { p.IdentifierGlob = "a\xff" }, "identifier_glob", "UTF-8"},
		{"glob too long", "t", func(p *allotpb.ResourceTemplate) { p.IdentifierGlob = strings.Repeat("a", 257) }, "identifier_glob", "limit"},
		{"negative capacity", "t", func(p *allotpb.ResourceTemplate) { p.Capacity = -1 }, "capacity", "negative"},
		{"NaN capacity", "t", func(p *allotpb.ResourceTemplate) { p.Capacity = math.NaN() }, "capacity", "NaN"},
		{"Inf capacity", "t", func(p *allotpb.ResourceTemplate) { p.Capacity = math.Inf(1) }, "capacity", "infinite"},
		{"huge capacity", "t", func(p *allotpb.ResourceTemplate) { p.Capacity = 2e15 }, "capacity", "limit"},
		{"unknown kind", "t", func(p *allotpb.ResourceTemplate) { p.Algorithm.Kind = 42 }, "algorithm.kind", "unknown algorithm 42"},
		{"negative lease", "t", func(p *allotpb.ResourceTemplate) { p.Algorithm.LeaseLength = durationpb.New(-time.Second) }, "algorithm.lease_length", "negative"},
		{"lease too long", "t", func(p *allotpb.ResourceTemplate) { p.Algorithm.LeaseLength = durationpb.New(25 * time.Hour) }, "algorithm.lease_length", "limit"},
		{"lease too short", "t", func(p *allotpb.ResourceTemplate) {
			p.Algorithm.LeaseLength = durationpb.New(50 * time.Millisecond)
			p.Algorithm.RefreshInterval = nil
		}, "algorithm.lease_length", "minimum"},
		{"invalid duration", "t", func(p *allotpb.ResourceTemplate) {
			p.Algorithm.LeaseLength = &durationpb.Duration{Seconds: 1, Nanos: -1}
		}, "algorithm.lease_length", "invalid"},
		{"negative refresh", "t", func(p *allotpb.ResourceTemplate) { p.Algorithm.RefreshInterval = durationpb.New(-time.Second) }, "algorithm.refresh_interval", "negative"},
		{"refresh too short", "t", func(p *allotpb.ResourceTemplate) { p.Algorithm.RefreshInterval = durationpb.New(5 * time.Millisecond) }, "algorithm.refresh_interval", "minimum"},
		{"lease shorter than refresh", "t", func(p *allotpb.ResourceTemplate) {
			p.Algorithm.LeaseLength = durationpb.New(2 * time.Second)
		}, "algorithm.refresh_interval", "longer than lease_length"},
		{"negative learning", "t", func(p *allotpb.ResourceTemplate) {
			p.Algorithm.LearningModeDuration = durationpb.New(-time.Second)
		}, "algorithm.learning_mode_duration", "negative"},
		{"unknown parameter", "t", func(p *allotpb.ResourceTemplate) {
			p.Algorithm.Parameters = []*allotpb.NamedParameter{{Name: "burst", Value: "3"}}
		}, "algorithm.parameters[0]", "unknown parameter \"burst\""},
		{"unnamed parameter", "t", func(p *allotpb.ResourceTemplate) {
			p.Algorithm.Parameters = []*allotpb.NamedParameter{{Value: "3"}}
		}, "algorithm.parameters[0]", "no name"},
		{"safe capacity negative", "t", func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(-2.0) }, "safe_capacity", "negative"},
		{"safe capacity NaN", "t", func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(math.NaN()) }, "safe_capacity", "not a number"},
		{"safe capacity Inf", "t", func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(math.Inf(1)) }, "safe_capacity", "not a number"},
		{"safe capacity huge", "t", func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(1e16) }, "safe_capacity", "limit"},
		{"description too long", "t", func(p *allotpb.ResourceTemplate) { p.Description = strings.Repeat("d", MaxDescriptionLen+1) }, "description", "limit"},
		{"safe capacity and floor", "t", func(p *allotpb.ResourceTemplate) {
			p.SafeCapacity, p.Partition = ptr(5.0), &allotpb.PartitionPolicy{Floor: ptr(3.0)}
		}, "safe_capacity", "together with partition.floor"},
		{"floor and floor share", "t", func(p *allotpb.ResourceTemplate) {
			p.Partition = &allotpb.PartitionPolicy{Floor: ptr(3.0), FloorShare: ptr(0.5)}
		}, "partition", "both set"},
		{"floor negative", "t", func(p *allotpb.ResourceTemplate) { p.Partition = &allotpb.PartitionPolicy{Floor: ptr(-1.0)} }, "partition.floor", "negative"},
		{"floor NaN", "t", func(p *allotpb.ResourceTemplate) { p.Partition = &allotpb.PartitionPolicy{Floor: ptr(math.NaN())} }, "partition.floor", "NaN"},
		{"floor share above 1", "t", func(p *allotpb.ResourceTemplate) { p.Partition = &allotpb.PartitionPolicy{FloorShare: ptr(1.5)} }, "partition.floor_share", "from 0 to 1"},
		{"floor share NaN", "t", func(p *allotpb.ResourceTemplate) { p.Partition = &allotpb.PartitionPolicy{FloorShare: ptr(math.NaN())} }, "partition.floor_share", "from 0 to 1"},
		{"floor lease negative", "t", func(p *allotpb.ResourceTemplate) {
			p.Partition = &allotpb.PartitionPolicy{FloorLease: durationpb.New(-time.Second)}
		}, "partition.floor_lease", "negative"},
		{"floor lease too long", "t", func(p *allotpb.ResourceTemplate) {
			p.Partition = &allotpb.PartitionPolicy{FloorLease: durationpb.New(25 * time.Hour)}
		}, "partition.floor_lease", "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := Compile(tt.tname, 1, tmpl(tt.edit))
			if err == nil {
				t.Fatalf("Compile succeeded (%+v), want error", got)
			}
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v is %T, want *CompileError", err, err)
			}
			if ce.Field != tt.field {
				t.Errorf("field = %q, want %q (error: %v)", ce.Field, tt.field, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
		})
	}
	if _, _, err := Compile("t", 1, nil); err == nil {
		t.Error("Compile(nil) succeeded")
	}
}

func TestCompileDefaultsAndNormalization(t *testing.T) {
	tests := []struct {
		name     string
		edit     func(*allotpb.ResourceTemplate)
		check    func(*testing.T, *Template)
		notes    int    // expected number of notes
		noteWant string // substring of some note
	}{
		{
			name:  "as written",
			check: func(t *testing.T, tp *Template) { eq(t, "learning", tp.LearningModeDuration, 60*time.Second) },
		},
		{
			name: "all defaults",
			edit: func(p *allotpb.ResourceTemplate) {
				p.Algorithm = &allotpb.Algorithm{Kind: allotpb.Algorithm_FAIR_SHARE}
			},
			check: func(t *testing.T, tp *Template) {
				eq(t, "lease", tp.LeaseLength, DefaultLeaseLength)
				eq(t, "refresh", tp.RefreshInterval, DefaultRefreshInterval)
				eq(t, "learning", tp.LearningModeDuration, DefaultLeaseLength)
			},
		},
		{
			name: "no algorithm at all",
			edit: func(p *allotpb.ResourceTemplate) { p.Algorithm = nil; p.Capacity = 0 },
			check: func(t *testing.T, tp *Template) {
				eq(t, "kind", tp.Algorithm, allotpb.Algorithm_NO_ALGORITHM)
				eq(t, "lease", tp.LeaseLength, DefaultLeaseLength)
			},
			notes: 1, noteWant: "NO_ALGORITHM",
		},
		{
			name:  "NO_ALGORITHM with capacity",
			edit:  func(p *allotpb.ResourceTemplate) { p.Algorithm.Kind = allotpb.Algorithm_NO_ALGORITHM },
			notes: 1, noteWant: "not enforced",
		},
		{
			name:  "capacity zero blocks",
			edit:  func(p *allotpb.ResourceTemplate) { p.Capacity = 0 },
			notes: 1, noteWant: "blocked",
		},
		{
			name:  "explicit zero learning disables",
			edit:  func(p *allotpb.ResourceTemplate) { p.Algorithm.LearningModeDuration = durationpb.New(0) },
			check: func(t *testing.T, tp *Template) { eq(t, "learning", tp.LearningModeDuration, time.Duration(0)) },
		},
		{
			name:  "learning longer than lease",
			edit:  func(p *allotpb.ResourceTemplate) { p.Algorithm.LearningModeDuration = durationpb.New(time.Hour) },
			check: func(t *testing.T, tp *Template) { eq(t, "learning", tp.LearningModeDuration, 60*time.Second) },
			notes: 1, noteWant: "learning_mode_duration",
		},
		{
			name:  "refresh zero means default",
			edit:  func(p *allotpb.ResourceTemplate) { p.Algorithm.RefreshInterval = durationpb.New(0) },
			check: func(t *testing.T, tp *Template) { eq(t, "refresh", tp.RefreshInterval, DefaultRefreshInterval) },
			notes: 1, noteWant: "refresh_interval",
		},
		{
			name:  "lease zero means default",
			edit:  func(p *allotpb.ResourceTemplate) { p.Algorithm.LeaseLength = durationpb.New(0) },
			check: func(t *testing.T, tp *Template) { eq(t, "lease", tp.LeaseLength, DefaultLeaseLength) },
			notes: 1, noteWant: "lease_length",
		},
		{
			name: "default refresh above short lease",
			edit: func(p *allotpb.ResourceTemplate) {
				p.Algorithm.LeaseLength = durationpb.New(2 * time.Second)
				p.Algorithm.RefreshInterval = nil
			},
			check: func(t *testing.T, tp *Template) {
				eq(t, "refresh", tp.RefreshInterval, time.Second)
				eq(t, "learning", tp.LearningModeDuration, 2*time.Second)
			},
			notes: 1, noteWant: "exceeds lease_length",
		},
		{
			name:  "refresh equals lease",
			edit:  func(p *allotpb.ResourceTemplate) { p.Algorithm.RefreshInterval = durationpb.New(60 * time.Second) },
			notes: 1, noteWant: "equals lease_length",
		},
		{
			name: "safe capacity above capacity",
			edit: func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(1000.0) },
			check: func(t *testing.T, tp *Template) {
				eq(t, "safe", tp.SafeCapacity, 500.0)
				eq(t, "has safe", tp.HasSafeCapacity, true)
			},
			notes: 1, noteWant: "safe_capacity",
		},
		{
			name: "safe capacity unlimited",
			edit: func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(-1.0) },
			check: func(t *testing.T, tp *Template) {
				eq(t, "safe", tp.SafeCapacity, -1.0)
				eq(t, "has safe", tp.HasSafeCapacity, true)
			},
		},
		{
			name: "safe capacity zero",
			edit: func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(0.0) },
			check: func(t *testing.T, tp *Template) {
				eq(t, "has safe", tp.HasSafeCapacity, true)
			},
		},
		{
			name: "default floor",
			check: func(t *testing.T, tp *Template) {
				eq(t, "floor", tp.Floor, FloorPolicy{Share: DefaultFloorShare, Lease: DefaultFloorLease})
			},
		},
		{
			name: "safe capacity is an absolute floor",
			edit: func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(7.0) },
			check: func(t *testing.T, tp *Template) {
				eq(t, "floor", tp.Floor, FloorPolicy{Absolute: 7, HasAbsolute: true, Share: DefaultFloorShare, Lease: DefaultFloorLease})
			},
		},
		{
			name:  "unlimited safe capacity has no floor",
			edit:  func(p *allotpb.ResourceTemplate) { p.SafeCapacity = ptr(-1.0) },
			check: func(t *testing.T, tp *Template) { eq(t, "unlimited", tp.Floor.Unlimited, true) },
		},
		{
			name: "floor share and lease",
			edit: func(p *allotpb.ResourceTemplate) {
				p.Partition = &allotpb.PartitionPolicy{FloorShare: ptr(0.25), FloorLease: durationpb.New(10 * time.Minute)}
			},
			check: func(t *testing.T, tp *Template) {
				eq(t, "floor", tp.Floor, FloorPolicy{Share: 0.25, Lease: 10 * time.Minute})
			},
		},
		{
			name: "floor above capacity",
			edit: func(p *allotpb.ResourceTemplate) { p.Partition = &allotpb.PartitionPolicy{Floor: ptr(1000.0)} },
			check: func(t *testing.T, tp *Template) {
				eq(t, "floor", tp.Floor.Absolute, 500.0)
			},
			notes: 1, noteWant: "partition.floor",
		},
		{
			name: "floor lease shorter than the lease",
			edit: func(p *allotpb.ResourceTemplate) {
				p.Partition = &allotpb.PartitionPolicy{FloorLease: durationpb.New(10 * time.Second)}
			},
			check: func(t *testing.T, tp *Template) {
				eq(t, "floor lease", tp.Floor.Lease, 60*time.Second)
			},
			notes: 1, noteWant: "partition.floor_lease",
		},
		{
			name:  "unset safe capacity",
			check: func(t *testing.T, tp *Template) { eq(t, "has safe", tp.HasSafeCapacity, false) },
		},
		{
			name:  "repeated stars collapse",
			edit:  func(p *allotpb.ResourceTemplate) { p.IdentifierGlob = "mysql/**/x***" },
			check: func(t *testing.T, tp *Template) { eq(t, "glob", tp.Glob, "mysql/*/x*") },
			notes: 1, noteWant: "identifier_glob",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes, err := Compile("t", 7, tmpl(tt.edit))
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			if got.Name != "t" || got.Revision != 7 {
				t.Errorf("name/revision = %q/%d", got.Name, got.Revision)
			}
			if got.RefreshInterval > got.LeaseLength || got.LearningModeDuration > got.LeaseLength {
				t.Errorf("invariant broken: %+v", got)
			}
			if len(notes) != tt.notes {
				t.Errorf("notes = %q, want %d", notes, tt.notes)
			}
			if tt.noteWant != "" && !strings.Contains(strings.Join(notes, "\n"), tt.noteWant) {
				t.Errorf("notes %q lack %q", notes, tt.noteWant)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func TestParseAndCompileDocument(t *testing.T) {
	doc := `{"identifier_glob":"mysql/main","capacity":500,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`
	got, notes, err := ParseAndCompile("mysql-main", 3, []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 0 {
		t.Errorf("notes: %q", notes)
	}
	want := Template{Name: "mysql-main", Revision: 3, Glob: "mysql/main", Capacity: 500, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: time.Minute, RefreshInterval: 5 * time.Second, LearningModeDuration: time.Minute, Floor: DefaultFloor()}
	if got.Params != nil {
		t.Errorf("params = %v", got.Params)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("got %+v\nwant %+v", *got, want)
	}
	if _, _, err := ParseAndCompile("bad.name", 1, []byte(doc)); err == nil {
		t.Error("bad name accepted")
	}
}

func TestUnmatchedPolicy(t *testing.T) {
	var p UnmatchedPolicy
	if p.String() != "default" || p.Fallback() == nil {
		t.Errorf("zero policy: %q %v", p.String(), p.Fallback())
	}
	if err := p.Set("reject"); err != nil || p != UnmatchedReject || p.Fallback() != nil {
		t.Errorf("reject: %v %q %v", err, p, p.Fallback())
	}
	if err := p.Set("default"); err != nil || p.Fallback().Name != "builtin:default" {
		t.Errorf("default: %v %v", err, p.Fallback())
	}
	if err := p.Set("allow"); err == nil {
		t.Error("Set(allow) succeeded")
	}
	if _, _, err := Compile("default", 0, &allotpb.ResourceTemplate{IdentifierGlob: "*", Capacity: 100,
		Algorithm: &allotpb.Algorithm{Kind: allotpb.Algorithm_FAIR_SHARE}}); err != nil {
		t.Errorf("default-like template: %v", err)
	}
}

func TestProtoRoundTrip(t *testing.T) {
	for _, edit := range []func(*allotpb.ResourceTemplate){
		nil,
		func(p *allotpb.ResourceTemplate) { p.Algorithm = nil },
		func(p *allotpb.ResourceTemplate) {
			p.SafeCapacity = ptr(3.0)
			p.Description = "d"
			p.Algorithm.LearningModeDuration = durationpb.New(0)
		},
		func(p *allotpb.ResourceTemplate) { p.Shadow = true },
	} {
		a, _, err := Compile("t", 1, tmpl(edit))
		if err != nil {
			t.Fatal(err)
		}
		doc, err := MarshalTemplateJSON(a)
		if err != nil {
			t.Fatal(err)
		}
		b, notes, err := ParseAndCompile("t", 1, doc)
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("round trip changed the template:\n%+v\n%+v\n%s", a, b, doc)
		}
		if a.Algorithm != allotpb.Algorithm_NO_ALGORITHM && len(notes) != 0 {
			t.Errorf("normalized form still normalizes: %q", notes)
		}
	}
}

// TestShadowTemplate checks that "shadow" is read from JSON and YAML
// documents into the compiled template, and that a wrong type is refused.
func TestShadowTemplate(t *testing.T) {
	for _, doc := range []string{
		`{"identifier_glob":"api/*","capacity":50,"shadow":true}`,
		"identifier_glob: api/*\ncapacity: 50\nshadow: true\n",
	} {
		got, _, err := ParseAndCompile("api", 1, []byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if !got.Shadow {
			t.Errorf("%s: Shadow = false", doc)
		}
	}
	got, _, err := ParseAndCompile("api", 1, []byte(`{"identifier_glob":"api/*","capacity":50}`))
	if err != nil || got.Shadow {
		t.Errorf("template without shadow: %v, Shadow = %v", err, got != nil && got.Shadow)
	}
	if _, _, err := ParseAndCompile("api", 1, []byte(`{"identifier_glob":"api/*","capacity":50,"shadow":"yes"}`)); err == nil || !strings.Contains(err.Error(), "shadow") {
		t.Errorf("shadow as a string: err = %v, want one naming the field", err)
	}
}

// TestParseAndCompileReportsEveryProblem: a document with several
// problems is refused with all of them, in one error, shape problems
// first; a field whose shape is at fault is not reported again for its
// value.
func TestParseAndCompileReportsEveryProblem(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      []string
	}{
		{"bad", `{"identifier_glob": "b", "capacity": -5, "algorithm": {"kind": "FAIR_SHAER", "lease_length": "-1s"}}`,
			[]string{`algorithm.kind: unknown value "FAIR_SHAER"`, "capacity: -5 is negative", "algorithm.lease_length: -1s is negative"}},
		{"bad", `{"identifier_glob": 7, "capacty": 5, "algorithm": {"kind": "STATIC", "refresh_interval": "50ms"}}`,
			[]string{"capacty: unknown field", "identifier_glob: want a string, got a number", "algorithm.refresh_interval: 50ms is shorter than the minimum"}},
		{"bad name", "identifier_glob: ''\ncapacity: 1e16\n",
			[]string{"name: template name", "identifier_glob: is empty", "capacity: 1e+16 is above the limit"}},
	} {
		_, _, err := ParseAndCompile(c.name, 1, []byte(c.doc))
		got := ProblemList(err)
		if len(got) != len(c.want) {
			t.Errorf("%s: %d problems, want %d: %q", c.doc, len(got), len(c.want), got)
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: problem %d is %q, want it to say %q", c.doc, i, got[i], w)
			}
		}
		if !IsValidationError(err) || !strings.HasPrefix(err.Error(), fmt.Sprintf("%d problems: ", len(c.want))) {
			t.Errorf("%s: error %q: not a validation error listing its problems", c.doc, err)
		}
	}
	// One problem is reported as itself.
	_, _, err := ParseAndCompile("one", 1, []byte(`{"identifier_glob": "a", "capacity": -1}`))
	var ce *CompileError
	if !errors.As(err, &ce) || ce.Field != "capacity" || len(ProblemList(err)) != 1 || strings.Contains(err.Error(), "problems") {
		t.Errorf("one problem: %v", err)
	}
}
