package config

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/proto/allotpb"
)

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		mysqlMain,
		"identifier_glob: \"mysql/*\"\ncapacity: 100\nalgorithm:\n  kind: FAIR_SHARE\n  lease_length: 1m30s\n",
		`{"identifierGlob":"a?","safeCapacity":-1,"algorithm":{"kind":2,"learningModeDuration":"0s","parameters":[{"name":"x"}]}}`,
		`{"capacity":"NaN"}`, `{"identifier_glob":"x","capacity":"100"}`, "capacity: \"5\"\n", `[]`, `null`, `a: &x [*x, *x]`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		pb, err := Parse(data)
		if err != nil {
			if !IsValidationError(err) {
				t.Fatalf("error %v is not a validation error", err)
			}
			return
		}
		// Numbers are never accepted as strings.
		if doc, err := decodeJSON(data); err == nil {
			if m, ok := doc.(map[string]any); ok {
				for _, f := range []string{"capacity", "safe_capacity", "safeCapacity"} {
					if _, isString := m[f].(string); isString {
						t.Fatalf("%s as a string accepted: %s", f, data)
					}
				}
			}
		}
		// Whatever parses must compile or fail cleanly.
		if tp, _, err := Compile("fuzz", 1, pb); err == nil {
			checkInvariants(t, tp)
		}
	})
}

func FuzzCompile(f *testing.F) {
	seed, _ := Parse([]byte(mysqlMain))
	b, _ := proto.Marshal(seed)
	f.Add("mysql-main", b)
	f.Add("x", []byte{})
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		pb := &allotpb.ResourceTemplate{}
		if proto.Unmarshal(data, pb) != nil {
			return
		}
		tp, _, err := Compile(name, 1, pb)
		if err != nil {
			if !IsValidationError(err) {
				t.Fatalf("error %v is not a validation error", err)
			}
			return
		}
		checkInvariants(t, tp)
	})
}

func checkInvariants(t *testing.T, tp *Template) {
	t.Helper()
	switch {
	case ValidateName(tp.Name) != nil, ValidateGlob(tp.Glob) != nil:
		t.Fatalf("invalid name or glob compiled: %+v", tp)
	case tp.Capacity < 0 || tp.Capacity > MaxCapacity || tp.Capacity != tp.Capacity:
		t.Fatalf("capacity out of range: %+v", tp)
	case tp.LeaseLength < MinRefreshInterval || tp.LeaseLength > MaxLeaseLength:
		t.Fatalf("lease out of range: %+v", tp)
	case tp.RefreshInterval < MinRefreshInterval || tp.RefreshInterval > tp.LeaseLength:
		t.Fatalf("refresh out of range: %+v", tp)
	case tp.LearningModeDuration < 0 || tp.LearningModeDuration > tp.LeaseLength:
		t.Fatalf("learning out of range: %+v", tp)
	case tp.HasSafeCapacity && tp.SafeCapacity != -1 && (tp.SafeCapacity < 0 || tp.SafeCapacity > MaxCapacity):
		t.Fatalf("safe capacity out of range: %+v", tp)
	}
	if _, ok := allotpb.Algorithm_Kind_name[int32(tp.Algorithm)]; !ok {
		t.Fatalf("unknown kind compiled: %+v", tp)
	}
	// The compiled glob matches itself when it has no "?" (literal or "*").
	_ = GlobMatch(tp.Glob, tp.Glob)
}
