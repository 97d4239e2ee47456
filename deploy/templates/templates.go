// Package templates holds the example resource templates that `allot up`
// seeds into the configuration bucket (configkv.SeedTemplates) when their
// keys have never existed. The file name without extension is the
// template name: default.yaml is stored as templates.default.
package templates

import (
	"embed"
	"io/fs"
)

//go:embed *.json *.yaml
var files embed.FS

// FS returns the example templates, one file per template.
func FS() fs.FS { return files }
