package domain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/agent/internal/option"
	"github.com/allot/allot/agent/internal/rpc"
	"github.com/allot/allot/internal/domainwire"
)

const (
	// defaultHoldTTL is how long the service keeps an unrefreshed hold
	// when its replies do not say.
	defaultHoldTTL = 10 * time.Second
	// maxStats bounds the resources Status tracks one by one; beyond it
	// they are counted together under "*".
	maxStats = 1024
	// holdsPerRefresh bounds the holds one refresh message lists, well
	// under domainwire.MaxHoldsPerRefresh; refreshBatches also keeps each
	// message within the connection's max_payload.
	holdsPerRefresh = 1000
)

// A Client asks the domain service for hits and copies on behalf of an
// Agent, with the agent's connection, client id, node and logger, and
// keeps the holds it got alive. It counts its calls per resource (Status).
// Its lock is its own, so domain calls never contend with the agent's
// leases. Methods are safe for concurrent use.
type Client struct {
	nc       *nats.Conn
	clientID string
	node     string
	log      *slog.Logger
	clock    clock.Clock // the agent's; nil: package time
	o        options
	kill     atomic.Bool

	mu      sync.Mutex
	res     map[string]*domainRes
	modes   map[string]FailMode // by namespace, as replies told
	other   *domainRes          // counters of the resources beyond maxStats
	closed  bool
	started bool // the refresh loop runs
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	// closing is closed by Close: it wakes the retries sleeping between
	// rejections, which then return agent.ErrClosed.
	closing chan struct{}
}

// New returns a domain-limit client on a's connection. It starts a
// goroutine that refreshes holds with the first hold; Close stops it and
// gives the holds back. Options are checked and the first invalid one is
// reported. The client lives apart from a: closing a leaves it working,
// so close it before the connection.
func New(a *agent.Agent, opts ...Option) (*Client, error) {
	if a == nil {
		return nil, errors.New("domain: nil agent")
	}
	o := options{timeout: DefaultTimeout}
	if err := option.Apply(&o, opts); err != nil {
		return nil, err
	}
	c := &Client{
		nc:       a.Conn(),
		clientID: a.ClientID(),
		node:     a.Node(),
		log:      a.Logger().With("component", "allot-domain", "client_id", a.ClientID()),
		clock:    a.Clock(),
		o:        o,
		res:      make(map[string]*domainRes),
		modes:    make(map[string]FailMode),
		other:    &domainRes{name: "*", st: Status{Resource: "*"}, shared: true},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		closing:  make(chan struct{}),
	}
	c.kill.Store(o.killSwitch)
	return c, nil
}

// SetKillSwitch turns the kill switch of domain limits on or off, at
// once for every call that gets an answer after it. While it is on, a
// rejection by the domain service is turned into a grant of all the
// copies asked for (a Grant, or a local Hold, with Shadow set) and
// counted in Status as WouldReject: the limits are watched, not
// enforced, for when they misbehave with live traffic.
func (c *Client) SetKillSwitch(on bool) { c.kill.Store(on) }

// KillSwitch reports whether the kill switch is on.
func (c *Client) KillSwitch() bool { return c.kill.Load() }

// call sends req to the op subject of ns:res and decodes the answer
// into resp. It returns an error wrapping ErrUnavailable when no
// answer could be had, a *agent.ServiceError for an error reply below 500, and
// ctx's error when ctx ended.
func (c *Client) call(ctx context.Context, op, ns, res string, req, resp any) error {
	subj := domainwire.Subject(c.node, op, ns, res)
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("domain: encode %s request: %w", op, err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.o.timeout)
	reply, err := c.nc.RequestWithContext(rctx, subj, data)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("domain: %s %s:%s: %w", op, ns, res, ctx.Err())
		}
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, subj, err)
	}
	if code, desc, ok := rpc.ErrorReply(reply); ok {
		se := &agent.ServiceError{Code: code, Description: desc, RetryAfter: rpc.RetryAfter(reply)}
		if code >= 400 && code < 500 {
			return fmt.Errorf("domain: %s %s:%s: %w", op, ns, res, se)
		}
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, subj, se)
	}
	// Replies are read leniently: a newer service may add fields.
	if err := json.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("%w: %s: unreadable reply: %w", ErrUnavailable, subj, err)
	}
	return nil
}

// prepare checks a Request's or Reserve's input and options. Nothing is
// sent when it fails.
func (c *Client) prepare(resource, domain string, copies int64, opts []CallOption) (ns, res string, o callOptions, err error) {
	ns, res, err = domainwire.SplitResource(resource)
	if err != nil {
		return "", "", o, fmt.Errorf("domain: %w", err)
	}
	if err := domainwire.ValidateID("domain", domain); err != nil {
		return "", "", o, fmt.Errorf("domain: %w", err)
	}
	if copies < 1 || copies > domainwire.MaxCopies {
		return "", "", o, fmt.Errorf("domain: copies %d of %s is outside [1, %d]", copies, resource, int64(domainwire.MaxCopies))
	}
	o.backoffBase = DefaultBackoffBase
	if err := option.Apply(&o, opts); err != nil {
		return "", "", o, err
	}
	if o.minCopies == 0 {
		o.minCopies = copies
	}
	if o.minCopies > copies {
		return "", "", o, fmt.Errorf("domain: min copies %d is above copies %d", o.minCopies, copies)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return "", "", o, agent.ErrClosed
	}
	return ns, res, o, nil
}

// attempt is one try of a retried call: whether it was granted, and for a
// rejection the least time to wait before the next (a learning leader's).
type attempt func(ctx context.Context) (granted bool, retryAfter time.Duration, err error)

// retry runs try until it is granted or fails, sleeping after the i-th
// rejection (from 0) min(max_wait − elapsed, jitter(2^i × base)) — at
// least the rejection's retry-after — with jitter uniform within ±25%,
// and stopping once that sleep is not positive. A context deadline
// shortens max_wait, leaving the last attempt a domain timeout to be
// answered in; should the deadline still cut a retry short, the last
// rejection stands. It returns the attempts made and the time spent.
func (c *Client) retry(ctx context.Context, o *callOptions, try attempt) (attempts int, waited time.Duration, granted bool, err error) {
	start := clock.Now(c.clock)
	budget := o.maxWait
	if dl, ok := ctx.Deadline(); ok {
		// A context's deadline passes on the real clock, not the agent's.
		budget = min(budget, time.Until(dl)-c.o.timeout)
	}
	for i := 0; ; i++ {
		granted, after, err := try(ctx)
		attempts++
		elapsed := clock.Since(c.clock, start)
		if err != nil && i > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return attempts, elapsed, false, nil
		}
		if err != nil || granted {
			return attempts, elapsed, granted, err
		}
		left := budget - elapsed
		if after > left {
			return attempts, elapsed, false, nil // no grant before the deadline
		}
		sleep := min(left, max(jitter(backoff(o.backoffBase, i)), after))
		if sleep <= 0 {
			return attempts, elapsed, false, nil
		}
		timerC, stop := clock.NewTimer(c.clock, sleep)
		select {
		case <-timerC:
		case <-c.closing:
			stop()
			return attempts, clock.Since(c.clock, start), false, agent.ErrClosed
		case <-ctx.Done():
			stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return attempts, clock.Since(c.clock, start), false, nil
			}
			return attempts, clock.Since(c.clock, start), false, ctx.Err()
		}
	}
}

// fromMillis is a service's count of milliseconds as a Duration, zero
// when it is not positive and at most limit: bounded before it is
// multiplied, as a huge count would overflow to a negative or absurd wait.
func fromMillis(ms int64, limit time.Duration) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(min(ms, limit.Milliseconds())) * time.Millisecond
}

// backoff is 2^i × base, capped at a day.
func backoff(base time.Duration, i int) time.Duration {
	d := base
	for ; i > 0 && d < 24*time.Hour; i-- {
		d *= 2
	}
	return min(d, 24*time.Hour)
}

// jitter spreads d uniformly within [0.75d, 1.25d].
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}
