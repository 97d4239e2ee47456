package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Set is an immutable collection of templates with a fallback, built by
// NewSet. Match is safe for concurrent use.
type Set struct {
	// Generation distinguishes sets; it grows with every new Set a source
	// publishes, so holders can cache matches per generation.
	Generation uint64
	exact      map[string]*Template
	globs      []*Template // in precedence order
	fallback   *Template
}

// NewSet builds a Set. Templates whose glob has no wildcard match exactly
// (of several with the same glob, the one with the smallest name wins);
// the others are ordered by precedence (see Precedes). The result does not
// depend on the order of templates. fallback may be nil,
// in which case Match returns nil for unmatched ids.
func NewSet(generation uint64, templates []*Template, fallback *Template) *Set {
	s := &Set{Generation: generation, exact: make(map[string]*Template), fallback: fallback}
	for _, t := range templates {
		if IsGlob(t.Glob) {
			s.globs = append(s.globs, t)
			continue
		}
		if old, ok := s.exact[t.Glob]; !ok || Precedes(t, old) {
			s.exact[t.Glob] = t
		}
	}
	slices.SortFunc(s.globs, func(a, b *Template) int {
		if Precedes(a, b) {
			return -1
		}
		if Precedes(b, a) {
			return 1
		}
		return 0
	})
	return s
}

// Templates returns the set's templates (exact first, then globs in
// precedence order), without the fallback.
func (s *Set) Templates() []*Template {
	out := make([]*Template, 0, len(s.exact)+len(s.globs))
	for _, t := range s.exact {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *Template) int { return cmp.Compare(a.Glob, b.Glob) })
	return append(out, s.globs...)
}

// Fallback returns the template for ids that match nothing, or nil.
func (s *Set) Fallback() *Template { return s.fallback }

// Match returns the template for resource id: an exact match first, then
// the first glob in precedence order, then the fallback (possibly nil).
func (s *Set) Match(id string) *Template {
	if t, ok := s.exact[id]; ok {
		return t
	}
	for _, t := range s.globs {
		if GlobMatch(t.Glob, id) {
			return t
		}
	}
	return s.fallback
}

// IsGlob reports whether pattern contains a wildcard.
func IsGlob(pattern string) bool { return strings.ContainsAny(pattern, "*?") }

// Precedes orders globs, most specific first: more literal (non-wildcard)
// characters first; then fewer "*"; then by glob text; then by template
// name; then by revision, newest first. The order depends only on the
// templates, never on the order they were written or added.
func Precedes(a, b *Template) bool {
	la, lb := literalLen(a.Glob), literalLen(b.Glob)
	if la != lb {
		return la > lb
	}
	sa, sb := strings.Count(a.Glob, "*"), strings.Count(b.Glob, "*")
	if sa != sb {
		return sa < sb
	}
	if a.Glob != b.Glob {
		return a.Glob < b.Glob
	}
	if a.Name != b.Name {
		return a.Name < b.Name
	}
	return a.Revision > b.Revision
}

func literalLen(p string) int {
	return len(p) - strings.Count(p, "*") - strings.Count(p, "?")
}

// GlobMatch reports whether id matches pattern, where "*" matches any run
// of bytes (including "/" and the empty run) and "?" matches one rune.
func GlobMatch(pattern, id string) bool {
	// Iterative matcher with single backtrack point: linear in practice,
	// O(len(pattern)*len(id)) worst case, never exponential.
	p, s := 0, 0
	star, mark := -1, 0
	for s < len(id) {
		if p < len(pattern) {
			switch c := pattern[p]; c {
			case '*':
				star, mark = p, s
				p++
				continue
			case '?':
				_, n := utf8.DecodeRuneInString(id[s:])
				p++
				s += n
				continue
			default:
				if c == id[s] {
					p++
					s++
					continue
				}
			}
		}
		if star < 0 {
			return false
		}
		p = star + 1
		mark++
		s = mark
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// Candidate is one template that matches a resource id, as reported by
// Explain.
type Candidate struct {
	// Template is the matching template.
	Template *Template
	// Reason says why it matches and where it ranks.
	Reason string
	// Chosen marks the candidate Match returns.
	Chosen bool
}

// Explain lists every template of the set that matches id, in precedence
// order (the first is the one Match returns), ending with the fallback
// if there is one. Of several templates with the same exact glob only the
// one with the smallest name is in the set (see NewSet).
func (s *Set) Explain(id string) []Candidate {
	var out []Candidate
	if t, ok := s.exact[id]; ok {
		out = append(out, Candidate{Template: t, Reason: "exact match: exact ids take precedence over globs"})
	}
	for _, t := range s.globs {
		if GlobMatch(t.Glob, id) {
			out = append(out, Candidate{Template: t, Reason: fmt.Sprintf("glob match: %d literal characters, %d \"*\"", literalLen(t.Glob), strings.Count(t.Glob, "*"))})
		}
	}
	if s.fallback != nil {
		out = append(out, Candidate{Template: s.fallback, Reason: "fallback for resources that match no template"})
	}
	if len(out) > 0 {
		out[0].Chosen = true
	}
	return out
}
