package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/allot/allot/internal/domainlimit"
	"github.com/allot/allot/internal/quota"
)

// Template keys: a key's prefix says what kind of document it holds
// (templates here, NamespacePrefix and DomainsPrefix for the others).
const (
	// KeyPrefix starts every template key: "templates.<name>".
	KeyPrefix = "templates."
	// WatchPattern matches every template key.
	WatchPattern = KeyPrefix + ">"
	// DefaultTemplateName is the conventional name of the lowest-precedence
	// template, stored under "templates.default" with glob "*".
	DefaultTemplateName = "default"
)

// Key returns the KV key of template name.
func Key(name string) string { return KeyPrefix + name }

// NameFromKey returns the template name of a key, and false if the key is
// not a template key.
func NameFromKey(key string) (string, bool) {
	name, ok := strings.CutPrefix(key, KeyPrefix)
	return name, ok && name != ""
}

// Compiled is one key's value compiled by the key's kind: a template, a
// quota namespace, a domains namespace or an Envoy domain, or why it is
// invalid.
type Compiled struct {
	// Template, Namespace, Domains or Envoy holds the document when it is
	// valid: the one of the key's kind.
	Template  *Template
	Namespace *quota.Namespace
	Domains   *domainlimit.Namespace
	Envoy     *EnvoyDomain
	// Notes say what normalization changed.
	Notes []string
	// Err is why the value was rejected.
	Err error
}

// Valid reports whether c holds a template or namespace.
func (c Compiled) Valid() bool {
	return c.Template != nil || c.Namespace != nil || c.Domains != nil || c.Envoy != nil
}

// Revision is the KV revision of the template or namespace c holds, 0 if
// none.
func (c Compiled) Revision() uint64 {
	switch {
	case c.Template != nil:
		return c.Template.Revision
	case c.Namespace != nil:
		return c.Namespace.Revision
	case c.Domains != nil:
		return c.Domains.Revision
	case c.Envoy != nil:
		return c.Envoy.Revision
	}
	return 0
}

// CompileKey compiles revision rev of key: a template key ("templates.")
// with ParseAndCompile, a namespace key ("namespaces.") with
// ParseNamespace, a domains key ("domains.") with ParseDomains. It
// returns the template or namespace name, and ok false for keys of other
// forms, which are not allot's configuration.
func CompileKey(key string, rev uint64, value []byte) (name string, c Compiled, ok bool) {
	switch {
	case strings.HasPrefix(key, KeyPrefix):
		name, _ = NameFromKey(key)
		c.Template, c.Notes, c.Err = ParseAndCompile(name, rev, value)
	case strings.HasPrefix(key, NamespacePrefix):
		name, _ = NamespaceFromKey(key)
		c.Namespace, c.Notes, c.Err = ParseNamespace(name, rev, value)
	case strings.HasPrefix(key, DomainsPrefix):
		name, _ = DomainsFromKey(key)
		c.Domains, c.Notes, c.Err = ParseDomains(name, rev, value)
	case strings.HasPrefix(key, EnvoyPrefix):
		name, _ = EnvoyFromKey(key)
		c.Envoy, c.Err = ParseEnvoy(name, rev, value)
	default:
		return "", c, false
	}
	return name, c, true
}

// CheckValue validates value as revision rev of configuration key (a
// template, namespace or domains key) and returns the normalization notes. Keys of
// other forms are an error.
func CheckValue(key string, rev uint64, value []byte) ([]string, error) {
	_, c, ok := CompileKey(key, rev, value)
	if !ok {
		return nil, fmt.Errorf("key %q is neither %s<name>, %s<namespace>, %s<namespace> nor %s<domain>", key, KeyPrefix, NamespacePrefix, DomainsPrefix, EnvoyPrefix)
	}
	return c.Notes, c.Err
}

// ReadGlob returns the identifier_glob a template document names even if
// the document is otherwise invalid, or "" if it names none that
// ValidateGlob accepts: the glob whose resources are refused while no
// valid revision of the template can serve.
func ReadGlob(data []byte) string {
	if len(data) > MaxTemplateSize {
		return ""
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return ""
	}
	if trimmed[0] != '{' {
		var err error
		if trimmed, err = yaml.YAMLToJSON(trimmed); err != nil {
			return ""
		}
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal(trimmed, &doc) != nil {
		return ""
	}
	var globs []string
	for _, k := range []string{"identifier_glob", "identifierGlob"} {
		var g string
		if raw, ok := doc[k]; ok && json.Unmarshal(raw, &g) == nil {
			globs = append(globs, g)
		}
	}
	if len(globs) != 1 || ValidateGlob(globs[0]) != nil {
		return "" // none, or ambiguous
	}
	return collapseStars(globs[0])
}

// UnknownKeyProblem says why key, which CompileKey does not take, is not
// allot's configuration, naming the key it was probably meant to be (a
// misspelt prefix such as "tempaltes.", or a name without one).
func UnknownKeyProblem(key string) string {
	const known = "allot reads only " + KeyPrefix + "<name>, " + NamespacePrefix + "<namespace>, " + DomainsPrefix + "<namespace> and " + EnvoyPrefix + "<domain>"
	prefix, rest, dotted := strings.Cut(key, ".")
	if guess := guessKey(prefix, rest, dotted); guess != "" {
		return fmt.Sprintf("key %q is ignored: %s (did you mean %q?)", key, known, guess)
	}
	return fmt.Sprintf("key %q is ignored: %s", key, known)
}

// guessKey returns the configuration key a key with an unknown prefix
// was probably meant to be, or "".
func guessKey(prefix, rest string, dotted bool) string {
	if !dotted {
		if ValidateName(prefix) == nil {
			return Key(prefix) // a template name without its prefix
		}
		return ""
	}
	if rest == "" {
		return ""
	}
	for _, p := range []string{KeyPrefix, NamespacePrefix, DomainsPrefix, EnvoyPrefix} {
		want := strings.TrimSuffix(p, ".")
		if strings.EqualFold(prefix, want) || EditDistance(strings.ToLower(prefix), want) <= 2 {
			return p + rest
		}
	}
	return ""
}

// EditDistance is the Levenshtein distance between a and b (bytes): how
// far a mistyped name is from a known one.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
