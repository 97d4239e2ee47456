package config

import "fmt"

// UnmatchedPolicy says what happens to a resource that matches no
// template (not even a "*" glob stored in the bucket). It implements
// flag.Value, for the coordinator's --unmatched flag.
type UnmatchedPolicy string

// Unmatched policies.
const (
	// UnmatchedDefault serves unmatched resources with DefaultTemplate().
	UnmatchedDefault UnmatchedPolicy = "default"
	// UnmatchedReject leaves unmatched resources without a template: the
	// Set's Match returns nil and the coordinator refuses them.
	UnmatchedReject UnmatchedPolicy = "reject"
)

// ParseUnmatchedPolicy parses "default" or "reject".
func ParseUnmatchedPolicy(s string) (UnmatchedPolicy, error) {
	switch p := UnmatchedPolicy(s); p {
	case UnmatchedDefault, UnmatchedReject:
		return p, nil
	}
	return "", fmt.Errorf("unknown unmatched policy %q: want %q or %q", s, UnmatchedDefault, UnmatchedReject)
}

// Fallback returns the template the policy serves unmatched resources
// with: DefaultTemplate() for "default" (and the zero value), nil for
// "reject". Pass it to NewSet or configkv.NewWatcher.
func (p UnmatchedPolicy) Fallback() *Template {
	if p == UnmatchedReject {
		return nil
	}
	return DefaultTemplate()
}

// String implements flag.Value.
func (p *UnmatchedPolicy) String() string {
	if p == nil || *p == "" {
		return string(UnmatchedDefault)
	}
	return string(*p)
}

// Set implements flag.Value.
func (p *UnmatchedPolicy) Set(s string) error {
	v, err := ParseUnmatchedPolicy(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}
