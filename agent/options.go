package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/wire"
)

// Mode says what a client does with a resource whose lease has expired
// because the coordinator could not be reached.
type Mode int

const (
	// Safe uses the resource's safe capacity, as last reported by the
	// coordinator (-1 means unlimited, 0 blocked). It is the default.
	Safe Mode = iota
	// Optimistic behaves as if the coordinator had granted the wants.
	Optimistic
	// Pessimistic behaves as if the coordinator had granted nothing.
	Pessimistic
)

// String returns "safe", "optimistic" or "pessimistic".
func (m Mode) String() string {
	switch m {
	case Safe:
		return "safe"
	case Optimistic:
		return "optimistic"
	case Pessimistic:
		return "pessimistic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Defaults of the Agent's options, as their doc comments say.
const (
	defaultNode           = "root"
	defaultRequestTimeout = 2 * time.Second
	// defaultMinRefreshGap is the least time between two GetCapacity
	// requests triggered early (by a new resource or a change in wants).
	defaultMinRefreshGap = 250 * time.Millisecond
	// defaultRefresh is the refresh interval assumed before any lease says
	// otherwise; it also caps the retry backoff until then.
	defaultRefresh = 5 * time.Second
	// backoffBase is the first retry delay after a failed refresh.
	backoffBase = 100 * time.Millisecond
)

type options struct {
	clientID       string
	node           string
	mode           Mode
	logger         *slog.Logger
	clock          clock.Clock // nil: package time
	requestTimeout time.Duration
	minRefreshGap  time.Duration
	onChange       func(Status)
}

// An Option configures an Agent in New.
type Option func(*options) error

// WithClientID sets the client identifier sent to the coordinator. The
// default is "host:pid:random". It must be unique among all clients.
func WithClientID(id string) Option {
	return func(o *options) error {
		if err := wire.ValidateID("client id", id); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		o.clientID = id
		return nil
	}
}

// WithNode names the coordinator node to talk to (subjects
// allot.<node>.capacity.*). The default is "root".
func WithNode(node string) Option {
	return func(o *options) error {
		if node == "" || !validToken(node) {
			return fmt.Errorf("agent: node %q is not a single NATS subject token", node)
		}
		o.node = node
		return nil
	}
}

// WithMode sets what happens to a resource whose lease expired while the
// coordinator is unreachable. The default is Safe.
func WithMode(m Mode) Option {
	return func(o *options) error {
		if m < Safe || m > Pessimistic {
			return fmt.Errorf("agent: unknown mode %d", int(m))
		}
		o.mode = m
		return nil
	}
}

// WithLogger sets the logger; the default is slog.Default(). The agent logs
// refresh failures when they start and when they end, not on every retry.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("agent: nil logger")
		}
		o.logger = l
		return nil
	}
}

// WithClock replaces the clock of the agent, all its limiters and the
// quota and domain clients made from it; meant for tests. Lease expiry
// times from the coordinator are compared with it.
func WithClock(c Clock) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("agent: nil clock")
		}
		o.clock = c
		return nil
	}
}

// WithRequestTimeout sets how long to wait for the coordinator's answer.
// The coordinator may hold a request for one allocation round, so the
// timeout must be at least 1s; and one lost reply holds the agent's
// refreshes for the whole timeout, so that leases may lapse meanwhile,
// hence at most 1m (as the quota and domain clients' time-outs). The
// default is 2s.
func WithRequestTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < time.Second || d > time.Minute {
			return fmt.Errorf("agent: request timeout %v is outside [1s, 1m]", d)
		}
		o.requestTimeout = d
		return nil
	}
}

// WithMinRefreshGap sets the least time between early refreshes, those
// triggered by a new resource or a large change in wants. Regular
// refreshes follow the leases' refresh intervals. The default is 250ms.
func WithMinRefreshGap(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("agent: min refresh gap %v is not positive", d)
		}
		o.minRefreshGap = d
		return nil
	}
}

// WithOnChange registers f to be called whenever a resource's capacity in
// force, or where it comes from, changes, including a new resource's first
// capacity. f runs on the agent's background goroutine, one call after the
// other in the order of the changes, and must return quickly: while it
// runs the agent neither refreshes nor releases. It must not call Close,
// the agent's or a limiter's, since those wait for that goroutine.
func WithOnChange(f func(Status)) Option {
	return func(o *options) error {
		if f == nil {
			return errors.New("agent: nil OnChange function")
		}
		o.onChange = f
		return nil
	}
}

func validToken(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == '.' || r == '*' || r == '>' || r == 0x7f {
			return false
		}
	}
	return true
}

type resourceOptions struct {
	burst      int
	wants      float64
	autoWants  bool
	priority   int32
	initialCap float64
}

// A ResourceOption configures a resource in Agent.Rate or Agent.Gauge.
type ResourceOption func(*resourceOptions) error

// WithBurst fixes a rate limiter's burst at n tokens, from 1 to 2^30. By
// default the burst is a second's worth of the capacity in force, at least
// 1, and follows it. It has no effect on gauges.
func WithBurst(n int) ResourceOption {
	return func(o *resourceOptions) error {
		if n < 1 || n > maxBurst {
			return fmt.Errorf("agent: burst %d is outside [1, %d]", n, maxBurst)
		}
		o.burst = n
		return nil
	}
}

// WithWants sets the capacity this client asks for (per second for rates,
// units in flight for gauges) instead of estimating it from demand.
func WithWants(w float64) ResourceOption {
	return func(o *resourceOptions) error {
		if err := checkWants(w); err != nil {
			return err
		}
		o.wants, o.autoWants = w, false
		return nil
	}
}

// WithPriority sets the priority band; higher bands are served first by
// algorithms that use priorities. The default is 0.
func WithPriority(p int32) ResourceOption {
	return func(o *resourceOptions) error {
		if p < wire.MinPriority || p > wire.MaxPriority {
			return fmt.Errorf("agent: priority %d is outside [%d, %d]", p, wire.MinPriority, wire.MaxPriority)
		}
		o.priority = p
		return nil
	}
}

// WithInitialCapacity sets the capacity used in Safe mode until the
// coordinator has reported the resource's safe capacity, that is before the
// first lease (-1 means unlimited). The default is 0: the resource is
// blocked until its first lease, which normally arrives within a round trip
// of creating it. Optimistic mode uses the wants and Pessimistic mode 0
// before the first lease, as after an expired one.
func WithInitialCapacity(c float64) ResourceOption {
	return func(o *resourceOptions) error {
		if c != -1 {
			if err := wire.ValidateAmount("initial capacity", c); err != nil {
				return fmt.Errorf("agent: %w", err)
			}
		}
		o.initialCap = c
		return nil
	}
}

func checkWants(w float64) error {
	if math.IsNaN(w) || math.IsInf(w, 0) || w < 0 || w > wire.MaxWants {
		return fmt.Errorf("agent: wants %g must be finite and within [0, %g]", w, float64(wire.MaxWants))
	}
	return nil
}
