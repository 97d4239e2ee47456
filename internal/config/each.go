package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ParseEach parses every document of docs with parse, in name order, as
// the servers do when a program hands them documents instead of a
// configuration bucket. The error names each document refused, as
// "<kind> <name>: …", with all its problems; nothing is returned then.
func ParseEach[D, T any](kind string, docs map[string]D, parse func(name string, doc D) (T, error)) ([]T, error) {
	out := make([]T, 0, len(docs))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(docs)) {
		v, err := parse(name, docs[name])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", kind, name, err))
			continue
		}
		out = append(out, v)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}
