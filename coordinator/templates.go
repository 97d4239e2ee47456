package coordinator

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/allot/allot/internal/config"
)

// ParseTemplates returns a TemplateSource that always serves the given
// templates: docs maps a template name to its document, JSON or YAML, as
// stored under templates.<name> in the allot_config bucket and as
// `allot config put` takes it (docs/configuration.md). Resources that
// match none get the built-in default, as with DefaultTemplates.
//
// It is for a coordinator embedded in a program that has no
// configuration bucket (a demo, a test): `allot coordinator` watches the
// bucket instead, so templates change without a restart. An invalid
// document is an error naming it and every problem found in it.
func ParseTemplates(docs map[string][]byte) (TemplateSource, error) {
	var ts []*config.Template
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		t, _, err := config.ParseAndCompile(name, 1, docs[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("template %s: %w", name, err))
			continue
		}
		ts = append(ts, t)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return StaticTemplates(config.NewSet(1, ts, config.DefaultTemplate())), nil
}
