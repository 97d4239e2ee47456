package domain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot/allot/internal/domainwire"
)

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
	// Degraded: no domain service answered (Cause says why), so the client
	// failed open and granted the call's min copies itself. The context
	// data is then zero.
	Degraded bool
	Cause    error
	// Shadow: the service rejected the hits and the kill switch
	// (SetKillSwitch) granted all the copies asked for instead. The
	// context data is that of the rejection.
	Shadow bool
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
// within WithTimeout, a server error), Request grants the min copies
// itself and says so in Grant.Degraded, so that the process keeps working
// without the service, unless the namespace fails closed (FailClosed) or
// no reply has told the client about the namespace yet (its fail mode is
// unknown: see WithFailOpenUnseen); it then returns an error wrapping
// ErrUnavailable, counted as DegradedRefused. Hits are not bounded by a
// share in FailShare: see docs/domains-client.md. With the kill switch on
// (SetKillSwitch), a rejection is turned into a grant of copies with
// Grant.Shadow set. All are counted in Status.
//
// Bad input (a malformed resource or domain, copies outside [1, 10^12],
// min copies above copies) is an error and nothing is sent; so is an error
// reply for the request itself (a *agent.ServiceError: 404 unknown resource,
// 409 a copy-limited resource, 400), which is never failed open. If ctx
// is cancelled, or its deadline passes before any answer, Request returns
// ctx's error; a deadline passing during the retries ends them with the
// last rejection.
func (c *Client) Request(ctx context.Context, resource, domain string, copies int64, opts ...CallOption) (Grant, error) {
	ns, res, o, err := c.prepare(resource, domain, copies, opts)
	if err != nil {
		return Grant{}, err
	}
	return c.requestRate(ctx, ns, res, resource, domain, copies, &o)
}

// requestRate is Request once its input is checked.
func (c *Client) requestRate(ctx context.Context, ns, res, resource, domain string, copies int64, o *callOptions) (Grant, error) {
	req := domainwire.Request{Domain: domain, Copies: copies, MinCopies: o.minCopies, ClientID: c.clientID}
	var last domainwire.RateReply
	var answered bool
	attempts, waited, granted, err := c.retry(ctx, o, func(ctx context.Context) (bool, time.Duration, error) {
		var rep domainwire.RateReply
		if err := c.call(ctx, domainwire.OpRequest, ns, res, &req, &rep); err != nil {
			return false, 0, err
		}
		if rep.Granted != 0 && (rep.Granted < o.minCopies || rep.Granted > copies) {
			return false, 0, fmt.Errorf("%w: granted %d outside [%d, %d]", ErrUnavailable, rep.Granted, o.minCopies, copies)
		}
		last, answered = rep, true
		return rep.Granted > 0, 0, nil
	})
	g := Grant{Resource: resource, Domain: domain, Attempts: attempts, Waited: waited}
	if answered {
		g.fillFrom(&last)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.callLocked(ns, res, false, attempts, answered)
	if answered {
		c.learnMode(ns, last.Fail)
	}
	switch {
	case granted:
		r.st.Granted++
		return g, nil
	case err == nil && c.kill.Load():
		r.st.WouldReject++
		g.Granted, g.Shadow = copies, true
		return g, nil
	case err == nil:
		r.st.Rejected++
		rej := g
		return g, &RejectedError{Resource: resource, Domain: domain, Copies: copies, MinCopies: o.minCopies,
			Attempts: attempts, Waited: waited, Grant: &rej}
	case errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
		c.unanswered(r, err)
		if _, why := c.failMode(ns); why != "" {
			r.st.DegradedRefused++
			return Grant{}, fmt.Errorf("domain: no local grant of %s for domain %q: %s; the service did not answer: %w", resource, domain, why, err)
		}
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
