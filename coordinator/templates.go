package coordinator

import (
	"fmt"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/proto/allotpb"
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
	return compileTemplates(docs, func(name string, doc []byte) (*config.Template, error) {
		t, _, err := config.ParseAndCompile(name, 1, doc)
		return t, err
	})
}

// TemplatesFromProto is ParseTemplates for templates built in Go: each
// ResourceTemplate of proto/config.proto under its name. They are checked
// as a stored document is (docs/configuration.md), and an invalid one is
// an error naming it and every problem found in it.
func TemplatesFromProto(templates map[string]*allotpb.ResourceTemplate) (TemplateSource, error) {
	return compileTemplates(templates, func(name string, pb *allotpb.ResourceTemplate) (*config.Template, error) {
		t, _, err := config.Compile(name, 1, pb)
		return t, err
	})
}

// compileTemplates compiles every template of byName into a source with
// the built-in default for the resources they leave out.
func compileTemplates[T any](byName map[string]T, compile func(string, T) (*config.Template, error)) (TemplateSource, error) {
	ts, err := config.ParseEach("template", byName, compile)
	if err != nil {
		return nil, fmt.Errorf("coordinator: %w", err)
	}
	return sources.StaticTemplates(config.NewSet(1, ts, config.DefaultTemplate())), nil
}
