package config

import (
	"errors"
	"strconv"
	"strings"
)

// Problems is every problem found in one document, each a *ParseError or
// *CompileError, in the order of the document's fields. An operator who
// fixes one problem should not find the next only at the next put.
type Problems []error

// Error lists the problems, separated by "; ".
func (p Problems) Error() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(len(p)))
	b.WriteString(" problems: ")
	for i, e := range p {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (p Problems) Unwrap() []error { return p }

// joinProblems returns nil for no problem, the problem itself for one,
// and Problems for several.
func joinProblems(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return Problems(errs)
}

// ProblemList returns the messages of each problem err holds: one per
// problem of a Problems, else err's own message; none for nil.
func ProblemList(err error) []string {
	if err == nil {
		return nil
	}
	var p Problems
	if !errors.As(err, &p) {
		return []string{err.Error()}
	}
	out := make([]string, len(p))
	for i, e := range p {
		out[i] = e.Error()
	}
	return out
}

// fieldOf returns the field path a problem names ("" if none).
func fieldOf(err error) string {
	var pe *ParseError
	if errors.As(err, &pe) {
		return pe.Field
	}
	var ce *CompileError
	if errors.As(err, &ce) {
		return ce.Field
	}
	return ""
}

// within reports whether field is path or lies under it
// ("algorithm.kind" is within "algorithm").
func within(field, path string) bool {
	return field == path || strings.HasPrefix(field, path+".") || strings.HasPrefix(field, path+"[")
}
