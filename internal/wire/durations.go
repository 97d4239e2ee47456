package wire

import (
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allot/allot/internal/strictjson"
)

// Durations in JSON requests: protojson reads a google.protobuf.Duration
// only as seconds ("0.5s"), while templates, namespaces and domain
// requests take Go durations ("500ms", "1m30s"). A request with
// "max_wait":"500ms" was refused (400); Unmarshal now reads both, so one
// way of writing durations works everywhere.

var durationName = (&durationpb.Duration{}).ProtoReflect().Descriptor().FullName()

// goDurations returns data with every Duration field written as a Go
// duration that protojson does not read ("500ms") rewritten in protojson's
// form ("0.5s"), or nil when there is none or data cannot be read (the
// caller then keeps protojson's own error).
func goDurations(data []byte, md protoreflect.MessageDescriptor) []byte {
	v, err := strictjson.Decode(data)
	if err != nil {
		return nil
	}
	obj, ok := v.(map[string]any)
	if !ok || !rewriteDurations(obj, md, 0) {
		return nil
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return out
}

// maxDurationDepth bounds the nesting rewriteDurations follows (requests
// nest two or three messages deep).
const maxDurationDepth = 8

// rewriteDurations rewrites the Duration fields of obj, a message md in
// JSON, in place, and reports whether it changed any.
func rewriteDurations(obj map[string]any, md protoreflect.MessageDescriptor, depth int) bool {
	if depth > maxDurationDepth {
		return false
	}
	changed := false
	for k, v := range obj {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil || fd.Message() == nil || fd.IsMap() {
			continue
		}
		one := func(v any) (any, bool) {
			if fd.Message().FullName() == durationName {
				return goToProtoDuration(v)
			}
			if m, ok := v.(map[string]any); ok {
				return m, rewriteDurations(m, fd.Message(), depth+1)
			}
			return v, false
		}
		if fd.IsList() {
			if list, ok := v.([]any); ok {
				for i, e := range list {
					var c bool
					list[i], c = one(e)
					changed = changed || c
				}
			}
			continue
		}
		if nv, c := one(v); c {
			obj[k], changed = nv, true
		}
	}
	return changed
}

// goToProtoDuration returns v, a Go duration string protojson does not read,
// in protojson's form; ok is false for anything else.
func goToProtoDuration(v any) (any, bool) {
	s, ok := v.(string)
	if !ok || protojsonDuration(s) {
		return v, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d == math.MaxInt64 || d == math.MinInt64 {
		return v, false // not a duration, or saturated: protojson says why
	}
	return formatSeconds(d), true
}

// protojsonDuration reports whether s has protojson's Duration syntax: an
// optional '-', decimal seconds with at most 9 fractional digits, 's'.
func protojsonDuration(s string) bool {
	num, ok := strings.CutSuffix(s, "s")
	if !ok {
		return false
	}
	num = strings.TrimPrefix(num, "-")
	whole, frac, _ := strings.Cut(num, ".")
	if whole == "" && frac == "" || len(frac) > 9 {
		return false
	}
	for _, part := range []string{whole, frac} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return false
			}
		}
	}
	return true
}

// formatSeconds writes d as protojson does ("1.5s", "-0.25s").
func formatSeconds(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	sec, nanos := int64(d/time.Second), int64(d%time.Second)
	if nanos == 0 {
		return sign + strconv.FormatInt(sec, 10) + "s"
	}
	frac := strings.TrimRight(strconv.FormatInt(nanos+1e9, 10)[1:], "0")
	return sign + strconv.FormatInt(sec, 10) + "." + frac + "s"
}
