package domain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/domainwire"
)

// Acquisition is what AcquireAll got: the same number of copies of every
// resource asked for.
type Acquisition struct {
	// Copies is the number of copies held of each copy resource, and
	// granted of the rate resource.
	Copies int64
	// Holds are the holds of the copy resources, in the order asked for.
	Holds []*Hold
	// Rate is the rate resource's grant (zero without one).
	Rate Grant
	// Waited is the time AcquireAll took.
	Waited time.Duration
}

// Close closes every hold of the acquisition and returns their errors
// joined. It is idempotent.
func (x *Acquisition) Close() error {
	if x == nil {
		return nil
	}
	var errs []error
	for _, h := range x.Holds {
		errs = append(errs, h.Close())
	}
	return errors.Join(errs...)
}

// AcquireAll takes the same number of copies, between min and max, of
// several resources for domain: copy-limited resources held, in order,
// and at most one rate-limited resource (rateResource, "" for none)
// requested last. It is the pseudo-atomic pattern of the Charon paper's
// figure 7, generalised to m resources:
//
//  1. Reserve max copies of the first copy resource (at least min); it
//     grants n ≤ max.
//  2. Reserve n copies of the next one (at least min); when it grants
//     fewer, n becomes that, and the earlier holds release their extra
//     copies. Continue through the copy resources.
//  3. Request n hits of the rate resource (at least min), and release
//     what the holds have beyond what it granted.
//
// The rate resource comes last because hits cannot be given back: asked
// for earlier, a later rejection would leave them spent. All steps share
// one WithMaxWait budget: each retries its rejections for what the steps
// before it left (the context deadline bounds it too), and
// WithBackoffBase applies to each; WithMinCopies does not apply (min
// does). When any step fails — a rejection, an error — the holds taken so
// far are closed and its error is returned (a *RejectedError for a
// rejection): the caller holds all of the copies or none.
//
// The atomicity is only what the caller observes. Others can see the
// first holds taken before the last are refused, and can be refused
// because of them in that window; a process that dies mid-way leaves its
// holds until their ttl expires. Fail-open applies step by step: a step
// that gets no answer grants min copies locally as far as the fail mode
// allows (see Reserve and Request), so n drops to min, or fails the
// acquisition when it does not allow it. Close the acquisition when done.
func (c *Client) AcquireAll(ctx context.Context, domain string, copyResources []string, rateResource string, max, min int64, opts ...CallOption) (*Acquisition, error) {
	type step struct{ resource, ns, res string }
	var steps []step
	seen := make(map[string]bool)
	for _, r := range append(copyResources[:len(copyResources):len(copyResources)], rateResource) {
		if r == "" && len(steps) == len(copyResources) {
			break // no rate resource
		}
		ns, res, err := domainwire.SplitResource(r)
		if err != nil {
			return nil, fmt.Errorf("domain: acquire: %w", err)
		}
		if seen[ns+":"+res] {
			return nil, fmt.Errorf("domain: acquire: resource %s is listed twice", r)
		}
		seen[ns+":"+res] = true
		steps = append(steps, step{r, ns, res})
	}
	if len(steps) == 0 {
		return nil, errors.New("domain: acquire: no resource")
	}
	if max < 1 || min < 1 || min > max || max > domainwire.MaxCopies {
		return nil, fmt.Errorf("domain: acquire: want 1 ≤ min (%d) ≤ max (%d) ≤ %d", min, max, int64(domainwire.MaxCopies))
	}
	// prepare checks the domain, the options and that the client is open.
	_, _, o, err := c.prepare(steps[0].resource, domain, max, opts)
	if err != nil {
		return nil, err
	}
	if o.minCopies != max {
		return nil, errors.New("domain: acquire: WithMinCopies does not apply; pass min")
	}
	budget := o.maxWait
	start := clock.Now(c.clock)
	x := &Acquisition{Copies: max}
	fail := func(err error) (*Acquisition, error) {
		_ = x.Close()
		return nil, err
	}
	for i, s := range steps {
		so := callOptions{minCopies: min, maxWait: budget - clock.Since(c.clock, start), backoffBase: o.backoffBase}
		if so.maxWait < 0 {
			so.maxWait = 0
		}
		var got int64
		if i < len(copyResources) {
			h, err := c.reserve(ctx, s.ns, s.res, s.resource, domain, x.Copies, &so)
			if err != nil {
				return fail(err)
			}
			x.Holds = append(x.Holds, h)
			got = h.Copies()
		} else {
			g, err := c.requestRate(ctx, s.ns, s.res, s.resource, domain, x.Copies, &so)
			if err != nil {
				return fail(err)
			}
			x.Rate, got = g, g.Granted
		}
		if got < x.Copies {
			x.Copies = got
			for _, h := range x.Holds {
				if extra := h.Copies() - got; extra > 0 {
					if err := h.Release(ctx, extra); err != nil {
						return fail(fmt.Errorf("domain: acquire: releasing the %d extra copies of %s: %w", extra, h.Resource(), err))
					}
				}
			}
		}
	}
	x.Waited = clock.Since(c.clock, start)
	return x, nil
}
