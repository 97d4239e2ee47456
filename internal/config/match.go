package config

import (
	"cmp"
	"fmt"
	"github.com/allot/allot/internal/domainlimit"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/allot/allot/internal/quota"
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
	// refusals maps the placeholder templates of refusals (in exact and
	// globs like any template) to why their ids are refused.
	refusals map[*Template]string
	// quota is the quota configuration (see Quota); nil is none.
	quota *quota.Config
	// domains are the domain-limit namespaces (see Domains); nil is none.
	domains map[string]*domainlimit.Namespace
	// envoy is the Envoy rate limit configuration (see Envoy); never nil.
	envoy *envoySet
}

// Refusal is a template key that has no valid revision to serve: the
// resources its glob would win are refused rather than served by another
// template or the fallback, which could grant far more than the operator
// meant.
type Refusal struct {
	// Name is the template name, Revision the invalid revision.
	Name     string
	Revision uint64
	// Glob is the identifier glob read from the invalid value.
	Glob string
	// Reason says why, for the refused clients and operators.
	Reason string
}

// NewSet builds a Set. Templates whose glob has no wildcard match exactly
// (of several with the same glob, the one with the smallest name wins);
// the others are ordered by precedence (see Precedes). The result does not
// depend on the order of templates. fallback may be nil,
// in which case Match returns nil for unmatched ids. Each refusal takes
// part in matching like a template with its glob; ids it wins match nil,
// and Refused says why.
func NewSet(generation uint64, templates []*Template, fallback *Template, refusals ...Refusal) *Set {
	s := &Set{Generation: generation, exact: make(map[string]*Template), fallback: fallback, envoy: noEnvoy()}
	templates = slices.Clone(templates)
	for _, r := range refusals {
		t := &Template{Name: r.Name, Revision: r.Revision, Glob: collapseStars(r.Glob)}
		if s.refusals == nil {
			s.refusals = make(map[*Template]string)
		}
		s.refusals[t] = r.Reason
		templates = append(templates, t)
	}
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
// precedence order), without the fallback and refusals.
func (s *Set) Templates() []*Template {
	out := make([]*Template, 0, len(s.exact)+len(s.globs))
	for _, t := range s.exact {
		if _, refused := s.refusals[t]; !refused {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b *Template) int { return cmp.Compare(a.Glob, b.Glob) })
	for _, t := range s.globs {
		if _, refused := s.refusals[t]; !refused {
			out = append(out, t)
		}
	}
	return out
}

// Fallback returns the template for ids that match nothing, or nil.
func (s *Set) Fallback() *Template { return s.fallback }

// Match returns the template for resource id: an exact match first, then
// the first glob in precedence order, then the fallback (possibly nil).
// It returns nil for an id a refusal wins; see Refused.
func (s *Set) Match(id string) *Template {
	t := s.match(id)
	if _, refused := s.refusals[t]; refused {
		return nil
	}
	return t
}

func (s *Set) match(id string) *Template {
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

// Refused returns why id is refused when a refusal (a template key with
// no valid revision) wins it, and "" otherwise. Use it to tell a refused
// id from an unmatched one when Match returns nil.
func (s *Set) Refused(id string) string {
	if len(s.refusals) == 0 {
		return ""
	}
	return s.refusals[s.match(id)]
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
	// Refused is set when the candidate is a refusal (Template then holds
	// only its name, revision and glob): why its ids are refused.
	Refused string
}

// Explain lists every template of the set that matches id, in precedence
// order (the first is the one Match returns), ending with the fallback
// if there is one. Of several templates with the same exact glob only the
// one with the smallest name is in the set (see NewSet).
func (s *Set) Explain(id string) []Candidate {
	var out []Candidate
	if t, ok := s.exact[id]; ok {
		out = append(out, Candidate{Template: t, Reason: "exact match: exact ids take precedence over globs", Refused: s.refusals[t]})
	}
	for _, t := range s.globs {
		if GlobMatch(t.Glob, id) {
			out = append(out, Candidate{Template: t, Reason: fmt.Sprintf("glob match: %d literal characters, %d \"*\"", literalLen(t.Glob), strings.Count(t.Glob, "*")), Refused: s.refusals[t]})
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
