package domain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/domainwire"
)

// Reserve asks the domain service to hold copies of a copy-limited
// resource ("namespace:resource") for domain: the largest n in [min
// copies, copies] the domain, group and global limits allow, or none
// (WithMinCopies; the default is copies). The request goes as JSON to
// allot.<node>.domain.reserve.<namespace>.<resource>.
//
// A rejection is retried as Request's is (WithMaxWait, WithBackoffBase)
// and returned as a *RejectedError with the last answer's HoldInfo. A
// new leader that is still learning the holds that exist answers with a
// time to retry after, which the retries honour as their least sleep.
//
// The hold is refreshed in the background, with the client's other holds
// of the resource, every third of the service's hold ttl, so it lives
// until Release or Close gives its copies back, or until the client's
// process dies and the refreshes stop. A hold the service no longer has
// (the refreshes could not reach it for a whole ttl) is lost: its Err
// wraps ErrHoldLost.
//
// Fail-open: when no domain service answers, Reserve returns a local hold
// of the min copies with Info().Degraded set, which no service counts, as
// far as the namespace's fail mode allows: FailOpen always, FailShare
// only while the client's copies of the resource (holds and local holds)
// with these stay within its Share, FailClosed never. For a namespace no
// reply has told the client about, the fail mode is not known and
// Reserve fails closed unless WithFailOpenUnseen says otherwise. A refused
// Reserve returns an error wrapping ErrUnavailable, counted in Status as
// DegradedRefused. With the kill switch on a rejection becomes a local
// hold of copies with Info().Shadow set. Bad input is an error and
// nothing is sent, as for Request.
func (c *Client) Reserve(ctx context.Context, resource, domain string, copies int64, opts ...CallOption) (*Hold, error) {
	ns, res, o, err := c.prepare(resource, domain, copies, opts)
	if err != nil {
		return nil, err
	}
	return c.reserve(ctx, ns, res, resource, domain, copies, &o)
}

// reserve is Reserve once its input is checked.
func (c *Client) reserve(ctx context.Context, ns, res, resource, domain string, copies int64, o *callOptions) (*Hold, error) {
	req := domainwire.Reserve{Domain: domain, Copies: copies, MinCopies: o.minCopies, ClientID: c.clientID}
	var last domainwire.ReserveReply
	var answered bool
	var sent time.Time // of the last answered attempt
	attempts, waited, granted, err := c.retry(ctx, o, func(ctx context.Context) (bool, time.Duration, error) {
		at := clock.Now(c.clock)
		var rep domainwire.ReserveReply
		if err := c.call(ctx, domainwire.OpReserve, ns, res, &req, &rep); err != nil {
			return false, 0, err
		}
		if rep.Granted != 0 && (rep.Granted < o.minCopies || rep.Granted > copies || rep.HoldID == "") {
			return false, 0, fmt.Errorf("%w: granted %d outside [%d, %d] or no hold id", ErrUnavailable, rep.Granted, o.minCopies, copies)
		}
		last, answered, sent = rep, true, at
		if rep.Learning {
			return false, fromMillis(rep.RetryAfterMillis, domainwire.MaxRetryAfter), nil
		}
		return rep.Granted > 0, 0, nil
	})
	h := &Hold{c: c, ns: ns, res: res, resource: resource, domain: domain}
	if answered {
		h.info = holdInfo(&last)
	}
	h.info.Waited = waited
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.callLocked(ns, res, granted, attempts, answered)
	if answered {
		c.learnMode(ns, last.Fail)
		r.learnTTL(last.TTLMillis)
		r.learnShare(domain, last.Share, sent)
	}
	switch {
	case granted:
		r.st.Granted++
		h.id, h.copies, h.groups, h.seal = last.HoldID, last.Granted, slices.Clone(last.Groups), last.Seal
		if c.closed {
			// Close ran meanwhile and will not release it: give it back.
			go c.releaseOrphan(h)
			return nil, agent.ErrClosed
		}
		c.addHoldLocked(r, h, last.TTLMillis)
		return h, nil
	case err == nil && c.kill.Load():
		r.st.WouldReject++
		h.local, h.info.Shadow, h.copies, h.groups = true, true, copies, slices.Clone(last.Groups)
		r.addLocal(h)
		return h, nil
	case err == nil:
		r.st.Rejected++
		e := &RejectedError{Resource: resource, Domain: domain, Copies: copies, MinCopies: o.minCopies,
			Attempts: attempts, Waited: waited, Learning: last.Learning, RetryAfter: fromMillis(last.RetryAfterMillis, domainwire.MaxRetryAfter)}
		if answered {
			e.Info = &h.info
		}
		return nil, e
	case errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
		c.unanswered(r, err)
		groups, why := c.mayDegrade(ns, r, domain, o.minCopies)
		if why != "" {
			r.st.DegradedRefused++
			return nil, fmt.Errorf("domain: no local hold of %s for domain %q: %s; the service did not answer: %w", resource, domain, why, err)
		}
		r.st.Degraded++
		h.info = HoldInfo{Waited: waited, Degraded: true, Cause: err}
		h.local, h.copies, h.groups = true, o.minCopies, groups
		r.addLocal(h)
		return h, nil
	}
	return nil, err
}

func holdInfo(r *domainwire.ReserveReply) HoldInfo {
	in := HoldInfo{DomainLimit: r.DomainLimit, GlobalLimit: r.GlobalLimit, DomainHolds: r.DomainHolds, GlobalHolds: r.GlobalHolds,
		Ignored: r.Ignored, Unconfigured: r.Unconfigured}
	for _, g := range r.GroupHolds {
		in.Groups = append(in.Groups, GroupHolds{Name: g.Name, Limit: g.Limit, Holds: g.Holds})
	}
	return in
}
