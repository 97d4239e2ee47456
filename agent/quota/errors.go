package quota

import (
	"errors"
	"fmt"
	"time"
)

// The errors of Take and Report. Callers branch on them with errors.Is
// (ErrRejected, ErrUnavailable, agent.ErrClosed) and errors.As
// (*RejectedError for the details of a refusal, *agent.ServiceError for an
// error reply about the request itself, such as a 400).

// ErrUnavailable is returned by Take, wrapped with the cause, when the
// quota service did not answer (or its circuit is open) and the bucket's
// namespace has no fallback bucket (WithFallback). Take fails closed: a
// caller that prefers to fail open checks errors.Is(err, ErrUnavailable)
// and proceeds.
var ErrUnavailable = errors.New("quota: quota service unavailable")

// ErrRejected is wrapped by *RejectedError: the bucket refused the tokens.
var ErrRejected = errors.New("quota: rejected")

// errCircuitOpen is the cause of a local decision taken without asking.
var errCircuitOpen = errors.New("circuit open after repeated failures")

// RejectedError is a REJECTED decision: Take returns it (use errors.As)
// when the bucket refused the tokens. Nothing was taken. It wraps
// ErrRejected.
type RejectedError struct {
	// Bucket is the bucket asked for.
	Bucket string
	// Reason is why: "timeout" (the wait would exceed the bucket's
	// wait_timeout or the request's max wait), "no_wait" (the tokens are
	// not there now and no wait was allowed: WithMaxWait(0), or a bucket
	// whose wait_timeout is 0), "no_bucket",
	// "too_many_buckets", "too_many_tokens", "banned" or "reserved"
	// (capacity kept for CRITICAL requests).
	Reason string
	// RetryAfter is when asking again can succeed; zero when unknown.
	RetryAfter time.Duration
	// Limit and Remaining describe the bucket, as in Result.
	Limit     int64
	Remaining int64
	// Fallback reports that the local fallback bucket refused.
	Fallback bool
}

// Error says who refused which bucket, why, and when to retry.
func (e *RejectedError) Error() string {
	by := "quota service"
	if e.Fallback {
		by = "local fallback"
	}
	s := fmt.Sprintf("quota: %s rejected %q: %s", by, e.Bucket, e.Reason)
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return s
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }
