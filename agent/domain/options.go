package domain

import (
	"fmt"
	"time"

	"github.com/allot/allot/internal/domainwire"
)

// Defaults of the options.
const (
	// DefaultTimeout is how long a domain operation waits for the domain
	// service's answer. The service answers from memory at once, so an
	// answer this late means no leader is there to give one: Request and
	// Reserve then fail open.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultBackoffBase is the first sleep of Request's and Reserve's
	// retries on rejection (the paper's 2^0 seconds); each further sleep
	// doubles it.
	DefaultBackoffBase = time.Second
)

type options struct {
	timeout        time.Duration
	killSwitch     bool
	failOpenUnseen bool
}

// An Option configures a Client in New.
type Option func(*options) error

// WithTimeout sets how long a domain operation waits for the domain
// service (default DefaultTimeout, 500ms); within (0, 1m]. Past it the
// service counts as unavailable and Request and Reserve fail open.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("domain: timeout %v is outside (0, 1m]", d)
		}
		o.timeout = d
		return nil
	}
}

// WithKillSwitch starts the client with the kill switch on or off (see
// Client.SetKillSwitch).
func WithKillSwitch(on bool) Option {
	return func(o *options) error {
		o.killSwitch = on
		return nil
	}
}

// WithFailOpenUnseen sets what Request and Reserve do when no domain
// service answers about a namespace no reply has told the client about
// yet (it started during the outage, say), so that it knows neither the
// namespace's fail mode nor a share: fail closed (false, the default:
// nothing justifies a grant) or grant the min copies as the fail mode
// "open" does (true).
func WithFailOpenUnseen(on bool) Option {
	return func(o *options) error {
		o.failOpenUnseen = on
		return nil
	}
}

// A CallOption configures one Request, Reserve or AcquireAll.
type CallOption func(*callOptions) error

type callOptions struct {
	minCopies   int64 // 0: copies
	maxWait     time.Duration
	backoffBase time.Duration
}

// WithMaxWait sets how long Request, Reserve and AcquireAll retry
// rejections (the Charon paper's max_wait); the default is 0, no retry.
// A context deadline lowers it.
func WithMaxWait(d time.Duration) CallOption {
	return func(o *callOptions) error {
		if d < 0 {
			return fmt.Errorf("domain: max wait %v is negative", d)
		}
		o.maxWait = d
		return nil
	}
}

// WithMinCopies sets the fewest copies a Request or Reserve accepts, in
// [1, copies]: the service grants the largest number it can between it
// and copies, or nothing. The default is copies (all or nothing). When no
// domain service answers, the client grants exactly this many.
func WithMinCopies(n int64) CallOption {
	return func(o *callOptions) error {
		if n < 1 || n > domainwire.MaxCopies {
			return fmt.Errorf("domain: min copies %d is outside [1, %d]", n, int64(domainwire.MaxCopies))
		}
		o.minCopies = n
		return nil
	}
}

// WithBackoffBase sets the first sleep between retries of a rejected
// Request or Reserve (see WithMaxWait); each further sleep doubles. The
// default is DefaultBackoffBase (1s, as in the paper); it must be in
// (0, 1m].
func WithBackoffBase(d time.Duration) CallOption {
	return func(o *callOptions) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("domain: backoff base %v is outside (0, 1m]", d)
		}
		o.backoffBase = d
		return nil
	}
}
