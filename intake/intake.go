// Package intake holds what bounds a server's intake, the requests a
// coordinator, a quota partition or a domain partition has taken up and
// not yet answered, and what the intake refused. The servers' Options take
// a Limits; a coordinator's STATS report a Stats. Past its limits a server
// refuses at once (503, or 429 for a tenant's rate, with a retry_after)
// rather than queueing what nobody waits for: see subjects.md, "Overload".
package intake

import (
	"fmt"
	"math"
	"time"
)

// Defaults of Limits.
const (
	DefaultMaxInFlight = 1024
	// DefaultMaxAge is the longest default time-out of allot's clients
	// (the agent's request time-out).
	DefaultMaxAge     = 2 * time.Second
	DefaultRetryAfter = 250 * time.Millisecond
	// DefaultPendingBytes bounds what one subscription holds before the
	// intake takes it up; DefaultPendingMsgs likewise.
	DefaultPendingBytes = 256 << 20
	DefaultPendingMsgs  = 1 << 20
)

// Limits bound a server's intake. The zero value has the defaults and no
// tenant rate; a negative figure, or a Reserve not below MaxInFlight, is
// an error when the server starts (see Validate).
type Limits struct {
	// MaxInFlight bounds the requests taken up and not yet finished
	// (answered, or dropped). Past it a request gets 503 at once.
	// Default DefaultMaxInFlight.
	MaxInFlight int
	// Reserve is how much of MaxInFlight only requests of clients known
	// to hold a lease may use, so that newcomers cannot crowd out their
	// refreshes. Default MaxInFlight/4.
	Reserve int
	// MaxAge is how long a request whose sender did not say its time-out
	// may wait in the intake before it is dropped. Default
	// DefaultMaxAge.
	MaxAge time.Duration
	// RetryAfter is the wait told in a 503, give or take a quarter so
	// that refused clients do not come back together. Default
	// DefaultRetryAfter.
	RetryAfter time.Duration
	// TenantRate, if positive, is the requests per second each tenant
	// may send on the tenant subjects, with bursts of TenantBurst
	// (default twice the rate, at least 1). Past it: 429. Whatever the
	// rate, one tenant's newcomers hold at most half of the places in
	// flight outside Reserve; past that: 503.
	TenantRate  float64
	TenantBurst int
	// PendingMsgs and PendingBytes are each subscription's pending
	// limits: what NATS may hand the intake before it takes it up. The
	// intake only sorts and refuses, so it keeps up; the limits bound
	// memory if it does not. Defaults DefaultPendingMsgs,
	// DefaultPendingBytes.
	PendingMsgs, PendingBytes int
}

// Validate reports what is wrong with l, if anything: a negative figure,
// or a reserve not below the in-flight bound.
func (l Limits) Validate() error {
	_, err := l.WithDefaults()
	return err
}

// WithDefaults returns l with its zero figures set to their defaults, or
// what is wrong with it (see Validate).
func (l Limits) WithDefaults() (Limits, error) {
	if l.MaxInFlight < 0 || l.Reserve < 0 || l.MaxAge < 0 || l.RetryAfter < 0 || l.TenantRate < 0 || l.TenantBurst < 0 ||
		l.PendingMsgs < 0 || l.PendingBytes < 0 {
		return l, fmt.Errorf("intake: negative limit in %+v", l)
	}
	// NaN passes the comparisons above, and a limiter of a NaN rate
	// refuses every request; an infinite rate is no limit, which is 0.
	if math.IsNaN(l.TenantRate) || math.IsInf(l.TenantRate, 0) {
		return l, fmt.Errorf("intake: tenant rate %v: want a finite number (0: no limit)", l.TenantRate)
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	if l.Reserve == 0 {
		l.Reserve = l.MaxInFlight / 4
	}
	if l.Reserve >= l.MaxInFlight {
		return l, fmt.Errorf("intake: reserve %d must be below the in-flight bound %d", l.Reserve, l.MaxInFlight)
	}
	if l.MaxAge == 0 {
		l.MaxAge = DefaultMaxAge
	}
	if l.RetryAfter == 0 {
		l.RetryAfter = DefaultRetryAfter
	}
	if l.TenantRate > 0 && l.TenantBurst == 0 {
		l.TenantBurst = max(1, int(2*l.TenantRate))
	}
	if l.PendingMsgs == 0 {
		l.PendingMsgs = DefaultPendingMsgs
	}
	if l.PendingBytes == 0 {
		l.PendingBytes = DefaultPendingBytes
	}
	return l, nil
}

// Stats count what an intake did besides handing requests over; they are
// the "intake" object of a coordinator's STATS.
type Stats struct {
	// InFlight is how many requests are taken up and not yet finished.
	InFlight int64 `json:"in_flight"`
	// Refused got 503 (in flight at the bound), Limited 429 (their
	// tenant's rate), TooLarge 413.
	Refused  uint64 `json:"refused"`
	Limited  uint64 `json:"limited"`
	TooLarge uint64 `json:"too_large"`
	// Expired were dropped unanswered: older than their sender's
	// time-out.
	Expired uint64 `json:"expired"`
	// Errors are the error replies the service's handlers sent through
	// the intake (a request it could not decode, a 404, …). micro's own
	// per-endpoint num_errors cannot see them: the intake, not micro,
	// hands the requests over and sends their answers.
	Errors uint64 `json:"errors"`
}
