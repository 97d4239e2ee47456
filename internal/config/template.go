// Package config holds resource templates: their compiled form, the
// built-in defaults, and matching of resource ids to templates.
package config

import (
	"time"

	"github.com/allot/allot/proto/allotpb"
)

// Defaults applied to fields a template leaves unset.
const (
	DefaultLeaseLength     = 60 * time.Second
	DefaultRefreshInterval = 5 * time.Second
)

// Template is a validated, normalized resource template. Templates are
// immutable once built; share them freely.
type Template struct {
	// Name is the template's key name ("mysql-main" for key
	// "templates.mysql-main"), or "builtin:<what>" for built-in templates.
	Name string
	// Revision is the KV revision the template came from (0 if built in).
	Revision uint64
	// Glob is the identifier glob: an exact id, or a pattern where "*"
	// matches any run of characters (including "/") and "?" one character.
	Glob string
	// Capacity is the global capacity (per client for STATIC).
	Capacity float64
	// Algorithm selects how capacity is divided.
	Algorithm allotpb.Algorithm_Kind
	// LeaseLength is how long leases last.
	LeaseLength time.Duration
	// RefreshInterval is how often clients should come back.
	RefreshInterval time.Duration
	// LearningModeDuration is how long a fresh leader only echoes reported
	// leases for resources of this template; 0 disables learning mode.
	LearningModeDuration time.Duration
	// SafeCapacity is the configured safe capacity if HasSafeCapacity.
	SafeCapacity    float64
	HasSafeCapacity bool
	// Description is free text for operators.
	Description string
	// Shadow puts the template's resources in shadow mode: leases are
	// allocated as usual but replies tell agents not to enforce them.
	Shadow bool
	// MaxPriority, if HasMaxPriority, is the highest priority a request
	// is served at: higher ones are capped to it.
	MaxPriority    int32
	HasMaxPriority bool
	// Tenants is the tenant policy; nil when the template sets none.
	Tenants *TenantPolicy
	// Params are the algorithm's named parameters.
	Params map[string]string
}

// DefaultTemplate is the template for resources that match nothing when
// no other fallback is configured: FAIR_SHARE over a capacity of 100 per
// second, 60s leases refreshed every 5s. It is deliberately finite, so an
// unconfigured resource is limited rather than unlimited.
func DefaultTemplate() *Template {
	return &Template{
		Name:                 "builtin:default",
		Glob:                 "*",
		Capacity:             100,
		Algorithm:            allotpb.Algorithm_FAIR_SHARE,
		LeaseLength:          DefaultLeaseLength,
		RefreshInterval:      DefaultRefreshInterval,
		LearningModeDuration: DefaultLeaseLength,
		Description:          "built-in default for resources that match no template",
	}
}
