package quota

import (
	"fmt"
	"math"
	"time"

	"github.com/allot/allot/internal/wire"
)

// Defaults of the client's options.
const (
	// DefaultTimeout is how long Take waits for the quota service before
	// it decides locally: decisions are answered at once, so an answer
	// this late means the service is down or overloaded.
	DefaultTimeout = 250 * time.Millisecond
	// DefaultFailures is how many consecutive unanswered requests for a
	// namespace open its circuit.
	DefaultFailures = 3
	// DefaultCooldown is how long an open circuit stays open before one
	// request probes the service again.
	DefaultCooldown = 5 * time.Second
	// DefaultReportInterval is how long reports are gathered before they
	// are sent.
	DefaultReportInterval = 100 * time.Millisecond
	// FallbackWait is the longest wait a local fallback bucket answers
	// with (a request's own max wait can lower it): quotaservice's default
	// wait_timeout.
	FallbackWait = time.Second
	// AnyNamespace in WithFallback configures one fallback bucket shared
	// by every namespace that has none of its own.
	AnyNamespace = "*"
)

// maxBurst bounds a fallback bucket's burst, as the agent bounds a rate
// limiter's.
const maxBurst = 1 << 30

type options struct {
	timeout        time.Duration
	failures       int
	cooldown       time.Duration
	reportInterval time.Duration
	fallback       map[string]fallback
}

// fallback configures a local fallback bucket.
type fallback struct {
	rate  float64
	burst int
}

// An Option configures a Client in New.
type Option func(*options) error

// WithTimeout sets how long Take waits for the quota service's answer
// before deciding locally (WithFallback). The service answers at once, so
// the default, DefaultTimeout (250ms), is long; it must be positive and at
// most a minute.
func WithTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("quota: timeout %v is outside (0, 1m]", d)
		}
		o.timeout = d
		return nil
	}
}

// WithCircuit sets the circuit breaker of Take: after failures
// consecutive unanswered requests for a namespace, Take stops asking the
// quota service for it for cooldown and decides locally at once; then one
// request probes the service. The defaults are DefaultFailures (3) and
// DefaultCooldown (5s).
func WithCircuit(failures int, cooldown time.Duration) Option {
	return func(o *options) error {
		if failures < 1 || failures > 1<<20 {
			return fmt.Errorf("quota: circuit threshold %d is outside [1, %d]", failures, 1<<20)
		}
		if cooldown <= 0 || cooldown > time.Hour {
			return fmt.Errorf("quota: circuit cooldown %v is outside (0, 1h]", cooldown)
		}
		o.failures, o.cooldown = failures, cooldown
		return nil
	}
}

// WithReportInterval sets how long Report gathers charges before sending
// them; the default is DefaultReportInterval (100ms).
func WithReportInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("quota: report interval %v is outside (0, 1m]", d)
		}
		o.reportInterval = d
		return nil
	}
}

// WithFallback gives namespace a local token bucket that decides Take
// when the quota service does not answer (quotaservice's naive client): it
// fills at ratePerSec up to burst tokens, starts full, and answers a wait
// of at most FallbackWait. Choose a rate that is this client's fair share
// of the namespace's limit. The bucket is one for the whole namespace, not
// one per bucket name, so memory stays bounded and the fallback never
// admits more than its rate whatever the names. namespace AnyNamespace
// ("*") sets the bucket shared by all namespaces without their own. A
// namespace without a fallback fails closed: Take returns an error
// wrapping ErrUnavailable.
func WithFallback(namespace string, ratePerSec float64, burst int) Option {
	return func(o *options) error {
		if namespace != AnyNamespace {
			if err := wire.ValidateQuotaName("fallback namespace", namespace); err != nil {
				return fmt.Errorf("quota: %w (or %q for any)", err, AnyNamespace)
			}
		}
		if !(ratePerSec > 0) || math.IsInf(ratePerSec, 0) || ratePerSec > wire.MaxWants {
			return fmt.Errorf("quota: fallback rate %g for %q must be positive and finite", ratePerSec, namespace)
		}
		if burst < 1 || burst > maxBurst {
			return fmt.Errorf("quota: fallback burst %d for %q is outside [1, %d]", burst, namespace, maxBurst)
		}
		if o.fallback == nil {
			o.fallback = make(map[string]fallback)
		}
		o.fallback[namespace] = fallback{rate: ratePerSec, burst: burst}
		return nil
	}
}

// A TakeOption configures one Take.
type TakeOption func(*takeOptions) error

type takeOptions struct {
	maxWait    time.Duration
	hasMaxWait bool
	sheddable  bool
}

// WithMaxWait sets the longest wait this Take accepts: the bucket answers
// REJECTED "timeout" rather than OK_WAIT beyond it. It lowers the bucket's
// wait_timeout, never raises it; 0 means now or REJECTED "no_wait". A
// context deadline lowers it too.
func WithMaxWait(d time.Duration) TakeOption {
	return func(o *takeOptions) error {
		if d < 0 {
			return fmt.Errorf("quota: max wait %v is negative", d)
		}
		o.maxWait, o.hasMaxWait = d, true
		return nil
	}
}

// Sheddable marks the request SHEDDABLE: a bucket that reserves part of
// its capacity for CRITICAL requests (the default) refuses it first.
func Sheddable() TakeOption {
	return func(o *takeOptions) error {
		o.sheddable = true
		return nil
	}
}
