// Package intake holds what bounds a server's intake, the requests a
// coordinator, a quota partition or a domain partition has taken up and
// not yet answered, and what the intake refused. The servers' Options take
// a Limits; a coordinator's STATS report a Stats. Past its limits a server
// refuses at once (503, or 429 for a tenant's rate, with a retry_after)
// rather than queueing what nobody waits for: see subjects.md, "Overload".
package intake

import "time"

// Limits bound a server's intake. The zero value has the defaults and no
// tenant rate; a negative figure, or a Reserve not below MaxInFlight, is
// an error when the server starts.
type Limits struct {
	// MaxInFlight bounds the requests taken up and not yet finished
	// (answered, or dropped). Past it a request gets 503 at once.
	// Default 1024.
	MaxInFlight int
	// Reserve is how much of MaxInFlight only requests of clients known
	// to hold a lease may use, so that newcomers cannot crowd out their
	// refreshes. Default MaxInFlight/4.
	Reserve int
	// MaxAge is how long a request whose sender did not say its time-out
	// may wait in the intake before it is dropped. Default 2s.
	MaxAge time.Duration
	// RetryAfter is the wait told in a 503, give or take a quarter so
	// that refused clients do not come back together. Default 250ms.
	RetryAfter time.Duration
	// TenantRate, if positive, is the requests per second each tenant
	// may send on the tenant subjects, with bursts of TenantBurst
	// (default twice the rate, at least 1). Past it: 429.
	TenantRate  float64
	TenantBurst int
	// PendingMsgs and PendingBytes are each subscription's pending
	// limits: what NATS may hand the intake before it takes it up.
	// Defaults 1<<20 messages, 256 MiB.
	PendingMsgs, PendingBytes int
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
}
