// Package strictjson reads configuration documents strictly: JSON or
// YAML, numbers kept exact (json.Number), duplicate keys, trailing data
// and deep nesting refused, with errors that name the field.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// MaxNesting bounds how deeply a document may nest.
const MaxNesting = 32

// Error is an error in a document. Path is the dotted path of the
// offending field ("resources.api.tiers[0]"), empty when the document as
// a whole is at fault.
type Error struct {
	Path string
	Msg  string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Path == "" {
		return e.Msg
	}
	return e.Path + ": " + e.Msg
}

func errorf(path, format string, args ...any) error {
	return &Error{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// ReadObject decodes a stored document (what names it in errors: "template")
// of at most maxSize bytes: a JSON object, or a YAML mapping when it
// does not start with '{' or '['. Errors are *Error.
func ReadObject(what string, data []byte, maxSize int) (map[string]any, error) {
	if len(data) > maxSize {
		return nil, errorf("", "%s is %d bytes; the limit is %d", what, len(data), maxSize)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errorf("", "%s is empty: write a JSON object or a YAML mapping", what)
	}
	jsonData := trimmed
	if trimmed[0] != '{' && trimmed[0] != '[' {
		var err error
		// Strict: a key given twice is an error, as in JSON (the lenient
		// conversion keeps the last, so "fail: open" then "fail: closed"
		// silently meant closed).
		jsonData, err = yaml.YAMLToJSONStrict(trimmed)
		if err != nil {
			return nil, errorf("", "invalid YAML: %v", err)
		}
	}
	v, err := Decode(jsonData)
	if err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errorf("", "%s must be a JSON object or YAML mapping, not %s", what, Kind(v))
	}
	return obj, nil
}

// Decode decodes one JSON value, keeping numbers as json.Number and
// rejecting duplicate object keys, nesting deeper than MaxNesting and
// trailing data. Errors are *Error.
func Decode(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errorf("", "invalid JSON: unexpected data after the object")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, path string, depth int) (any, error) {
	if depth > MaxNesting {
		return nil, errorf("", "nested too deeply (more than %d levels)", MaxNesting)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, errorf("", "invalid JSON: %v", err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := make(map[string]any)
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, errorf("", "invalid JSON: %v", err)
				}
				k, ok := kt.(string)
				if !ok {
					return nil, errorf(path, "invalid JSON: object key is not a string")
				}
				if _, dup := obj[k]; dup {
					return nil, errorf(Join(path, k), "field appears twice")
				}
				val, err := decodeValue(dec, Join(path, k), depth+1)
				if err != nil {
					return nil, err
				}
				obj[k] = val
			}
			if _, err := dec.Token(); err != nil {
				return nil, errorf("", "invalid JSON: %v", err)
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				val, err := decodeValue(dec, fmt.Sprintf("%s[%d]", path, len(arr)), depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, val)
			}
			if _, err := dec.Token(); err != nil {
				return nil, errorf("", "invalid JSON: %v", err)
			}
			return arr, nil
		}
		return nil, errorf(path, "invalid JSON: unexpected %q", t)
	default:
		return t, nil
	}
}

// Join appends field to a dotted path.
func Join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

// Kind names the JSON type of a decoded value, for error messages ("a
// string").
func Kind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
