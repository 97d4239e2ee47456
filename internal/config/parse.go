package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/strictjson"
	"github.com/allot/allot/proto/allotpb"
)

// MaxTemplateSize is the largest template document Parse accepts.
const MaxTemplateSize = 64 << 10

// ParseError is an error in a template document. Field is the dotted path
// of the offending field ("algorithm.lease_length"), empty when the
// document as a whole is at fault.
type ParseError struct {
	Field string
	Msg   string
}

// Error implements error.
func (e *ParseError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func parseErr(field, format string, args ...any) error {
	return &ParseError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Parse decodes a template document written in JSON or YAML into its
// protobuf form. Field names may be written in snake_case (as in the
// .proto file) or lowerCamelCase (protojson). Durations accept Go syntax
// ("5s", "250ms", "1m30s") as well as protojson's ("0.250s"). Enums are
// written by name ("FAIR_SHARE"). Unknown fields, duplicate fields and
// values of the wrong type are errors that name the field; all of them
// are reported (Problems).
//
// Parse checks only the document's shape; Compile checks the values.
func Parse(data []byte) (*allotpb.ResourceTemplate, error) {
	pb, problems, err := parsePartial(data)
	if err != nil {
		return nil, err
	}
	if err := joinProblems(problems); err != nil {
		return nil, err
	}
	return pb, nil
}

// parsePartial is Parse that goes on past the fields at fault: it
// returns the template without them and their problems, so that Compile
// can still check the rest. err is set when the document as a whole
// cannot be read.
func parsePartial(data []byte) (pb *allotpb.ResourceTemplate, problems []error, err error) {
	obj, err := readDocument("template", data)
	if err != nil {
		return nil, nil, err
	}
	pb = &allotpb.ResourceTemplate{}
	norm, nerr := normalizeMessage("", obj, pb.ProtoReflect().Descriptor(), 0)
	problems = appendProblems(nil, nerr)
	canon, err := json.Marshal(norm)
	if err != nil {
		return nil, nil, parseErr("", "cannot re-encode template: %v", err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(canon, pb); err != nil {
		// normalizeMessage checks names and JSON types, so this is rare:
		// out-of-range numbers and the like.
		return nil, nil, joinProblems(append(problems, parseErr("", "invalid template: %s", strings.TrimPrefix(err.Error(), "proto: "))))
	}
	return pb, problems, nil
}

// appendProblems appends err to errs, each problem of a Problems on its
// own.
func appendProblems(errs []error, err error) []error {
	var p Problems
	switch {
	case err == nil:
		return errs
	case errors.As(err, &p):
		return append(errs, p...)
	}
	return append(errs, err)
}

// readDocument decodes a stored document (what: "template",
// "namespace") written in JSON or YAML into a JSON object, with numbers as
// json.Number, rejecting documents above MaxTemplateSize, duplicate keys
// and anything but an object.
func readDocument(what string, data []byte) (map[string]any, error) {
	obj, err := strictjson.ReadObject(what, data, MaxTemplateSize)
	return obj, asParseError(err)
}

// decodeJSON decodes one JSON value, keeping numbers as json.Number and
// rejecting duplicate object keys and trailing data.
func decodeJSON(data []byte) (any, error) {
	v, err := strictjson.Decode(data)
	return v, asParseError(err)
}

// asParseError turns a strictjson error into a *ParseError.
func asParseError(err error) error {
	var e *strictjson.Error
	if errors.As(err, &e) {
		return parseErr(e.Path, "%s", e.Msg)
	}
	return err
}

func join(path, field string) string { return strictjson.Join(path, field) }

func jsonKind(v any) string { return strictjson.Kind(v) }

var durationName = (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName()

// normalizeMessage checks obj against message descriptor md: every key
// must name a field, and values must have the field's JSON type. It
// returns a copy with durations rewritten in protojson syntax, without
// the fields at fault, and every problem found (Problems when several).
func normalizeMessage(path string, obj map[string]any, md protoreflect.MessageDescriptor, depth int) (map[string]any, error) {
	out := make(map[string]any, len(obj))
	seen := make(map[protoreflect.FieldNumber]string)
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys) // deterministic error messages
	var errs []error
	for _, k := range keys {
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			fd = md.Fields().ByJSONName(k)
		}
		fp := join(path, k)
		if fd == nil {
			errs = append(errs, parseErr(fp, "unknown field (known fields: %s)", knownFields(md)))
			continue
		}
		if prev, dup := seen[fd.Number()]; dup {
			errs = append(errs, parseErr(fp, "field is set twice (also as %q)", prev))
			continue
		}
		seen[fd.Number()] = k
		v := obj[k]
		if v == nil { // null means unset
			continue
		}
		fp = join(path, string(fd.Name()))
		nv, err := normalizeField(fp, v, fd, depth)
		errs = appendProblems(errs, err)
		if nv != nil { // a message keeps its valid fields
			out[string(fd.Name())] = nv
		}
	}
	return out, joinProblems(errs)
}

func knownFields(md protoreflect.MessageDescriptor) string {
	names := make([]string, md.Fields().Len())
	for i := range names {
		names[i] = string(md.Fields().Get(i).Name())
	}
	return strings.Join(names, ", ")
}

func normalizeField(path string, v any, fd protoreflect.FieldDescriptor, depth int) (any, error) {
	if fd.IsList() {
		arr, ok := v.([]any)
		if !ok {
			return nil, parseErr(path, "want a list, got %s", jsonKind(v))
		}
		out := make([]any, len(arr))
		var errs []error
		for i, e := range arr {
			ep := fmt.Sprintf("%s[%d]", path, i)
			if e == nil {
				errs = append(errs, parseErr(ep, "list element is null"))
				continue
			}
			ne, err := normalizeSingular(ep, e, fd, depth+1)
			errs = appendProblems(errs, err)
			out[i] = ne
		}
		if err := joinProblems(errs); err != nil {
			return nil, err // the list is left out whole
		}
		return out, nil
	}
	if fd.IsMap() {
		return nil, parseErr(path, "map fields are not supported")
	}
	return normalizeSingular(path, v, fd, depth)
}

func normalizeSingular(path string, v any, fd protoreflect.FieldDescriptor, depth int) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		md := fd.Message()
		if md.FullName() == durationName {
			return normalizeDuration(path, v)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, parseErr(path, "want an object, got %s", jsonKind(v))
		}
		return normalizeMessage(path, obj, md, depth+1)
	case protoreflect.EnumKind:
		switch x := v.(type) {
		case string:
			if fd.Enum().Values().ByName(protoreflect.Name(x)) == nil {
				return nil, parseErr(path, "unknown value %q (want one of %s)", x, enumNames(fd.Enum()))
			}
			return x, nil
		case json.Number:
			return x, nil // range checked by protojson, meaning by Compile
		}
		return nil, parseErr(path, "want one of %s, got %s", enumNames(fd.Enum()), jsonKind(v))
	case protoreflect.StringKind, protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			return nil, parseErr(path, "want a string, got %s", jsonKind(v))
		}
		return v, nil
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			return nil, parseErr(path, "want true or false, got %s", jsonKind(v))
		}
		return v, nil
	case protoreflect.DoubleKind, protoreflect.FloatKind:
		// protojson would also take quoted numbers, "NaN" and "Infinity":
		// a number written as a string is a mistake worth pointing out.
		if x, ok := v.(json.Number); ok {
			return x, nil
		}
		return nil, parseErr(path, "want a number, got %s%s", jsonKind(v), quotedHint(v))
	default: // integer kinds
		if x, ok := v.(json.Number); ok {
			return x, nil
		}
		return nil, parseErr(path, "want an integer, got %s%s", jsonKind(v), quotedHint(v))
	}
}

// quotedHint shows a string that stands where a number belongs, with a
// hint to drop the quotes.
func quotedHint(v any) string {
	s, ok := v.(string)
	if !ok {
		return ""
	}
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return fmt.Sprintf(" (%q): write numbers without quotes", s)
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	names := make([]string, ed.Values().Len())
	for i := range names {
		names[i] = string(ed.Values().Get(i).Name())
	}
	return strings.Join(names, ", ")
}

// normalizeDuration turns a Go duration string into protojson syntax.
func normalizeDuration(path string, v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return nil, parseErr(path, "want a duration string such as \"5s\", \"250ms\" or \"1m30s\", got %s", jsonKind(v))
	}
	d, err := ParseDuration(s)
	if err != nil {
		return nil, parseErr(path, "%v", err)
	}
	return FormatProtoDuration(d), nil
}

// ParseDuration parses a template duration: Go syntax ("5s", "250ms",
// "1m30s", "1.5s", "0s"), which includes protojson's "0.250s".
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: write it like \"5s\", \"250ms\" or \"1m30s\"", s)
	}
	return d, nil
}

// FormatProtoDuration writes d in protojson's Duration syntax ("1.5s").
func FormatProtoDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign = "-"
	}
	sec := int64(d / time.Second)
	nanos := int64(d % time.Second)
	if sec < 0 {
		sec = -sec
	}
	if nanos < 0 {
		nanos = -nanos
	}
	if nanos == 0 {
		return fmt.Sprintf("%s%ds", sign, sec)
	}
	frac := strings.TrimRight(fmt.Sprintf("%09d", nanos), "0")
	return fmt.Sprintf("%s%d.%ss", sign, sec, frac)
}
