package domainlimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/allot/allot/internal/strictjson"
)

// Kind is the kind of a resource: rate-limited or copy-limited.
type Kind uint8

// Resource kinds.
const (
	KindRate   Kind = iota + 1 // "rate": hits, paper 2.1
	KindCopies                 // "copies": holds, paper 2.2
)

// String returns the kind as the configuration writes it.
func (k Kind) String() string {
	switch k {
	case KindRate:
		return "rate"
	case KindCopies:
		return "copies"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Namespace is a parsed "domains.<namespace>" document: the domain-
// limited resources of one application and its switches (paper 4.3).
type Namespace struct {
	Name string
	// Revision is the KV revision the namespace was read from (set by
	// the configuration watcher; 0 otherwise).
	Revision uint64
	// IgnoreConfigured turns the limits off: every request is granted,
	// and still counted.
	IgnoreConfigured bool
	// AllowUnconfigured gives unknown resources the most permissive
	// values (PermissiveRate, PermissiveCopies), still counted.
	AllowUnconfigured bool
	// Resources by name; each spec is normalized.
	Resources map[string]Resource
	// Tenants, when set, are the only tenants (NATS accounts whose
	// requests cross a service import) that may use the namespace;
	// requests from the service's own account always may.
	Tenants []string
	// Fail is what the namespace's clients do when no domain service
	// answers them; FailShare unless the document says otherwise.
	Fail FailMode
}

// Resource is one configured resource of a namespace.
type Resource struct {
	Name   string
	Kind   Kind
	Rate   RateSpec // when Kind is KindRate
	Copies CopySpec // when Kind is KindCopies
	// Permissive is set by Resolve when the spec is the most permissive
	// one instead of a configured one (ignore_configured or
	// allow_unconfigured).
	Permissive bool
}

// Errors of Resolve, the paper's client errors 2 and 3 (section 3.1).
var (
	// ErrUnknownResource: no configuration for the resource.
	ErrUnknownResource = errors.New("unknown resource")
	// ErrWrongKind: a request on a copy resource, or a reserve on a
	// rate resource.
	ErrWrongKind = errors.New("wrong kind of resource")
)

// Resolve returns the spec an operation of kind on resource is decided
// by (paper 4.3): the configured one; with IgnoreConfigured the most
// permissive one instead (limits off, hits and holds still counted); for
// a resource the namespace does not list, with AllowUnconfigured the
// most permissive one. The two switches are independent. Errors wrap
// ErrWrongKind (a configured resource of the other kind),
// ErrUnknownResource or (bad name) ErrInvalid.
func (ns *Namespace) Resolve(resource string, kind Kind) (Resource, error) {
	if err := ValidateName("resource", resource); err != nil {
		return Resource{}, err
	}
	if kind != KindRate && kind != KindCopies {
		return Resource{}, invalidf("kind %v is neither rate nor copies", kind)
	}
	r, ok := ns.Resources[resource]
	switch {
	case ok && r.Kind != kind:
		return Resource{}, fmt.Errorf("%w: resource %s of namespace %s is a %s resource, not %s", ErrWrongKind, resource, ns.Name, r.Kind, kind)
	case ok && !ns.IgnoreConfigured:
		return r, nil
	case !ok && !ns.AllowUnconfigured:
		return Resource{}, fmt.Errorf("%w: namespace %s has no resource %s", ErrUnknownResource, ns.Name, resource)
	}
	r = Resource{Name: resource, Kind: kind, Permissive: true}
	if kind == KindRate {
		r.Rate = PermissiveRate()
	} else {
		r.Copies = PermissiveCopies()
	}
	return r, nil
}

// MaxDocumentSize bounds a namespace document.
const MaxDocumentSize = 1 << 20

func pathErr(path, format string, args ...any) error {
	if path == "" {
		return invalidf(format, args...)
	}
	return invalidf("%s: %s", path, fmt.Sprintf(format, args...))
}

// ParseNamespace parses a "domains.<name>" document, JSON or YAML
// (docs/domains.md), strictly: unknown or duplicate fields, wrong types,
// unknown kinds, bad durations and invalid limits are errors naming the
// field ("resources.api.tiers[0].window") and wrapping ErrInvalid. Every
// spec is normalized (RateSpec.Normalize, CopySpec.Normalize).
func ParseNamespace(name string, data []byte) (*Namespace, error) {
	ns, _, err := ParseNamespaceNotes(name, data)
	return ns, err
}

// ParseNamespaceNotes is ParseNamespace, and also says what
// normalization changed, one note per change, naming the field as the
// document wrote it ("resources.api.tiers[1].window: 5s shortened to the
// active time 3s").
func ParseNamespaceNotes(name string, data []byte) (*Namespace, []string, error) {
	if err := ValidateName("namespace name", name); err != nil {
		return nil, nil, err
	}
	obj, err := readDocument(data)
	if err != nil {
		return nil, nil, err
	}
	f, err := fields("", obj, "ignore_configured", "allow_unconfigured", "resources", "tenants", "fail")
	if err != nil {
		return nil, nil, err
	}
	ns := &Namespace{Name: name, Resources: map[string]Resource{}}
	var notes []string
	if ns.IgnoreConfigured, err = boolean("ignore_configured", f["ignore_configured"]); err != nil {
		return nil, nil, err
	}
	if ns.AllowUnconfigured, err = boolean("allow_unconfigured", f["allow_unconfigured"]); err != nil {
		return nil, nil, err
	}
	if ns.Tenants, err = parseTenants(f["tenants"]); err != nil {
		return nil, nil, err
	}
	if ns.Fail, err = failMode(f["fail"]); err != nil {
		return nil, nil, err
	}
	res, err := object("resources", f["resources"])
	if err != nil {
		return nil, nil, err
	}
	for _, rn := range slices.Sorted(maps.Keys(res)) {
		path := "resources." + rn
		if err := ValidateName("resource name", rn); err != nil {
			return nil, nil, pathErr("resources", "%s", err)
		}
		r, err := parseResource(path, rn, res[rn])
		if err != nil {
			return nil, nil, err
		}
		var rnotes []string
		if ns.Resources[rn], rnotes, err = normalizeResource(path, r); err != nil {
			return nil, nil, err
		}
		notes = append(notes, rnotes...)
	}
	return ns, notes, nil
}

func parseResource(path, name string, raw any) (Resource, error) {
	obj, err := object(path, raw)
	if err != nil {
		return Resource{}, err
	}
	kind, ok := obj["kind"].(string)
	if !ok {
		return Resource{}, pathErr(path+".kind", "is required: \"rate\" or \"copies\"")
	}
	r := Resource{Name: name}
	switch kind {
	case "rate":
		r.Kind = KindRate
		r.Rate, err = parseRate(path, obj)
	case "copies":
		r.Kind = KindCopies
		r.Copies, err = parseCopies(path, obj)
	default:
		return Resource{}, pathErr(path+".kind", "%q is not a kind: want \"rate\" or \"copies\"", kind)
	}
	return r, err
}

// normalizeResource normalizes r's spec, with errors and notes naming
// fields under path.
func normalizeResource(path string, r Resource) (Resource, []string, error) {
	var notes []string
	var err error
	if r.Kind == KindRate {
		before := r.Rate
		if r.Rate, err = before.Normalize(); err == nil {
			notes = rateNotes(path, before, r.Rate)
		}
	} else {
		before := r.Copies
		if r.Copies, err = before.Normalize(); err == nil {
			notes = copyNotes(path, before, r.Copies)
		}
	}
	if err != nil {
		return Resource{}, nil, pathErr("", "%s.%s", path, err)
	}
	return r, notes, nil
}

func parseRate(path string, obj map[string]any) (RateSpec, error) {
	f, err := fields(path, obj, "kind", "hard_limit", "global_limit", "tiers", "domains")
	if err != nil {
		return RateSpec{}, err
	}
	var s RateSpec
	if s.Hard, err = limit(path+".hard_limit", f["hard_limit"]); err != nil {
		return RateSpec{}, err
	}
	if s.Global, err = limit(path+".global_limit", f["global_limit"]); err != nil {
		return RateSpec{}, err
	}
	if s.Tiers, err = parseTiers(path+".tiers", f["tiers"]); err != nil {
		return RateSpec{}, err
	}
	doms, err := object(path+".domains", f["domains"])
	if err != nil {
		return RateSpec{}, err
	}
	if len(doms) > 0 {
		s.Domains = make(map[string][]Tier, len(doms))
	}
	for _, d := range slices.Sorted(maps.Keys(doms)) {
		at := path + ".domains." + d
		o, err := object(at, doms[d])
		if err != nil {
			return RateSpec{}, err
		}
		df, err := fields(at, o, "tiers")
		if err != nil {
			return RateSpec{}, err
		}
		if s.Domains[d], err = parseTiers(at+".tiers", df["tiers"]); err != nil {
			return RateSpec{}, err
		}
	}
	return s, nil
}

func parseTiers(path string, raw any) ([]Tier, error) {
	if raw == nil {
		return nil, nil
	}
	arr, ok := raw.([]any)
	if !ok {
		return nil, pathErr(path, "want a list of tiers, got %s", jsonKind(raw))
	}
	tiers := make([]Tier, len(arr))
	for i, v := range arr {
		at := fmt.Sprintf("%s[%d]", path, i)
		o, err := object(at, v)
		if err != nil {
			return nil, err
		}
		f, err := fields(at, o, "limit", "window", "active", "cooldown", "skippable")
		if err != nil {
			return nil, err
		}
		t := &tiers[i]
		if t.Limit, err = limit(at+".limit", f["limit"]); err != nil {
			return nil, err
		}
		for _, d := range []struct {
			name     string
			to       *time.Duration
			required bool
		}{{"window", &t.Window, true}, {"active", &t.Active, true}, {"cooldown", &t.Cooldown, false}} {
			if *d.to, err = duration(at+"."+d.name, f[d.name], d.required); err != nil {
				return nil, err
			}
		}
		if t.Skippable, err = boolean(at+".skippable", f["skippable"]); err != nil {
			return nil, err
		}
	}
	return tiers, nil
}

func parseCopies(path string, obj map[string]any) (CopySpec, error) {
	f, err := fields(path, obj, "kind", "domain_limit", "global_limit", "domains", "groups")
	if err != nil {
		return CopySpec{}, err
	}
	var s CopySpec
	if s.DomainLimit, err = limit(path+".domain_limit", f["domain_limit"]); err != nil {
		return CopySpec{}, err
	}
	if s.GlobalLimit, err = limit(path+".global_limit", f["global_limit"]); err != nil {
		return CopySpec{}, err
	}
	doms, err := object(path+".domains", f["domains"])
	if err != nil {
		return CopySpec{}, err
	}
	if len(doms) > 0 {
		s.Domains = make(map[string]int64, len(doms))
	}
	for _, d := range slices.Sorted(maps.Keys(doms)) {
		at := path + ".domains." + d
		o, err := object(at, doms[d])
		if err != nil {
			return CopySpec{}, err
		}
		df, err := fields(at, o, "domain_limit")
		if err != nil {
			return CopySpec{}, err
		}
		if s.Domains[d], err = limit(at+".domain_limit", df["domain_limit"]); err != nil {
			return CopySpec{}, err
		}
	}
	if raw := f["groups"]; raw != nil {
		arr, ok := raw.([]any)
		if !ok {
			return CopySpec{}, pathErr(path+".groups", "want a list of groups, got %s", jsonKind(raw))
		}
		for i, v := range arr {
			g, err := parseGroup(fmt.Sprintf("%s.groups[%d]", path, i), v)
			if err != nil {
				return CopySpec{}, err
			}
			s.Groups = append(s.Groups, g)
		}
	}
	return s, nil
}

func parseGroup(at string, v any) (Group, error) {
	o, err := object(at, v)
	if err != nil {
		return Group{}, err
	}
	f, err := fields(at, o, "name", "limit", "domains")
	if err != nil {
		return Group{}, err
	}
	var g Group
	var ok bool
	if g.Name, ok = f["name"].(string); !ok {
		return Group{}, pathErr(at+".name", "is required: a group name such as \"free\"")
	}
	if g.Limit, err = limit(at+".limit", f["limit"]); err != nil {
		return Group{}, err
	}
	if raw := f["domains"]; raw != nil {
		ds, ok := raw.([]any)
		if !ok {
			return Group{}, pathErr(at+".domains", "want a list of domain names, got %s", jsonKind(raw))
		}
		for j, d := range ds {
			s, ok := d.(string)
			if !ok {
				return Group{}, pathErr(fmt.Sprintf("%s.domains[%d]", at, j), "want a domain name, got %s", jsonKind(d))
			}
			g.Domains = append(g.Domains, s)
		}
	}
	return g, nil
}

// failMode reads the fail field; unset is FailShare.
func failMode(raw any) (FailMode, error) {
	if raw == nil {
		return FailShare, nil
	}
	s, ok := raw.(string)
	if !ok {
		return 0, pathErr("fail", "want \"open\", \"closed\" or \"share\", got %s", jsonKind(raw))
	}
	m, err := ParseFailMode(s)
	if err != nil {
		return 0, pathErr("fail", "%s", err)
	}
	return m, nil
}

// MaxTenants bounds a namespace's tenant list.
const MaxTenants = 1000

// parseTenants reads the tenants list: account names, each once.
func parseTenants(raw any) ([]string, error) {
	if raw == nil {
		return nil, nil
	}
	arr, ok := raw.([]any)
	if !ok {
		return nil, pathErr("tenants", "want a list of tenant (NATS account) names, got %s", jsonKind(raw))
	}
	if len(arr) == 0 || len(arr) > MaxTenants {
		return nil, pathErr("tenants", "lists %d tenants; want 1 to %d (leave it out to open the namespace to every tenant)", len(arr), MaxTenants)
	}
	out := make([]string, 0, len(arr))
	for i, v := range arr {
		at := fmt.Sprintf("tenants[%d]", i)
		s, ok := v.(string)
		if !ok {
			return nil, pathErr(at, "want a tenant name, got %s", jsonKind(v))
		}
		if err := ValidateName("tenant name", s); err != nil {
			return nil, pathErr(at, "%s", err)
		}
		if slices.Contains(out, s) {
			return nil, pathErr(at, "tenant %q is listed twice", s)
		}
		out = append(out, s)
	}
	return out, nil
}

// fields checks obj's keys against known and returns obj without null
// values (null is unset).
func fields(path string, obj map[string]any, known ...string) (map[string]any, error) {
	out := make(map[string]any, len(obj))
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, k) {
			return nil, pathErr(join(path, k), "unknown field (known fields: %s)", strings.Join(known, ", "))
		}
		if obj[k] != nil {
			out[k] = obj[k]
		}
	}
	return out, nil
}

func join(path, k string) string { return strictjson.Join(path, k) }

// object reads an object; nil (unset) is an empty one.
func object(path string, raw any) (map[string]any, error) {
	if raw == nil {
		return nil, nil
	}
	o, ok := raw.(map[string]any)
	if !ok {
		return nil, pathErr(path, "want an object, got %s", jsonKind(raw))
	}
	return o, nil
}

func boolean(path string, raw any) (bool, error) {
	if raw == nil {
		return false, nil
	}
	b, ok := raw.(bool)
	if !ok {
		return false, pathErr(path, "want true or false, got %s", jsonKind(raw))
	}
	return b, nil
}

// limit reads an integer in [0, MaxLimit]; unset is Unlimited.
func limit(path string, raw any) (int64, error) {
	if raw == nil {
		return Unlimited, nil
	}
	n, ok := raw.(json.Number)
	if !ok {
		return 0, pathErr(path, "want an integer (leave it out for no limit), got %s", jsonKind(raw))
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		return 0, pathErr(path, "%s is not an integer in [0, %d]", n, MaxLimit)
	}
	if i < 0 || i > MaxLimit {
		return 0, pathErr(path, "%d is outside [0, %d] (leave it out for no limit)", i, MaxLimit)
	}
	return i, nil
}

func duration(path string, raw any, required bool) (time.Duration, error) {
	if raw == nil {
		if required {
			return 0, pathErr(path, "is required: a duration such as \"1s\" or \"10m\"")
		}
		return 0, nil
	}
	s, ok := raw.(string)
	if !ok {
		return 0, pathErr(path, "want a duration string such as \"1s\" or \"10m\", got %s", jsonKind(raw))
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, pathErr(path, "%q is not a duration: write Go syntax such as \"1s\", \"250ms\" or \"1h30m\"", s)
	}
	if d < 0 || d > MaxDuration {
		return 0, pathErr(path, "%s is outside [0, %s]", d, MaxDuration)
	}
	return d, nil
}

func jsonKind(v any) string { return strictjson.Kind(v) }

// readDocument decodes a JSON object or YAML mapping strictly
// (strictjson.ReadObject), with errors wrapping ErrInvalid.
func readDocument(data []byte) (map[string]any, error) {
	obj, err := strictjson.ReadObject("domains document", data, MaxDocumentSize)
	if err != nil {
		return nil, invalidf("%s", err)
	}
	return obj, nil
}
