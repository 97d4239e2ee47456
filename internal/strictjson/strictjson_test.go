package strictjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestReadObject(t *testing.T) {
	want := map[string]any{"a": json.Number("1"), "b": []any{"x", true, nil}, "c": map[string]any{"d": json.Number("2.5")}}
	for _, doc := range []string{`{"a": 1, "b": ["x", true, null], "c": {"d": 2.5}}`, "a: 1\nb: [x, true, null]\nc:\n  d: 2.5\n"} {
		got, err := ReadObject("doc", []byte(doc), 1000)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ReadObject(%q) = %#v, %v", doc, got, err)
		}
	}
	for _, c := range []struct{ doc, path, msg string }{
		{``, "", "doc is empty"},
		{strings.Repeat(" ", 1001), "", "doc is 1001 bytes; the limit is 1000"},
		{`[1]`, "", "must be a JSON object or YAML mapping, not a list"},
		{`{"a": {"b": 1, "b": 2}}`, "a.b", "field appears twice"},
		{`{"a": [{"x": 1, "x": 1}]}`, "a[0].x", "field appears twice"},
		{`{"a": 1} {"b": 2}`, "", "unexpected data after the object"},
		{`{"a": }`, "", "invalid JSON"},
		{"a: [unclosed", "", "invalid YAML"},
		{strings.Repeat(`{"a":`, 40) + "1" + strings.Repeat("}", 40), "", "nested too deeply"},
	} {
		_, err := ReadObject("doc", []byte(c.doc), 1000)
		var e *Error
		if !errors.As(err, &e) || e.Path != c.path || !strings.Contains(e.Msg, c.msg) {
			t.Errorf("ReadObject(%.40q) = %v; want path %q and %q", c.doc, err, c.path, c.msg)
		}
	}
}
