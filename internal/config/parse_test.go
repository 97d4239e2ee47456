package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/proto/allotpb"
)

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		glob    string
		kind    allotpb.Algorithm_Kind
		lease   time.Duration
		refresh time.Duration
		safe    *float64
	}{
		{
			name:    "json snake_case with Go durations",
			doc:     `{"identifier_glob":"mysql/main","capacity":500,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`,
			glob:    "mysql/main",
			kind:    allotpb.Algorithm_FAIR_SHARE,
			lease:   60 * time.Second,
			refresh: 5 * time.Second,
		},
		{
			name:    "json camelCase with protojson durations",
			doc:     `{"identifierGlob":"a*","capacity":1,"algorithm":{"kind":"STATIC","leaseLength":"0.250s","refreshInterval":"0.100s"}}`,
			glob:    "a*",
			kind:    allotpb.Algorithm_STATIC,
			lease:   250 * time.Millisecond,
			refresh: 100 * time.Millisecond,
		},
		{
			name: "yaml",
			doc: `# comment
identifier_glob: "mysql/*"
capacity: 100
safe_capacity: -1
algorithm:
  kind: PROPORTIONAL_SHARE
  lease_length: 1m30s
  refresh_interval: 250ms
`,
			glob:    "mysql/*",
			kind:    allotpb.Algorithm_PROPORTIONAL_SHARE,
			lease:   90 * time.Second,
			refresh: 250 * time.Millisecond,
			safe:    ptr(-1.0),
		},
		{
			name: "enum by number, null fields",
			doc:  `{"identifier_glob":"x","capacity":2,"description":null,"algorithm":{"kind":3}}`,
			glob: "x",
			kind: allotpb.Algorithm_FAIR_SHARE,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb, err := Parse([]byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if pb.GetIdentifierGlob() != tt.glob {
				t.Errorf("glob = %q, want %q", pb.GetIdentifierGlob(), tt.glob)
			}
			if pb.GetAlgorithm().GetKind() != tt.kind {
				t.Errorf("kind = %v, want %v", pb.GetAlgorithm().GetKind(), tt.kind)
			}
			if tt.lease != 0 && pb.GetAlgorithm().GetLeaseLength().AsDuration() != tt.lease {
				t.Errorf("lease = %v, want %v", pb.GetAlgorithm().GetLeaseLength().AsDuration(), tt.lease)
			}
			if tt.refresh != 0 && pb.GetAlgorithm().GetRefreshInterval().AsDuration() != tt.refresh {
				t.Errorf("refresh = %v, want %v", pb.GetAlgorithm().GetRefreshInterval().AsDuration(), tt.refresh)
			}
			if tt.safe != nil && (pb.SafeCapacity == nil || *pb.SafeCapacity != *tt.safe) {
				t.Errorf("safe_capacity = %v, want %v", pb.SafeCapacity, *tt.safe)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		doc   string
		field string // ParseError.Field
		want  string // substring of the message
	}{
		{"empty", "  \n", "", "empty"},
		{"not an object", `[1,2]`, "", "must be a JSON object"},
		{"yaml scalar", `hello`, "", "must be a JSON object"},
		{"bad json", `{"capacity":`, "", "invalid JSON"},
		{"trailing data", `{"capacity":1} {}`, "", "unexpected data"},
		{"unknown field", `{"capcity":1}`, "capcity", "unknown field"},
		{"unknown nested field", `{"algorithm":{"kind":"STATIC","lease":"5s"}}`, "algorithm.lease", "unknown field"},
		{"duplicate field", `{"capacity":1,"capacity":2}`, "capacity", "twice"},
		{"duplicate field in YAML", "capacity: 1\ncapacity: 2\n", "", "already set"},
		{"same field two spellings", `{"identifier_glob":"a","identifierGlob":"b"}`, "identifier_glob", "set twice"},
		{"capacity wrong type", `{"capacity":true}`, "capacity", "want a number"},
		{"capacity as a string", `{"identifier_glob":"x","capacity":"100"}`, "capacity", `want a number, got a string ("100"): write numbers without quotes`},
		{"capacity NaN string", `{"capacity":"NaN"}`, "capacity", `got a string ("NaN")`},
		{"safe_capacity as a string", `{"safeCapacity":"-1"}`, "safe_capacity", "want a number, got a string"},
		{"yaml quoted capacity", "identifier_glob: x\ncapacity: \"100\"\n", "capacity", "want a number, got a string"},
		{"yaml capacity word", "capacity: lots\n", "capacity", `got a string ("lots")`},
		{"glob wrong type", `{"identifier_glob":5}`, "identifier_glob", "want a string"},
		{"algorithm wrong type", `{"algorithm":"FAIR_SHARE"}`, "algorithm", "want an object"},
		{"unknown kind", `{"algorithm":{"kind":"FAIR"}}`, "algorithm.kind", "unknown value \"FAIR\""},
		{"kind wrong type", `{"algorithm":{"kind":[]}}`, "algorithm.kind", "want one of"},
		{"duration number", `{"algorithm":{"lease_length":60}}`, "algorithm.lease_length", "duration string"},
		{"duration garbage", `{"algorithm":{"refresh_interval":"5 seconds"}}`, "algorithm.refresh_interval", "invalid duration"},
		{"duration camel", `{"algorithm":{"learningModeDuration":"soon"}}`, "algorithm.learning_mode_duration", "invalid duration"},
		{"parameters not list", `{"algorithm":{"parameters":{"a":"b"}}}`, "algorithm.parameters", "want a list"},
		{"parameter unknown field", `{"algorithm":{"parameters":[{"name":"a","val":"b"}]}}`, "algorithm.parameters[0].val", "unknown field"},
		{"parameter null", `{"algorithm":{"parameters":[null]}}`, "algorithm.parameters[0]", "null"},
		{"yaml unknown field", "identifier_glob: x\ncapacty: 3\n", "capacty", "unknown field"},
		{"yaml unquoted star", "identifier_glob: *\n", "", "invalid YAML"},
		{"too large", `{"description":"` + strings.Repeat("x", MaxTemplateSize) + `"}`, "", "limit"},
		{"too deep", strings.Repeat("[", 100) + strings.Repeat("]", 100), "", "nested too deeply"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatal("Parse succeeded, want error")
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is %T, want *ParseError", err, err)
			}
			if pe.Field != tt.field {
				t.Errorf("field = %q, want %q (error: %v)", pe.Field, tt.field, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			if !IsValidationError(err) {
				t.Errorf("IsValidationError(%v) = false", err)
			}
		})
	}
}

func TestFormatProtoDuration(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{5 * time.Second, "5s"},
		{250 * time.Millisecond, "0.25s"},
		{90*time.Second + time.Nanosecond, "90.000000001s"},
		{-1500 * time.Millisecond, "-1.5s"},
	} {
		if got := FormatProtoDuration(tt.d); got != tt.want {
			t.Errorf("FormatProtoDuration(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
