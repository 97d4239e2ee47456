package templates

import (
	"io/fs"
	"path"
	"strings"
	"testing"

	"github.com/allot/allot/internal/config"
)

// TestTemplatesValid checks that every example compiles without
// normalization notes.
func TestTemplatesValid(t *testing.T) {
	entries, err := fs.ReadDir(FS(), ".")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range entries {
		data, err := fs.ReadFile(FS(), e.Name())
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(e.Name(), path.Ext(e.Name()))
		tp, notes, err := config.ParseAndCompile(name, 0, data)
		if err != nil {
			t.Errorf("%s: %v", e.Name(), err)
			continue
		}
		if len(notes) > 0 {
			t.Errorf("%s: normalized: %q", e.Name(), notes)
		}
		if name == config.DefaultTemplateName && tp.Glob != "*" {
			t.Errorf("default template glob %q, want *", tp.Glob)
		}
		n++
	}
	if n < 3 {
		t.Errorf("only %d templates", n)
	}
}
