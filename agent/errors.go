package agent

import (
	"errors"
	"fmt"
	"time"
)

// The errors of the agent. Callers branch on them with errors.Is (the
// sentinels, which the agent wraps with context) and errors.As
// (*ServiceError). Packages agent/quota and agent/domain return
// ServiceError and ErrClosed too, beside errors of their own.

// ServiceError is an error reply from an allot service: the coordinator,
// or the quota or domain service (NATS micro convention: headers
// Nats-Service-Error-Code and Nats-Service-Error). It is about the
// request itself, which the service answered.
type ServiceError struct {
	// Code is an HTTP status: 400 a bad request, 403 a namespace the
	// caller's account may not use, 404 a resource that matches nothing,
	// 409 a conflict; 5xx the service's own failure.
	Code int
	// Description is the service's explanation.
	Description string
	// RetryAfter is how long the service asked the caller to wait before
	// sending again (an overloaded service's 503, a tenant over its
	// request rate's 429); zero when it said nothing. The agent's own
	// refreshes keep to it.
	RetryAfter time.Duration
}

// Error returns the code and the description. It says "service": the
// subject or the operation that callers wrap it with names which.
func (e *ServiceError) Error() string {
	if e.RetryAfter > 0 {
		return fmt.Sprintf("service error %d: %s (retry after %v)", e.Code, e.Description, e.RetryAfter)
	}
	return fmt.Sprintf("service error %d: %s", e.Code, e.Description)
}

// ErrStaleTerm is reported when a response carries a term lower than the
// highest seen: it comes from a deposed coordinator and is ignored.
var ErrStaleTerm = errors.New("agent: response from a stale coordinator term")

// ErrClosed is returned by limiters and gauges whose Agent was closed, by
// an Agent's methods after Close, and by a quota or domain client's after
// its own Close.
var ErrClosed = errors.New("agent: closed")

// ErrExceedsBurst is returned by WaitN when n exceeds the limiter's burst.
var ErrExceedsBurst = errors.New("agent: n exceeds the limiter's burst")

// ErrWouldExceedDeadline is returned by WaitN when, at the current rate, the
// event could not happen before the context's deadline.
var ErrWouldExceedDeadline = errors.New("agent: wait would exceed the context deadline")

// ErrReleaseExceedsHeld is returned by Gauge.Release when asked to give
// back more units than are held.
var ErrReleaseExceedsHeld = errors.New("agent: gauge release exceeds the units held")
