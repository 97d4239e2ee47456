package config

import (
	"fmt"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// mysqlMain is a valid template document.
const mysqlMain = `{"identifier_glob":"mysql/main","capacity":500,"algorithm":{"kind":"FAIR_SHARE","lease_length":"60s","refresh_interval":"5s"}}`

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

func FuzzParseNamespace(f *testing.F) {
	for _, s := range []string{
		loginsJSON, loginsYAML, `{"defaultBucket":{}}`, `{"dynamic_bucket_template":{},"max_dynamic_buckets":1e3}`,
		`{"default_bucket":{"algorithm":"GCRA","limit":1,"window":"1ms","size":0,"ban":{"threshold":1,"interval":"1ms","duration":"1ms"}}}`,
		`{"default_bucket":{"size":-0,"fill_rate":-0.0}}`, `{"buckets":{"a":null}}`, `null`, `a: &x [*x, *x]`, "",
	} {
		f.Add("logins", []byte(s))
	}
	f.Add("_default", []byte(`{"default_bucket":{"soft_limit":0.999999,"critical_reserve":0}}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		ns, _, err := ParseNamespace(name, 1, data)
		if err != nil {
			if !IsValidationError(err) {
				t.Fatalf("error %v is not a validation error", err)
			}
			return
		}
		if ValidateNamespaceName(ns.Name) != nil || ns.Name != name {
			t.Fatalf("bad namespace name accepted: %q", ns.Name)
		}
		if (ns.Dynamic != nil) != (ns.MaxDynamicBuckets > 0) || ns.MaxDynamicBuckets > MaxDynamicBuckets {
			t.Fatalf("max_dynamic_buckets %d with dynamic %v", ns.MaxDynamicBuckets, ns.Dynamic)
		}
		specs := []*quota.Spec{ns.Default, ns.Dynamic}
		for bn, s := range ns.Buckets {
			if wire.ValidateQuotaName("bucket", bn) != nil {
				t.Fatalf("bad bucket name accepted: %q", bn)
			}
			specs = append(specs, s)
		}
		for _, s := range specs {
			if s != nil {
				checkSpec(t, s)
			}
		}
	})
}

// checkSpec checks the bounds ParseNamespace promises.
func checkSpec(t *testing.T, s *quota.Spec) {
	t.Helper()
	durs := []time.Duration{s.Window, s.WaitTimeout, s.MaxIdle, s.MaxDebt, s.Ban.Interval, s.Ban.Duration}
	for _, d := range durs {
		if d < 0 || d > MaxQuotaDuration {
			t.Fatalf("duration out of range: %+v", s)
		}
	}
	switch {
	case s.Algorithm.String() == fmt.Sprintf("Algorithm(%d)", s.Algorithm):
		t.Fatalf("unknown algorithm: %+v", s)
	case s.Algorithm.Windowed() && (s.Limit < 1 || s.Window < MinWindow || s.FillRate != 0):
		t.Fatalf("window spec out of range: %+v", s)
	case !s.Algorithm.Windowed() && (s.Size < 1 || !(s.FillRate > 0) || s.FillRate > MaxFillRate || s.Limit != 0):
		t.Fatalf("bucket spec out of range: %+v", s)
	case s.Size < 0 || s.Size > MaxQuotaTokens || s.Limit > MaxQuotaTokens:
		t.Fatalf("size out of range: %+v", s)
	case s.MaxTokensPerRequest < 1 || s.MaxTokensPerRequest > MaxQuotaTokens:
		t.Fatalf("max tokens out of range: %+v", s)
	case !(s.SoftLimit >= 0 && s.SoftLimit < 1) || !(s.CriticalReserve >= 0 && s.CriticalReserve < 1):
		t.Fatalf("fraction out of range: %+v", s)
	case s.Ban != (quota.Ban{}) && (s.Ban.Threshold < 1 || s.Ban.Interval <= 0 || s.Ban.Duration <= 0):
		t.Fatalf("ban out of range: %+v", s)
	case math.Signbit(s.SoftLimit) || math.Signbit(s.CriticalReserve):
		t.Fatalf("negative zero: %+v", s)
	}
}
