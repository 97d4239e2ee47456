package envoyrl

import (
	"fmt"
	"math"
	"strings"

	yaml "go.yaml.in/yaml/v2"
)

// What a document's keys may hold.
type kind int

const (
	kindText       kind = iota // a scalar read as text (key, value, name…)
	kindBool                   // true or false
	kindUint32                 // an integer in [0, 2^32)
	kindList                   // a list of mappings
	kindMapping                // a mapping
	kindPositive               // an integer in [1, 2^32)
	kindNotAllowed             // known to the reference, not at this place
)

// The keys of each kind of mapping. The reference accepts every key of
// every mapping anywhere (and ignores the misplaced ones); allot refuses a
// misplaced key unless ParseOptions.Reference.
var (
	rootKeys = map[string]kind{"domain": kindText, "descriptors": kindList}
	descKeys = map[string]kind{
		"key": kindText, "value": kindText, "rate_limit": kindMapping, "descriptors": kindList,
		"shadow_mode": kindBool, "quota_mode": kindBool, "detailed_metric": kindBool,
		"value_to_metric": kindBool, "share_threshold": kindBool,
	}
	limitKeys = map[string]kind{
		"unit": kindText, "requests_per_unit": kindUint32, "unit_multiplier": kindPositive,
		"unlimited": kindBool, "name": kindText, "replaces": kindList,
	}
	replacesKeys = map[string]kind{"name": kindText}
)

// referenceKey reports whether envoyproxy/ratelimit knows key (its
// validKeys): keys of any mapping, but not allot's extensions.
func referenceKey(key string) bool {
	if key == "unit_multiplier" {
		return false
	}
	for _, m := range []map[string]kind{rootKeys, descKeys, limitKeys, replacesKeys} {
		if _, ok := m[key]; ok {
			return true
		}
	}
	return false
}

// walker checks a document's structure before it is decoded: every key
// known and in its place, every value of the right kind, no key twice.
type walker struct {
	source string
	ref    bool
}

func (w *walker) fail(path, format string, args ...any) error {
	return &ConfigError{Source: w.source, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (w *walker) root(tree yaml.MapSlice) error {
	return w.mapping("", tree, rootKeys)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapping checks one mapping whose keys are allowed, and recurses.
func (w *walker) mapping(path string, ms yaml.MapSlice, allowed map[string]kind) error {
	last := make(map[string]int, len(ms))
	for i, item := range ms {
		key, ok := item.Key.(string)
		if !ok {
			return w.fail(path, "config error, key is not of type string: %s", describe(item.Key))
		}
		if _, dup := last[key]; dup && !w.ref {
			return w.fail(join(path, key), "duplicate key %q", key)
		}
		last[key] = i
	}
	for i, item := range ms {
		key := item.Key.(string)
		if last[key] != i {
			continue // yaml.v2 keeps a repeated key's last value
		}
		p := join(path, key)
		k, ok := allowed[key]
		if key == "unit_multiplier" && w.ref {
			ok = false
		}
		if !ok {
			if !referenceKey(key) {
				return w.fail(p, "config error, unknown key %q", key)
			}
			if !w.ref {
				return w.fail(p, "key %q does not belong here%s", key, belongs(key))
			}
			k = kindNotAllowed
		}
		if err := w.value(p, key, item.Value, k); err != nil {
			return err
		}
	}
	return nil
}

// value checks one value of the given kind. null means absent, as yaml.v2
// leaves the field at its zero value.
func (w *walker) value(path, key string, v any, k kind) error {
	if v == nil {
		return nil
	}
	switch k {
	case kindNotAllowed:
		return w.loose(path, v)
	case kindText:
		switch v.(type) {
		case string, int, bool:
			return nil
		}
		return w.fail(path, "%s must be a string, not %s", key, describe(v))
	case kindBool:
		if _, ok := v.(bool); ok {
			return nil
		}
		return w.fail(path, "%s must be true or false, not %s", key, describe(v))
	case kindUint32, kindPositive:
		n, ok := v.(int)
		min := 0
		if k == kindPositive {
			min = 1
		}
		if !ok || n < min || uint64(n) > math.MaxUint32 {
			return w.fail(path, "%s must be an integer from %d to %d, not %s", key, min, uint32(math.MaxUint32), describe(v))
		}
		return nil
	case kindMapping:
		ms, ok := v.(yaml.MapSlice)
		if !ok {
			return w.fail(path, "%s must be a mapping, not %s", key, describe(v))
		}
		return w.mapping(path, ms, limitKeys)
	case kindList:
		list, ok := v.([]any)
		if !ok {
			return w.fail(path, "%s must be a list of mappings, not %s", key, describe(v))
		}
		allowed := descKeys
		if key == "replaces" {
			allowed = replacesKeys
		}
		for i, e := range list {
			p := fmt.Sprintf("%s[%d]", path, i)
			ms, ok := e.(yaml.MapSlice)
			if !ok {
				return w.fail(p, "config error, yaml file contains list of type other than map: %s", describe(e))
			}
			if err := w.mapping(p, ms, allowed); err != nil {
				return err
			}
		}
		return nil
	}
	return w.fail(path, "unexpected kind of key %q", key)
}

// loose checks an ignored value as the reference's validateYamlKeys does:
// scalars of its leaf types, lists of mappings, mappings of known keys.
func (w *walker) loose(path string, v any) error {
	switch v := v.(type) {
	case nil, string, int, bool:
		return nil
	case yaml.MapSlice:
		return w.mapping(path, v, nil)
	case []any:
		for i, e := range v {
			ms, ok := e.(yaml.MapSlice)
			if !ok {
				return w.fail(fmt.Sprintf("%s[%d]", path, i), "config error, yaml file contains list of type other than map: %s", describe(e))
			}
			if err := w.mapping(fmt.Sprintf("%s[%d]", path, i), ms, nil); err != nil {
				return err
			}
		}
		return nil
	}
	return w.fail(path, "error checking config: %s is not a string, integer or boolean", describe(v))
}

// belongs hints where a misplaced key goes.
func belongs(key string) string {
	var places []string
	for _, p := range []struct {
		keys map[string]kind
		name string
	}{{rootKeys, "the top of a document"}, {descKeys, "a descriptor"}, {limitKeys, "a rate_limit"}, {replacesKeys, "a replaces entry"}} {
		if _, ok := p.keys[key]; ok {
			places = append(places, p.name)
		}
	}
	return " (it belongs in " + strings.Join(places, " or ") + ")"
}

// describe names a YAML value's kind for errors, without echoing a
// possibly huge value.
func describe(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("the string %q", v)
	case int:
		return fmt.Sprintf("the integer %d", v)
	case uint64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %g", v)
	case bool:
		return fmt.Sprintf("%t", v)
	case yaml.MapSlice:
		return "a mapping"
	case []any:
		return "a list"
	}
	return fmt.Sprintf("a %T", v)
}
