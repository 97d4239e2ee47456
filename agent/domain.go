package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/micro"

	"github.com/allot/allot/internal/domainwire"
)

// Defaults of the domain-limit options.
const (
	// DefaultDomainTimeout is how long a domain operation waits for the
	// domain service's answer. The service answers from memory at once, so
	// an answer this late means no leader is there to give one: Request
	// and Reserve then fail open.
	DefaultDomainTimeout = 500 * time.Millisecond
	// DefaultBackoffBase is the first sleep of Request's and Reserve's
	// retries on rejection (the paper's 2^0 seconds); each further sleep
	// doubles it.
	DefaultBackoffBase = time.Second
	// defaultHoldTTL is how long the service keeps an unrefreshed hold
	// when its replies do not say.
	defaultHoldTTL = 10 * time.Second
	// maxDomainStats bounds the resources DomainStats tracks one by one;
	// beyond it they are counted together under "*".
	maxDomainStats = 1024
	// holdsPerRefresh bounds the holds one refresh message lists, well
	// under domainwire.MaxHoldsPerRefresh; refreshBatches also keeps each
	// message within the connection's max_payload.
	holdsPerRefresh = 1000
)

// ErrDomainUnavailable is wrapped by errors of domain operations that got
// no answer from the domain service: no responders, a timeout, a server
// error (5xx) or a reply that cannot be read. Request and Reserve fail
// open on it instead of returning it (see Grant.Degraded); Release,
// Transfer and Seize return it.
var ErrDomainUnavailable = errors.New("agent: domain service unavailable")

// ErrRejected is wrapped by *RejectedError: the domain service refused the
// copies, and kept refusing until the call's max wait ran out.
var ErrRejected = errors.New("agent: rejected")

// Grant is the outcome of Request: how many hits of a rate-limited
// resource were granted, with the context data of the answer (the Charon
// paper's section 3.1). Limits not configured are -1.
type Grant struct {
	// Resource is "namespace:resource" and Domain the domain asked for.
	Resource string
	Domain   string
	// Granted is the number of hits granted: at least the call's min
	// copies, or 0 when rejected.
	Granted int64
	// HardLimit is the domain's limit per second, GlobalLimit that of all
	// domains together, TierLimit the limit of the domain's current burst
	// tier.
	HardLimit   int64
	GlobalLimit int64
	TierLimit   int64
	// DomainHitsLastSecond and GlobalHitsLastSecond count the hits of the
	// last second, for the domain and for all domains; TierHits those in
	// the current tier's window.
	DomainHitsLastSecond int64
	GlobalHitsLastSecond int64
	TierHits             int64
	// Tier is the index of the domain's current burst tier (0: none).
	Tier int
	// Burst reports that this request moved the domain up a tier.
	Burst bool
	// HardLimited and GlobalLimited report which limit bound the answer.
	HardLimited   bool
	GlobalLimited bool
	// Ignored: the namespace ignores its configured limits. Unconfigured:
	// the resource is not configured and the namespace lets unconfigured
	// resources through with the most permissive limits.
	Ignored      bool
	Unconfigured bool
	// Attempts is the number of requests sent, Waited the time spent
	// asking, retries and their sleeps included.
	Attempts int
	Waited   time.Duration
	// Degraded: no domain service answered (Cause says why), so the agent
	// failed open and granted the call's min copies itself. The context
	// data is then zero.
	Degraded bool
	Cause    error
	// Shadow: the service rejected the hits and the kill switch
	// (SetDomainKillSwitch) granted all the copies asked for instead. The
	// context data is that of the rejection.
	Shadow bool
}

// GroupHolds is one domain group's pool of a copy-limited resource.
type GroupHolds struct {
	Name  string
	Limit int64 // -1: not limited
	Holds int64 // copies held by all domains of the group
}

// HoldInfo is the context data of a reserve answer (section 3.1 of the
// Charon paper). Limits not configured are -1.
type HoldInfo struct {
	DomainLimit int64
	GlobalLimit int64
	// DomainHolds and GlobalHolds count the copies held, by the domain
	// and by all domains, this hold's included.
	DomainHolds int64
	GlobalHolds int64
	// Groups are the pools of the domain's groups.
	Groups       []GroupHolds
	Ignored      bool
	Unconfigured bool
}

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
	// holds that exist; RetryAfter is when it expects to grant again.
	Learning   bool
	RetryAfter time.Duration
	// Grant is the last rejection of a Request (Granted 0) with its
	// context data; nil for Reserve.
	Grant *Grant
	// Info is the context data of a Reserve's last rejection; nil for
	// Request.
	Info *HoldInfo
}

func (e *RejectedError) Error() string {
	s := fmt.Sprintf("agent: %s of %s rejected for domain %q", copiesText(e.Copies, e.MinCopies), e.Resource, e.Domain)
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

// A DomainOption configures one Request, Reserve or AcquireAll.
type DomainOption interface {
	applyDomain(*callOptions) error
}

type callOptions struct {
	minCopies   int64 // 0: copies
	maxWait     time.Duration
	backoffBase time.Duration
}

type domainOption func(*callOptions) error

func (f domainOption) applyDomain(o *callOptions) error { return f(o) }

// WithMaxWait sets how long Request, Reserve and AcquireAll retry
// rejections (the Charon paper's max_wait); the default is 0, no retry.
// A context deadline lowers it.
func WithMaxWait(d time.Duration) DomainOption {
	return domainOption(func(o *callOptions) error {
		if d < 0 {
			return fmt.Errorf("agent: max wait %v is negative", d)
		}
		o.maxWait = d
		return nil
	})
}

// WithMinCopies sets the fewest copies a Request or Reserve accepts, in
// [1, copies]: the service grants the largest number it can between it
// and copies, or nothing. The default is copies (all or nothing). When
// no domain service answers, the agent grants exactly this many.
func WithMinCopies(n int64) DomainOption {
	return domainOption(func(o *callOptions) error {
		if n < 1 || n > domainwire.MaxCopies {
			return fmt.Errorf("agent: min copies %d is outside [1, %d]", n, int64(domainwire.MaxCopies))
		}
		o.minCopies = n
		return nil
	})
}

// WithBackoffBase sets the first sleep between retries of a rejected
// Request or Reserve (see WithMaxWait); each further sleep doubles. The
// default is DefaultBackoffBase (1s, as in the paper); it must be in
// (0, 1m].
func WithBackoffBase(d time.Duration) DomainOption {
	return domainOption(func(o *callOptions) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("agent: backoff base %v is outside (0, 1m]", d)
		}
		o.backoffBase = d
		return nil
	})
}

// domainOptions are the Agent's options for domain limits.
type domainOptions struct {
	timeout    time.Duration
	killSwitch bool
}

// WithDomainTimeout sets how long a domain operation waits for the domain
// service (default DefaultDomainTimeout, 500ms); within (0, 1m]. Past it
// the service counts as unavailable and Request and Reserve fail open.
func WithDomainTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 || d > time.Minute {
			return fmt.Errorf("agent: domain timeout %v is outside (0, 1m]", d)
		}
		o.domain.timeout = d
		return nil
	}
}

// WithDomainKillSwitch starts the agent with the kill switch of domain
// limits on or off (see SetDomainKillSwitch).
func WithDomainKillSwitch(on bool) Option {
	return func(o *options) error {
		o.domain.killSwitch = on
		return nil
	}
}

// SetDomainKillSwitch turns the kill switch of domain limits on or off,
// at once for every call that gets an answer after it. While it is on,
// a rejection by the domain service is turned into a grant of all the
// copies asked for (a Grant, or a local Hold, with Shadow set) and
// counted in DomainStats as WouldReject: the limits are watched, not
// enforced, for when they misbehave with live traffic.
func (a *Agent) SetDomainKillSwitch(on bool) { a.d.kill.Store(on) }

// DomainKillSwitch reports whether the kill switch is on.
func (a *Agent) DomainKillSwitch() bool { return a.d.kill.Load() }

// domainCall sends req to the op subject of ns:res and decodes the answer
// into resp. It returns an error wrapping ErrDomainUnavailable when no
// answer could be had, a *ServiceError for an error reply below 500, and
// ctx's error when ctx ended.
func (a *Agent) domainCall(ctx context.Context, op, ns, res string, req, resp any) error {
	subj := domainwire.Subject(a.o.node, op, ns, res)
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("agent: encode %s request: %w", op, err)
	}
	rctx, cancel := context.WithTimeout(ctx, a.o.domain.timeout)
	reply, err := a.nc.RequestWithContext(rctx, subj, data)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("agent: %s %s:%s: %w", op, ns, res, ctx.Err())
		}
		return fmt.Errorf("%w: %s: %w", ErrDomainUnavailable, subj, err)
	}
	if code := reply.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		se := &ServiceError{Code: n, Description: reply.Header.Get(micro.ErrorHeader)}
		if n >= 400 && n < 500 {
			return fmt.Errorf("agent: %s %s:%s: %w", op, ns, res, se)
		}
		return fmt.Errorf("%w: %s: %w", ErrDomainUnavailable, subj, se)
	}
	// Replies are read leniently: a newer service may add fields.
	if err := json.Unmarshal(reply.Data, resp); err != nil {
		return fmt.Errorf("%w: %s: unreadable reply: %w", ErrDomainUnavailable, subj, err)
	}
	return nil
}

// prepare checks a Request's or Reserve's input and options. Nothing is
// sent when it fails.
func (a *Agent) prepare(resource, domain string, copies int64, opts []DomainOption) (ns, res string, o callOptions, err error) {
	ns, res, err = domainwire.SplitResource(resource)
	if err != nil {
		return "", "", o, fmt.Errorf("agent: %w", err)
	}
	if err := domainwire.ValidateID("domain", domain); err != nil {
		return "", "", o, fmt.Errorf("agent: %w", err)
	}
	if copies < 1 || copies > domainwire.MaxCopies {
		return "", "", o, fmt.Errorf("agent: copies %d of %s is outside [1, %d]", copies, resource, int64(domainwire.MaxCopies))
	}
	o.backoffBase = DefaultBackoffBase
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt.applyDomain(&o); err != nil {
			return "", "", o, err
		}
	}
	if o.minCopies == 0 {
		o.minCopies = copies
	}
	if o.minCopies > copies {
		return "", "", o, fmt.Errorf("agent: min copies %d is above copies %d", o.minCopies, copies)
	}
	a.d.mu.Lock()
	closed := a.d.closed
	a.d.mu.Unlock()
	if closed {
		return "", "", o, ErrClosed
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
func (a *Agent) retry(ctx context.Context, o *callOptions, try attempt) (attempts int, waited time.Duration, granted bool, err error) {
	clock := a.o.clock
	start := now(clock)
	budget := o.maxWait
	if dl, ok := ctx.Deadline(); ok {
		budget = min(budget, dl.Sub(start)-a.o.domain.timeout)
	}
	for i := 0; ; i++ {
		granted, after, err := try(ctx)
		attempts++
		elapsed := now(clock).Sub(start)
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
		c, stop := newTimer(clock, sleep)
		select {
		case <-c:
		case <-ctx.Done():
			stop()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return attempts, now(clock).Sub(start), false, nil
			}
			return attempts, now(clock).Sub(start), false, ctx.Err()
		}
	}
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

// Request asks the domain service for copies hits of a rate-limited
// resource ("namespace:resource") for domain: it grants the largest n in
// [min copies, copies] the resource's hard, global and burst-tier limits
// allow, atomically, or none (WithMinCopies; the default is copies, all or
// nothing). Hits cannot be given back.
//
// The request goes as JSON to allot.<node>.domain.request.<namespace>.<resource>.
// A rejection is retried for up to WithMaxWait (default 0: not retried;
// the context deadline bounds it too), sleeping after the i-th rejection
// min(max_wait − elapsed, jitter(2^i × base)) with jitter within ±25% and
// base WithBackoffBase (1s), and returned as a *RejectedError (wrapping
// ErrRejected) once the sleep would not be positive; its Grant has the
// last answer's context data.
//
// Fail-open: when no domain service answers (no responders, no answer
// within WithDomainTimeout, a server error), Request grants the min copies
// itself and says so in Grant.Degraded; the process keeps working without
// the service. With the kill switch on (SetDomainKillSwitch), a rejection
// is turned into a grant of copies with Grant.Shadow set. Both are counted
// in DomainStats.
//
// Bad input (a malformed resource or domain, copies outside [1, 10^12],
// min copies above copies) is an error and nothing is sent; so is an error
// reply for the request itself (a *ServiceError: 404 unknown resource,
// 409 a copy-limited resource, 400), which is never failed open. If ctx
// is cancelled, or its deadline passes before any answer, Request returns
// ctx's error; a deadline passing during the retries ends them with the
// last rejection.
func (a *Agent) Request(ctx context.Context, resource, domain string, copies int64, opts ...DomainOption) (Grant, error) {
	ns, res, o, err := a.prepare(resource, domain, copies, opts)
	if err != nil {
		return Grant{}, err
	}
	return a.requestRate(ctx, ns, res, resource, domain, copies, &o)
}

// requestRate is Request once its input is checked.
func (a *Agent) requestRate(ctx context.Context, ns, res, resource, domain string, copies int64, o *callOptions) (Grant, error) {
	req := domainwire.Request{Domain: domain, Copies: copies, MinCopies: o.minCopies, ClientID: a.o.clientID}
	var last domainwire.RateReply
	var answered bool
	attempts, waited, granted, err := a.retry(ctx, o, func(ctx context.Context) (bool, time.Duration, error) {
		var rep domainwire.RateReply
		if err := a.domainCall(ctx, domainwire.OpRequest, ns, res, &req, &rep); err != nil {
			return false, 0, err
		}
		if rep.Granted != 0 && (rep.Granted < o.minCopies || rep.Granted > copies) {
			return false, 0, fmt.Errorf("%w: granted %d outside [%d, %d]", ErrDomainUnavailable, rep.Granted, o.minCopies, copies)
		}
		last, answered = rep, true
		return rep.Granted > 0, 0, nil
	})
	g := Grant{Resource: resource, Domain: domain, Attempts: attempts, Waited: waited}
	if answered {
		g.fillFrom(&last)
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	r := a.callLocked(ns, res, false, attempts, answered)
	switch {
	case granted:
		r.st.Granted++
		return g, nil
	case err == nil && a.d.kill.Load():
		r.st.WouldReject++
		g.Granted, g.Shadow = copies, true
		return g, nil
	case err == nil:
		r.st.Rejected++
		rej := g
		return g, &RejectedError{Resource: resource, Domain: domain, Copies: copies, MinCopies: o.minCopies,
			Attempts: attempts, Waited: waited, Grant: &rej}
	case errors.Is(err, ErrDomainUnavailable) && ctx.Err() == nil:
		a.unanswered(r, err)
		r.st.Degraded++
		return Grant{Resource: resource, Domain: domain, Granted: o.minCopies, Attempts: attempts, Waited: waited, Degraded: true, Cause: err}, nil
	}
	return Grant{}, err
}

func (g *Grant) fillFrom(r *domainwire.RateReply) {
	g.Granted = r.Granted
	g.HardLimit, g.GlobalLimit, g.TierLimit = r.HardLimit, r.GlobalLimit, r.TierLimit
	g.DomainHitsLastSecond, g.GlobalHitsLastSecond, g.TierHits = r.DomainHitsLastSecond, r.GlobalHitsLastSecond, r.TierHits
	g.Tier, g.Burst, g.HardLimited, g.GlobalLimited = r.Tier, r.Burst, r.HardLimited, r.GlobalLimited
	g.Ignored, g.Unconfigured = r.Ignored, r.Unconfigured
}
