package quota

import "time"

// Status is the outcome of a decision.
type Status uint8

// The statuses, as on the wire.
const (
	OK Status = iota + 1
	OKWait
	Rejected
)

// String returns the wire name of s ("OK", "OK_WAIT", "REJECTED").
func (s Status) String() string {
	switch s {
	case OK:
		return "OK"
	case OKWait:
		return "OK_WAIT"
	case Rejected:
		return "REJECTED"
	}
	return "UNKNOWN"
}

// Reasons a request is REJECTED, as on the wire. ReasonTimeout: the
// tokens would come after a wait longer than the request (max_wait) or
// the bucket (wait_timeout, max_debt) allows; ReasonNoWait: they are not
// there now, and no wait at all was allowed (a max_wait of 0, or a
// bucket whose wait_timeout or max_debt is 0).
const (
	ReasonTimeout        = "timeout"
	ReasonNoWait         = "no_wait"
	ReasonNoBucket       = "no_bucket"
	ReasonTooManyBuckets = "too_many_buckets"
	ReasonTooManyTokens  = "too_many_tokens"
	ReasonBanned         = "banned"
	ReasonReserved       = "reserved"
)

// WarningSoftLimit is the warning on decisions past a bucket's soft limit.
const WarningSoftLimit = "soft_limit"

// Request is one take.
type Request struct {
	// Tokens to take; 0 peeks without consuming.
	Tokens int64
	// MaxWait lowers the bucket's wait timeout; negative means unset.
	MaxWait time.Duration
	// Sheddable requests are refused before critical ones.
	Sheddable bool
	// ClientID keys bans; empty bans the bucket as a whole.
	ClientID string
}

// Decision answers a Request.
type Decision struct {
	Status Status
	// Wait before proceeding (OK_WAIT).
	Wait time.Duration
	// Reason for REJECTED.
	Reason string
	// Limit is the bucket's size or window limit.
	Limit int64
	// Remaining tokens after the decision.
	Remaining int64
	// RetryAfter is when asking again can succeed (REJECTED).
	RetryAfter time.Duration
	// Warning is WarningSoftLimit past the soft limit.
	Warning string
	// Shadow marks an answer in shadow mode (see Decision.Shadowed):
	// Status is OK and ShadowStatus what the bucket decided.
	Shadow       bool
	ShadowStatus Status
}
