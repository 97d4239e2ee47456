package config

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// Limits on template values. Templates beyond them are rejected.
const (
	// MaxNameLen bounds a template name (the key is "templates.<name>").
	MaxNameLen = 128
	// MaxCapacity bounds capacity and safe_capacity, like wants on the wire.
	MaxCapacity = wire.MaxWants
	// MaxLeaseLength bounds lease_length: a lease outliving a day would
	// make configuration changes and failover take effect too slowly.
	MaxLeaseLength = 24 * time.Hour
	// MinRefreshInterval bounds refresh_interval from below, so a unit
	// mistake ("5ms" for "5s") cannot make every client hammer the
	// coordinator.
	MinRefreshInterval = 100 * time.Millisecond
	// MaxDescriptionLen bounds the free-text description, in bytes.
	MaxDescriptionLen = 1024
	// UnlimitedSafeCapacity is the safe_capacity that means "no limit".
	UnlimitedSafeCapacity = -1
)

// CompileError is a template value that fails validation. Field is the
// template field at fault ("algorithm.refresh_interval"), or "name" for
// the key name.
type CompileError struct {
	Field string
	Msg   string
}

// Error implements error.
func (e *CompileError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &CompileError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidateName checks a template name: 1 to MaxNameLen characters from
// [A-Za-z0-9_-]. The KV key is KeyPrefix + name.
func ValidateName(name string) error {
	if name == "" {
		return invalid("name", "template name is empty")
	}
	if len(name) > MaxNameLen {
		return invalid("name", "template name is %d characters long; the limit is %d", len(name), MaxNameLen)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return invalid("name", "template name %q contains %q; use only letters, digits, '_' and '-'", name, string(rune(c)))
		}
	}
	return nil
}

// ValidateGlob checks an identifier glob: its literal parts follow the
// rules for resource ids (wire.ValidateID: at most wire.MaxIDLen bytes of
// printable UTF-8 without spaces); "*" and "?" are wildcards (see
// GlobMatch).
func ValidateGlob(glob string) error {
	if glob == "" {
		return invalid("identifier_glob", "is empty: write a resource id, or a glob such as \"mysql/*\" (\"*\" matches every resource)")
	}
	if err := wire.ValidateID("identifier_glob", glob); err != nil {
		return invalid("identifier_glob", "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), wire.ErrBadRequest.Error()+": "), "identifier_glob "))
	}
	return nil
}

// KnownParameters returns the parameter names an algorithm accepts.
// No algorithm takes parameters yet, so every parameter is rejected; the
// list is where new ones get declared.
func KnownParameters(kind allotpb.Algorithm_Kind) []string {
	switch kind {
	default:
		return nil
	}
}

// Compile validates and normalizes a parsed template stored under name at
// revision. It returns the compiled Template and notes describing each
// normalization it applied (empty when the template was used as written).
//
// Rejected (error): an invalid name or glob; a capacity that is negative,
// NaN, infinite or above MaxCapacity; a safe_capacity that is NaN,
// infinite, above MaxCapacity, or negative other than -1; negative
// durations; lease_length above MaxLeaseLength; an explicit
// refresh_interval below MinRefreshInterval or above lease_length; an
// unknown algorithm kind; unknown or repeated parameters; a description
// longer than MaxDescriptionLen bytes.
//
// Normalized (note): see docs/configuration.md, "Normalization rules".
func Compile(name string, revision uint64, pb *allotpb.ResourceTemplate) (*Template, []string, error) {
	if pb == nil {
		return nil, nil, joinProblems(appendProblems(appendProblems(nil, ValidateName(name)), invalid("template", "is missing")))
	}
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	// Every check runs, so that all of a template's problems are
	// reported at once; a value at fault is replaced by its default for
	// the checks that depend on it.
	var errs []error
	fail := func(err error) bool {
		errs = appendProblems(errs, err)
		return err != nil
	}
	fail(ValidateName(name))

	t := &Template{Name: name, Revision: revision, Description: pb.GetDescription()}

	// identifier_glob
	if !fail(ValidateGlob(pb.GetIdentifierGlob())) {
		t.Glob = pb.GetIdentifierGlob()
		if g := collapseStars(t.Glob); g != t.Glob {
			note("identifier_glob: %q matches the same ids as %q; using %q", t.Glob, g, g)
			t.Glob = g
		}
	}

	// capacity
	if !fail(checkAmount("capacity", pb.GetCapacity())) {
		t.Capacity = pb.GetCapacity()
	}

	// description
	switch {
	case len(t.Description) > MaxDescriptionLen:
		fail(invalid("description", "is %d bytes long; the limit is %d", len(t.Description), MaxDescriptionLen))
	case !utf8.ValidString(t.Description):
		fail(invalid("description", "is not valid UTF-8"))
	}

	// algorithm
	alg := pb.GetAlgorithm()
	kind := alg.GetKind()
	if _, ok := allotpb.Algorithm_Kind_name[int32(kind)]; !ok {
		fail(invalid("algorithm.kind", "unknown algorithm %d (want one of NO_ALGORITHM, STATIC, PROPORTIONAL_SHARE, FAIR_SHARE)", int32(kind)))
		kind = allotpb.Algorithm_NO_ALGORITHM
	}
	t.Algorithm = kind
	if alg == nil {
		note("algorithm: not set; using NO_ALGORITHM, which grants every client what it asks for")
	}
	switch {
	case kind == allotpb.Algorithm_NO_ALGORITHM && t.Capacity != 0:
		note("capacity: %g is not enforced: NO_ALGORITHM grants every client what it asks for", t.Capacity)
	case kind != allotpb.Algorithm_NO_ALGORITHM && t.Capacity == 0:
		note("capacity: 0 means every resource matching %q is blocked", t.Glob)
	}

	// parameters
	fail(compileParams(t, alg.GetParameters()))

	// durations
	lease, leaseSet, err := duration("algorithm.lease_length", alg.GetLeaseLength())
	switch {
	case fail(err), !leaseSet:
		lease = DefaultLeaseLength
	case lease == 0:
		note("algorithm.lease_length: 0s means the default; using %s", DefaultLeaseLength)
		lease = DefaultLeaseLength
	case lease > MaxLeaseLength:
		fail(invalid("algorithm.lease_length", "%s is longer than the limit of %s", lease, MaxLeaseLength))
		lease = DefaultLeaseLength
	case lease < MinRefreshInterval:
		fail(invalid("algorithm.lease_length", "%s is shorter than the minimum of %s", lease, MinRefreshInterval))
		lease = DefaultLeaseLength
	}
	t.LeaseLength = lease

	refresh, refreshSet, err := duration("algorithm.refresh_interval", alg.GetRefreshInterval())
	switch {
	case fail(err):
	case refreshSet && refresh != 0 && refresh < MinRefreshInterval:
		fail(invalid("algorithm.refresh_interval", "%s is shorter than the minimum of %s", refresh, MinRefreshInterval))
	case refreshSet && refresh > lease:
		fail(invalid("algorithm.refresh_interval", "%s is longer than lease_length %s: leases would expire before clients refresh them", refresh, lease))
	case refreshSet && refresh != 0:
		// as written
	default:
		if refreshSet {
			note("algorithm.refresh_interval: 0s means the default")
		}
		refresh = DefaultRefreshInterval
		if refresh > lease {
			refresh = max(lease/2, MinRefreshInterval)
			note("algorithm.refresh_interval: the default %s exceeds lease_length %s; using %s", DefaultRefreshInterval, lease, refresh)
		}
	}
	if refresh == lease {
		note("algorithm.refresh_interval: equals lease_length (%s); leases may lapse between refreshes, a refresh interval of at most half the lease length is safer", lease)
	}
	t.RefreshInterval = refresh

	learning, learningSet, err := duration("algorithm.learning_mode_duration", alg.GetLearningModeDuration())
	switch {
	case fail(err), !learningSet:
		learning = lease
	case learning > lease:
		note("algorithm.learning_mode_duration: %s exceeds lease_length; no lease outlives %s, so using %s", learning, lease, lease)
		learning = lease
	}
	t.LearningModeDuration = learning

	// safe_capacity and partition
	t.Floor, err = compileFloor(pb, t, note)
	fail(err)
	t.Shadow = pb.GetShadow()
	if pb.MaxPriority != nil {
		t.MaxPriority, t.HasMaxPriority = pb.GetMaxPriority(), true
	}
	t.Tenants, err = compileTenants(pb.GetTenants(), kind)
	fail(err)
	if err := joinProblems(errs); err != nil {
		return nil, nil, err
	}
	return t, notes, nil
}

// compileFloor works out the floor policy from safe_capacity (the
// legacy spelling of an absolute floor, or -1 for none) and partition.
func compileFloor(pb *allotpb.ResourceTemplate, t *Template, note func(string, ...any)) (FloorPolicy, error) {
	f := DefaultFloor()
	pp := pb.GetPartition()
	if pp == nil {
		pp = &allotpb.PartitionPolicy{}
	}
	if pb.SafeCapacity != nil {
		if pp.Floor != nil || pp.FloorShare != nil {
			return f, invalid("safe_capacity", "is set together with partition.floor or partition.floor_share; write the floor once (partition.floor is the same as safe_capacity)")
		}
		sc := pb.GetSafeCapacity()
		switch {
		case sc == UnlimitedSafeCapacity:
			f.Unlimited = true
		case math.IsNaN(sc) || math.IsInf(sc, 0):
			return f, invalid("safe_capacity", "%g is not a number; use -1 (unlimited), 0 (blocked) or a capacity", sc)
		case sc < 0:
			return f, invalid("safe_capacity", "%g is negative; use -1 (unlimited), 0 (blocked) or a capacity up to capacity", sc)
		case sc > MaxCapacity:
			return f, invalid("safe_capacity", "%g is above the limit of %g", sc, float64(MaxCapacity))
		case sc > t.Capacity && t.Algorithm != allotpb.Algorithm_NO_ALGORITHM:
			note("safe_capacity: %g exceeds capacity; a client can never safely use more than the capacity, using %g", sc, t.Capacity)
			sc = t.Capacity
		}
		t.SafeCapacity, t.HasSafeCapacity = sc, true
		if !f.Unlimited {
			f.Absolute, f.HasAbsolute = sc, true
		}
	}
	switch {
	case pp.Floor != nil && pp.FloorShare != nil:
		return f, invalid("partition", "floor and floor_share are both set; write one (an absolute figure, or a fraction of the fair share)")
	case pp.Floor != nil:
		v := pp.GetFloor()
		if err := checkAmount("partition.floor", v); err != nil {
			return f, err
		}
		if v > t.Capacity && t.Algorithm != allotpb.Algorithm_NO_ALGORITHM {
			note("partition.floor: %g exceeds capacity; using %g", v, t.Capacity)
			v = t.Capacity
		}
		f.Absolute, f.HasAbsolute = v, true
	case pp.FloorShare != nil:
		v := pp.GetFloorShare()
		if math.IsNaN(v) || v < 0 || v > 1 {
			return f, invalid("partition.floor_share", "%g is not a fraction of the fair share; write a number from 0 to 1", v)
		}
		f.Share = v
	}
	lease, set, err := duration("partition.floor_lease", pp.GetFloorLease())
	switch {
	case err != nil:
		return f, err
	case !set:
		f.Lease = max(f.Lease, t.LeaseLength)
	case lease > MaxFloorLease:
		return f, invalid("partition.floor_lease", "%s is longer than the limit of %s", lease, MaxFloorLease)
	case lease < t.LeaseLength:
		note("partition.floor_lease: %s is shorter than lease_length; a floor lasts at least as long as the lease it follows, using %s", lease, t.LeaseLength)
		f.Lease = t.LeaseLength
	default:
		f.Lease = lease
	}
	return f, nil
}

func checkAmount(field string, v float64) error {
	switch {
	case math.IsNaN(v):
		return invalid(field, "is NaN; write a number between 0 and %g", float64(MaxCapacity))
	case math.IsInf(v, 0):
		return invalid(field, "is infinite; write a number between 0 and %g (NO_ALGORITHM does not limit)", float64(MaxCapacity))
	case v < 0:
		return invalid(field, "%g is negative", v)
	case v > MaxCapacity:
		return invalid(field, "%g is above the limit of %g", v, float64(MaxCapacity))
	}
	return nil
}

// duration converts an optional protobuf duration, rejecting invalid and
// negative ones. set reports whether the field was present.
func duration(field string, d *durationpb.Duration) (v time.Duration, set bool, err error) {
	if d == nil {
		return 0, false, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, true, invalid(field, "invalid duration: %v", err)
	}
	v = d.AsDuration()
	if v < 0 {
		return 0, true, invalid(field, "%s is negative", v)
	}
	if v == math.MaxInt64 { // saturated
		return 0, true, invalid(field, "is too long")
	}
	return v, true, nil
}

func compileParams(t *Template, params []*allotpb.NamedParameter) error {
	if len(params) == 0 {
		return nil
	}
	known := KnownParameters(t.Algorithm)
	t.Params = make(map[string]string, len(params))
	for i, p := range params {
		field := fmt.Sprintf("algorithm.parameters[%d]", i)
		name := p.GetName()
		if name == "" {
			return invalid(field, "parameter has no name")
		}
		if !containsString(known, name) {
			if len(known) == 0 {
				return invalid(field, "unknown parameter %q: algorithm %s takes no parameters", name, t.Algorithm)
			}
			return invalid(field, "unknown parameter %q for algorithm %s (known: %s)", name, t.Algorithm, strings.Join(known, ", "))
		}
		if _, dup := t.Params[name]; dup {
			return invalid(field, "parameter %q appears twice", name)
		}
		t.Params[name] = p.GetValue()
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// collapseStars replaces runs of "*" by one "*"; they match the same ids.
func collapseStars(g string) string {
	for strings.Contains(g, "**") {
		g = strings.ReplaceAll(g, "**", "*")
	}
	return g
}

// ParseAndCompile parses a stored template document and compiles it.
// Every problem is reported (Problems when several): the shape's first,
// then the values' (but those of fields whose shape is at fault).
func ParseAndCompile(name string, revision uint64, data []byte) (*Template, []string, error) {
	pb, problems, err := parsePartial(data)
	if err != nil {
		return nil, nil, joinProblems(appendProblems(appendProblems(nil, ValidateName(name)), err))
	}
	t, notes, err := Compile(name, revision, pb)
	if len(problems) == 0 {
		return t, notes, err
	}
	for _, ce := range appendProblems(nil, err) {
		f := fieldOf(ce)
		if !slices.ContainsFunc(problems, func(pe error) bool { return within(f, fieldOf(pe)) }) {
			problems = append(problems, ce)
		}
	}
	return nil, nil, joinProblems(problems)
}

// IsValidationError reports whether err comes from Parse or Compile, as
// opposed to I/O or NATS.
func IsValidationError(err error) bool {
	var pe *ParseError
	var ce *CompileError
	return errors.As(err, &pe) || errors.As(err, &ce)
}
