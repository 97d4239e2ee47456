package config

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/allot/allot/internal/quota"
	"github.com/allot/allot/internal/wire"
)

// Quota namespace keys and limits. A namespace is stored under
// "namespaces.<namespace>" in the configuration bucket, next to the
// templates; see docs/configuration.md, "Quota namespaces".
const (
	// NamespacePrefix starts every namespace key: "namespaces.<namespace>".
	NamespacePrefix = "namespaces."
	// NamespaceWatchPattern matches every namespace key.
	NamespaceWatchPattern = NamespacePrefix + ">"
	// DefaultMaxDynamicBuckets is max_dynamic_buckets when a namespace has
	// a dynamic_bucket_template and does not say: dynamic buckets are
	// created per unseen name, so without a cap one client sending random
	// names could grow memory without bound.
	DefaultMaxDynamicBuckets = 10000
	// MaxDynamicBuckets bounds max_dynamic_buckets (about 200 MB of token
	// buckets at the core's target of 200 bytes each).
	MaxDynamicBuckets = 1_000_000
	// MaxQuotaTokens bounds size, limit, max_tokens_per_request and
	// ban.threshold, as the wire bounds tokens.
	MaxQuotaTokens = wire.MaxQuotaTokens
	// MaxFillRate bounds fill_rate, in tokens per second (one per
	// nanosecond, quota.MaxFillRate).
	MaxFillRate = quota.MaxFillRate
	// MaxQuotaDuration bounds every duration of a bucket; it is also the
	// longest max_wait a take request may carry.
	MaxQuotaDuration = wire.MaxQuotaWait
	// MinWindow bounds window from below: a shorter window is a unit
	// mistake ("1ms" for "1m"), not a rate limit.
	MinWindow = time.Millisecond
)

// NamespaceKey returns the KV key of quota namespace ns.
func NamespaceKey(ns string) string { return NamespacePrefix + ns }

// NamespaceFromKey returns the namespace name of a key, and false if the
// key is not a namespace key.
func NamespaceFromKey(key string) (string, bool) {
	ns, ok := strings.CutPrefix(key, NamespacePrefix)
	return ns, ok && ns != ""
}

// ValidateNamespaceName checks a namespace name: 1 to wire.MaxQuotaNameLen
// characters from [A-Za-z0-9_] (quotaservice's names; "_default" is the
// global default's namespace).
func ValidateNamespaceName(ns string) error {
	return nameErr("name", wire.ValidateQuotaName("namespace name", ns))
}

// nameErr turns a wire name error into a CompileError for field.
func nameErr(field string, err error) error {
	if err == nil {
		return nil
	}
	return invalid(field, "%s", strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "))
}

// ParseNamespace parses and validates a namespace document (JSON or YAML)
// stored under NamespaceKey(name) at revision. Unset fields get
// quotaservice's defaults (quota.DefaultSpec; see docs/configuration.md);
// notes describe defaults worth pointing out. Errors are a *ParseError or
// *CompileError naming the field ("buckets.alice.fill_rate").
//
// The namespace quota.GlobalDefault ("_default") may hold only
// default_bucket: the bucket for every namespace without a bucket of its
// own.
func ParseNamespace(name string, revision uint64, data []byte) (*quota.Namespace, []string, error) {
	// Every field is checked, so that all of the document's problems are
	// reported at once (Problems).
	var errs []error
	fail := func(err error) bool {
		errs = appendProblems(errs, err)
		return err != nil
	}
	fail(ValidateNamespaceName(name))
	obj, err := readDocument("namespace", data)
	if fail(err) {
		return nil, nil, joinProblems(errs)
	}
	fields, err := canonicalFields("", obj, "buckets", "default_bucket", "dynamic_bucket_template", "max_dynamic_buckets", "shadow", "tenants")
	fail(err)
	ns := &quota.Namespace{Name: name, Revision: revision}
	var notes []string
	if raw, ok := fields["buckets"]; ok {
		if m, ok := raw.(map[string]any); !ok {
			fail(parseErr("buckets", "want an object of bucket name to bucket, got %s", jsonKind(raw)))
		} else {
			ns.Buckets = make(map[string]*quota.Spec, len(m))
			for _, bn := range slices.Sorted(mapKeys(m)) {
				field := "buckets." + bn
				if fail(nameErr(field, wire.ValidateQuotaName("bucket name", bn))) {
					continue
				}
				if b, err := parseBucket(field, m[bn]); !fail(err) {
					ns.Buckets[bn] = b
				}
			}
		}
	}
	if raw, ok := fields["default_bucket"]; ok {
		ns.Default, err = parseBucket("default_bucket", raw)
		fail(err)
	}
	dynamicSet := false
	if raw, ok := fields["dynamic_bucket_template"]; ok {
		dynamicSet = true
		ns.Dynamic, err = parseBucket("dynamic_bucket_template", raw)
		fail(err)
	}
	if raw, ok := fields["max_dynamic_buckets"]; ok {
		n, err := integer("max_dynamic_buckets", raw, 1, MaxDynamicBuckets)
		switch {
		case fail(err):
		case !dynamicSet:
			fail(invalid("max_dynamic_buckets", "is set but dynamic_bucket_template is not: without a template no dynamic bucket is created"))
		default:
			ns.MaxDynamicBuckets = int(n)
		}
	} else if ns.Dynamic != nil {
		ns.MaxDynamicBuckets = DefaultMaxDynamicBuckets
		notes = append(notes, fmt.Sprintf("max_dynamic_buckets: not set; at most %d dynamic buckets live at once", DefaultMaxDynamicBuckets))
	}
	if raw, ok := fields["shadow"]; ok {
		if b, ok := raw.(bool); ok {
			ns.Shadow = b
		} else {
			fail(parseErr("shadow", "want true or false, got %s", jsonKind(raw)))
		}
	}
	if raw, ok := fields["tenants"]; ok {
		ns.Tenants, err = parseTenantList("tenants", raw)
		fail(err)
	}
	if name == quota.GlobalDefault {
		switch {
		case ns.Buckets != nil || dynamicSet:
			fail(invalid("buckets", "namespace %s holds only default_bucket, the bucket for every namespace without one of its own", quota.GlobalDefault))
		case ns.Default == nil && fields["default_bucket"] == nil:
			fail(invalid("default_bucket", "is required in namespace %s: it is the global default bucket", quota.GlobalDefault))
		}
	}
	if err := joinProblems(errs); err != nil {
		return nil, nil, err
	}
	if err := (&quota.Config{Namespaces: map[string]*quota.Namespace{name: ns}}).Validate(); err != nil {
		return nil, nil, invalid("namespace", "%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if len(ns.Buckets) == 0 && ns.Default == nil && ns.Dynamic == nil {
		notes = append(notes, fmt.Sprintf("namespace %s has no buckets, no default_bucket and no dynamic_bucket_template: its keys get the global default (namespaces.%s), if any", name, quota.GlobalDefault))
	}
	return ns, notes, nil
}

func mapKeys(m map[string]any) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// canonicalFields checks that obj's keys (snake_case or lowerCamelCase)
// are among known, and returns obj keyed by the snake_case names, without
// null values (null means unset) and without the keys at fault, whose
// problems it returns.
func canonicalFields(path string, obj map[string]any, known ...string) (map[string]any, error) {
	out := make(map[string]any, len(obj))
	seen := make(map[string]string, len(obj))
	var errs []error
	for _, k := range slices.Sorted(mapKeys(obj)) { // deterministic errors
		c := snakeCase(k)
		if !slices.Contains(known, c) {
			errs = append(errs, parseErr(join(path, k), "unknown field (known fields: %s)", strings.Join(known, ", ")))
			continue
		}
		if prev, dup := seen[c]; dup {
			errs = append(errs, parseErr(join(path, k), "field is set twice (also as %q)", prev))
			continue
		}
		seen[c] = k
		if obj[k] != nil {
			out[c] = obj[k]
		}
	}
	return out, joinProblems(errs)
}

// snakeCase turns lowerCamelCase into snake_case ("fillRate" →
// "fill_rate"); other names come back unchanged.
func snakeCase(s string) string {
	if !strings.ContainsFunc(s, unicode.IsUpper) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

var bucketFields = []string{"algorithm", "size", "fill_rate", "limit", "window", "wait_timeout", "max_idle", "max_debt",
	"max_tokens_per_request", "soft_limit", "critical_reserve", "ban"}

// parseBucket parses one BUCKET object at path and applies the defaults.
// Every field is checked; the problems found are returned together.
func parseBucket(path string, raw any) (*quota.Spec, error) {
	obj, ok := raw.(map[string]any)
	if !ok {
		return nil, parseErr(path, "want a bucket object such as {\"size\": 100, \"fill_rate\": 50}, got %s", jsonKind(raw))
	}
	var errs []error
	fail := func(err error) bool {
		errs = appendProblems(errs, err)
		return err != nil
	}
	f, err := canonicalFields(path, obj, bucketFields...)
	fail(err)
	at := func(field string) string { return path + "." + field }
	def := quota.DefaultSpec()
	s := &quota.Spec{Algorithm: def.Algorithm}
	if v, ok := f["algorithm"]; ok {
		name, ok := v.(string)
		if !ok {
			return nil, joinProblems(append(errs, parseErr(at("algorithm"), "want an algorithm name such as \"TOKEN_BUCKET\", got %s", jsonKind(v))))
		}
		if s.Algorithm, err = quota.ParseAlgorithm(name); err != nil {
			// What applies depends on the algorithm: nothing more to check.
			return nil, joinProblems(append(errs, invalid(at("algorithm"), "%v", err)))
		}
	}
	// Fields that do not apply to the algorithm are errors: a window
	// bucket with a fill_rate is a misunderstanding, not a setting.
	windowed := s.Algorithm.Windowed()
	for _, c := range []struct {
		field, appliesTo string
		wrong            bool
	}{
		{"size", "TOKEN_BUCKET, LEAKY_BUCKET and GCRA", windowed && s.Algorithm != quota.GCRA},
		{"fill_rate", "TOKEN_BUCKET and LEAKY_BUCKET", windowed},
		{"limit", "FIXED_WINDOW, SLIDING_WINDOW_LOG, SLIDING_WINDOW_COUNTER and GCRA", !windowed},
		{"window", "FIXED_WINDOW, SLIDING_WINDOW_LOG, SLIDING_WINDOW_COUNTER and GCRA", !windowed},
		{"max_debt", "TOKEN_BUCKET", s.Algorithm != quota.TokenBucket},
	} {
		if _, set := f[c.field]; set && c.wrong {
			fail(invalid(at(c.field), "does not apply to %s (only to %s)", s.Algorithm, c.appliesTo))
			delete(f, c.field)
		}
	}

	if windowed {
		for _, req := range []string{"limit", "window"} {
			if _, ok := f[req]; !ok {
				fail(invalid(at(req), "is required for %s (e.g. \"limit\": 100, \"window\": \"1m\")", s.Algorithm))
			}
		}
		if v, ok := f["limit"]; ok {
			s.Limit, err = integer(at("limit"), v, 1, MaxQuotaTokens)
			fail(err)
		}
		if v, ok := f["window"]; ok {
			s.Window, err = quotaDuration(at("window"), v, MinWindow)
			fail(err)
		}
		if v, ok := f["size"]; ok { // GCRA's burst tolerance
			s.Size, err = integer(at("size"), v, 0, MaxQuotaTokens)
			fail(err)
		}
	} else {
		s.Size, s.FillRate = def.Size, def.FillRate
		if v, ok := f["size"]; ok {
			s.Size, err = integer(at("size"), v, 1, MaxQuotaTokens)
			fail(err)
		}
		if v, ok := f["fill_rate"]; ok {
			s.FillRate, err = number(at("fill_rate"), v)
			if !fail(err) && (!(s.FillRate > 0) || s.FillRate > MaxFillRate) {
				fail(invalid(at("fill_rate"), "%g is outside (0, %g] tokens per second", s.FillRate, float64(MaxFillRate)))
			}
		}
	}

	s.WaitTimeout = def.WaitTimeout
	if v, ok := f["wait_timeout"]; ok {
		s.WaitTimeout, err = quotaDuration(at("wait_timeout"), v, 0)
		fail(err)
	}
	if v, ok := f["max_idle"]; ok {
		s.MaxIdle, err = quotaDuration(at("max_idle"), v, 0)
		fail(err)
	}
	if s.Algorithm == quota.TokenBucket {
		s.MaxDebt = def.MaxDebt
		if v, ok := f["max_debt"]; ok {
			s.MaxDebt, err = quotaDuration(at("max_debt"), v, 0)
			fail(err)
		}
	}

	// quotaservice: at most fill_rate tokens per request by default
	// (rounded up, as quota.DefaultSpec); for windows, the limit (a
	// larger request can never be admitted).
	if windowed {
		s.MaxTokensPerRequest = s.Limit
	} else {
		s.MaxTokensPerRequest = int64(math.Ceil(s.FillRate))
	}
	if v, ok := f["max_tokens_per_request"]; ok {
		s.MaxTokensPerRequest, err = integer(at("max_tokens_per_request"), v, 1, MaxQuotaTokens)
		fail(err)
	}

	if v, ok := f["soft_limit"]; ok {
		s.SoftLimit, err = fraction(at("soft_limit"), v, "0.8 warns past 80% of the limit")
		fail(err)
	}
	if v, ok := f["critical_reserve"]; ok {
		s.CriticalReserve, err = fraction(at("critical_reserve"), v, "0.2 keeps the last 20% for CRITICAL requests")
		fail(err)
	}
	if v, ok := f["ban"]; ok {
		s.Ban, err = parseBan(at("ban"), v)
		fail(err)
	}
	if err := joinProblems(errs); err != nil {
		return nil, err
	}
	// The decision core's own rules (a bucket that takes longer than its
	// limit to fill, SLIDING_WINDOW_LOG's memory bound): what it would
	// skip must be refused here.
	if err := s.Validate(); err != nil {
		return nil, invalid(path, "%v", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return s, nil
}

func parseBan(path string, raw any) (quota.Ban, error) {
	var b quota.Ban
	obj, ok := raw.(map[string]any)
	if !ok {
		return b, parseErr(path, "want an object such as {\"threshold\": 100, \"interval\": \"1s\", \"duration\": \"1m\"}, got %s", jsonKind(raw))
	}
	f, err := canonicalFields(path, obj, "threshold", "interval", "duration")
	if err != nil {
		return b, err
	}
	for _, req := range []string{"threshold", "interval", "duration"} {
		if _, ok := f[req]; !ok {
			return b, invalid(path+"."+req, "is required when ban is set (ban: {\"threshold\": 100, \"interval\": \"1s\", \"duration\": \"1m\"})")
		}
	}
	if b.Threshold, err = integer(path+".threshold", f["threshold"], 1, MaxQuotaTokens); err != nil {
		return b, err
	}
	if b.Interval, err = quotaDuration(path+".interval", f["interval"], MinWindow); err != nil {
		return b, err
	}
	if b.Duration, err = quotaDuration(path+".duration", f["duration"], MinWindow); err != nil {
		return b, err
	}
	return b, nil
}

// number reads a JSON number as a finite float64.
func number(path string, v any) (float64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, parseErr(path, "want a number, got %s%s", jsonKind(v), quotedHint(v))
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, invalid(path, "%s is not a finite number", n)
	}
	return f, nil
}

// integer reads a JSON integer in [lo, hi], written without a decimal
// point or exponent.
func integer(path string, v any, lo, hi int64) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, parseErr(path, "want an integer, got %s%s", jsonKind(v), quotedHint(v))
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		if f, _ := strconv.ParseFloat(string(n), 64); math.Abs(f) > float64(hi) {
			return 0, invalid(path, "%s is outside [%d, %d]", n, lo, hi)
		}
		return 0, invalid(path, "%s is not a whole number: write an integer without a decimal point or exponent", n)
	}
	if i < lo || i > hi {
		return 0, invalid(path, "%d is outside [%d, %d]", i, lo, hi)
	}
	return i, nil
}

// fraction reads a number in [0, 1).
func fraction(path string, v any, example string) (float64, error) {
	f, err := number(path, v)
	if err != nil {
		return 0, err
	}
	if f < 0 || f >= 1 {
		return 0, invalid(path, "%g is outside [0, 1): write a fraction of the limit (%s; 0 is off)", f, example)
	}
	return f + 0, nil // no -0
}

// quotaDuration reads a duration string in [lo, MaxQuotaDuration]; a
// nonzero lo also excludes 0.
func quotaDuration(path string, v any, lo time.Duration) (time.Duration, error) {
	s, ok := v.(string)
	if !ok {
		return 0, parseErr(path, "want a duration string such as \"1s\", \"250ms\" or \"10m\", got %s", jsonKind(v))
	}
	d, err := ParseDuration(s)
	if err != nil {
		return 0, invalid(path, "%v", err)
	}
	switch {
	case d < 0:
		return 0, invalid(path, "%s is negative", d)
	case d < lo:
		return 0, invalid(path, "%s is shorter than the minimum of %s", d, lo)
	case d > MaxQuotaDuration:
		return 0, invalid(path, "%s is longer than the limit of %s", d, MaxQuotaDuration)
	}
	return d, nil
}
