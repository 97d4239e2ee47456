// Package config holds allot's configuration documents: resource
// templates, quota namespaces and domain-limit namespaces. It parses,
// validates and compiles them, knows the keys they are stored under, keeps
// the built-in defaults, and matches resource ids to templates. It does no
// I/O and links no NATS: internal/configkv keeps the documents in
// JetStream KV and watches them there.
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
	// SafeCapacity is the configured safe capacity if HasSafeCapacity
	// (the template's safe_capacity, kept as written so that Proto gives
	// it back); Floor is what it means.
	SafeCapacity    float64
	HasSafeCapacity bool
	// Floor is what a claimant cut off from the coordinator may go on
	// using once its lease ends, and for how long.
	Floor FloorPolicy
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

// Defaults of FloorPolicy.
const (
	// DefaultFloorShare is the floor as a fraction of the fair share when
	// a template says nothing: half of it. A cut-off claimant keeps half
	// its fair share for the floor lease; a claimant that vanished without
	// releasing keeps that much reserved as long.
	DefaultFloorShare = 0.5
	// DefaultFloorLease is how long a floor lasts after the reply that
	// carried it when a template says nothing.
	DefaultFloorLease = 5 * time.Minute
	// MaxFloorLease bounds floor_lease.
	MaxFloorLease = 24 * time.Hour
)

// FloorPolicy is what a claimant (a client, or a child node's priority
// band) may use once its lease has ended while it cannot reach the
// coordinator: its floor, told with every lease, until the floor lease
// ends, then nothing. The coordinator counts every floor as held until it
// ends, so whatever the length of a cut, the capacity in force stays
// within capacity.
type FloorPolicy struct {
	// Unlimited: the template's safe_capacity is -1. A cut-off claimant
	// may use anything; nothing is counted, so the template opts out of
	// the capacity promise.
	Unlimited bool
	// Absolute, if HasAbsolute, is the floor per unit of weight (a client
	// weighs 1, a child's band its number of clients); otherwise the
	// floor is Share times the fair share (capacity over the weight of
	// every client record). Either way never above the claimant's lease.
	Absolute    float64
	HasAbsolute bool
	Share       float64
	// Lease is how long a floor lasts after the reply that carried it.
	Lease time.Duration
}

// DefaultFloor is the floor policy of a template that sets none.
func DefaultFloor() FloorPolicy {
	return FloorPolicy{Share: DefaultFloorShare, Lease: DefaultFloorLease}
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
		Floor:                DefaultFloor(),
		Description:          "built-in default for resources that match no template",
	}
}
