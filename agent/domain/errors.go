package domain

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// The errors of domain limits. Callers branch on them with errors.Is
// (ErrRejected, ErrUnavailable, ErrHoldLost, ErrHoldClosed,
// agent.ErrClosed) and errors.As (*RejectedError for the details of a
// refusal, *agent.ServiceError for an error reply about the request
// itself: 404 unknown resource or transfer, 409, 400).

// ErrUnavailable is wrapped by errors of domain operations that got
// no answer from the domain service: no responders, a timeout, a server
// error (5xx) or a reply that cannot be read. Request and Reserve fail
// open on it instead of returning it (see Grant.Degraded), as far as the
// namespace's fail mode allows, and return it otherwise; Release,
// Transfer and Seize return it.
var ErrUnavailable = errors.New("domain: domain service unavailable")

// ErrRejected is wrapped by *RejectedError: the domain service refused the
// copies, and kept refusing until the call's max wait ran out.
var ErrRejected = errors.New("domain: rejected")

// ErrHoldLost is wrapped by Hold.Err, and by the errors of a lost hold's
// methods: the domain service no longer has the hold (it expired because
// no refresh reached the service within its ttl), so its copies are no
// longer held.
var ErrHoldLost = errors.New("domain: hold lost")

// ErrHoldClosed is returned by the methods of a hold that was closed, or
// whose copies were all released or transferred.
var ErrHoldClosed = errors.New("domain: hold closed")

var errNilHold = errors.New("domain: nil hold (Reserve or Seize failed)")

// RejectedError is returned by Request and Reserve when the domain service
// refused the copies on every attempt within the max wait. It wraps
// ErrRejected. Nothing is held or counted.
type RejectedError struct {
	Resource string
	Domain   string
	// Copies and MinCopies are what was asked for.
	Copies    int64
	MinCopies int64
	Attempts  int
	Waited    time.Duration
	// Learning: the last answer came from a new leader still learning the
	// holds that exist; RetryAfter is when it expects to grant again
	// (at most a minute, whatever the service said).
	Learning   bool
	RetryAfter time.Duration
	// Grant is the last rejection of a Request (Granted 0) with its
	// context data; nil for Reserve.
	Grant *Grant
	// Info is the context data of a Reserve's last rejection; nil for
	// Request.
	Info *HoldInfo
}

// Error says what was refused, after how many attempts, and whether a
// learning leader answered.
func (e *RejectedError) Error() string {
	s := fmt.Sprintf("domain: %s of %s rejected for domain %q", copiesText(e.Copies, e.MinCopies), e.Resource, e.Domain)
	if e.Attempts > 1 {
		s += fmt.Sprintf(" after %d attempts in %v", e.Attempts, e.Waited.Round(time.Millisecond))
	}
	if e.Learning {
		s += fmt.Sprintf(" (the service is learning its holds after a leader change; retry after %v)", e.RetryAfter)
	}
	return s
}

// Is makes errors.Is(err, ErrRejected) true.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

func copiesText(copies, minCopies int64) string {
	if minCopies == copies {
		return strconv.FormatInt(copies, 10) + " copies"
	}
	return fmt.Sprintf("%d to %d copies", minCopies, copies)
}
