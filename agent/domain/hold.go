package domain

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/domainwire"
)

// GroupHolds is one domain group's pool of a copy-limited resource.
type GroupHolds struct {
	Name  string
	Limit int64 // -1: not limited
	Holds int64 // copies held by all domains of the group
}

// HoldInfo is what the Reserve that made a hold learnt: the context data
// of its answer (section 3.1 of the Charon paper; limits not configured
// are -1), and how the hold came to be.
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
	// Waited is the time Reserve spent getting the hold, retries
	// included.
	Waited time.Duration
	// Degraded: no domain service answered Reserve (Cause says why), so
	// the client failed open, as the namespace's fail mode allowed: the
	// hold is local, with the call's min copies, and the service does
	// not count it. The context data is then zero.
	Degraded bool
	Cause    error
	// Shadow: the service rejected Reserve and the kill switch granted
	// the copies as a local hold the service does not count. The context
	// data is that of the rejection.
	Shadow bool
}

// A Hold is copies of a copy-limited resource held for a domain, made by
// Reserve or Seize. It belongs to the client that made it, which
// refreshes it in the background so that it lives until it is released;
// if the client's process dies, the service drops it after its ttl. Close
// it when done (defer h.Close()). Methods are safe for concurrent use.
type Hold struct {
	c        *Client
	ns, res  string
	resource string
	domain   string
	local    bool // degraded or shadow: the service does not know it
	info     HoldInfo
	// entry is a local hold's resource entry, which counts it (guarded
	// by c.mu).
	entry *domainRes

	op sync.Mutex // one exchange with the service at a time

	mu     sync.Mutex
	id     string
	copies int64
	groups []string
	seal   string // the service's latest seal, listed in refreshes
	lost   bool
	closed bool
	err    error
}

// ID returns the hold's id at the service ("" for a local hold).
func (h *Hold) ID() string { return h.id }

// Resource returns the hold's resource, "namespace:resource".
func (h *Hold) Resource() string { return h.resource }

// Domain returns the domain the copies are held for.
func (h *Hold) Domain() string { return h.domain }

// Copies returns the copies the hold still has: 0 once closed, released,
// transferred or lost.
func (h *Hold) Copies() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost || h.closed {
		return 0
	}
	return h.copies
}

// Groups returns the domain groups the copies were taken from, as the
// service answered; for a local hold, the groups whose shares it counts
// in (a degraded hold's: those of the domain's last share).
func (h *Hold) Groups() []string { return slices.Clone(h.groups) }

// Info returns what the Reserve that made the hold learnt (zero for a
// seized hold).
func (h *Hold) Info() HoldInfo { return h.info }

// Err returns why the hold was lost (wrapping ErrHoldLost), or nil while
// the service has it: the service drops a hold no refresh reached within
// its ttl, and its copies are then no longer held.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// check returns the error of using h: closed or lost. Called under h.mu.
func (h *Hold) checkLocked() error {
	switch {
	case h.lost:
		return h.err
	case h.closed:
		return fmt.Errorf("%w: %s", ErrHoldClosed, h.resource)
	}
	return nil
}

// addHoldLocked registers h for refreshes and starts the refresh loop on
// the first hold.
func (c *Client) addHoldLocked(r *domainRes, h *Hold, ttlMillis int64) {
	if r.holds == nil {
		r.holds = make(map[string]*Hold)
	}
	ttl := fromMillis(ttlMillis, domainwire.MaxHoldTTL)
	if ttl <= 0 {
		ttl = defaultHoldTTL
	}
	if r.ttl == 0 || ttl < r.ttl {
		r.ttl = ttl
	}
	next := clock.Now(c.clock).Add(r.ttl / 3)
	if len(r.holds) == 0 || next.Before(r.next) {
		r.next = next
	}
	r.holds[h.id] = h
	if !c.started {
		c.started = true
		go c.refreshLoop()
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// dropHold stops refreshing h; with lost, it counts it lost.
func (c *Client) dropHold(h *Hold, lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.res[h.ns+":"+h.res]
	if r == nil || r.holds[h.id] != h {
		return
	}
	delete(r.holds, h.id)
	if lost {
		r.st.Lost++
	}
}

// markLost records that the service no longer has h.
func (h *Hold) markLost(why string) {
	h.mu.Lock()
	if !h.lost {
		h.lost = true
		h.err = fmt.Errorf("%w: %d copies of %s for domain %q (hold %s): %s", ErrHoldLost, h.copies, h.resource, h.domain, h.id, why)
	}
	h.mu.Unlock()
	h.c.dropHold(h, true)
}

// Release gives n of the hold's copies back, in [1, Copies()]; the rest
// stay held. Releasing the last copy closes the hold. Asking for more
// than the hold has, releasing a closed or lost hold, or a ctx already
// ended is an error and nothing is sent; once sent, the release is seen
// through whatever ctx does. When the service does not answer, the copies
// are given back here all the same and the next refresh carries the
// lower count to the service, which takes it as the truth (or, for the
// last copy, the hold is no longer refreshed and expires within its
// ttl); Status counts it in UnansweredReleases. A local hold
// (Degraded or Shadow) is released locally.
func (h *Hold) Release(ctx context.Context, n int64) error {
	if h == nil {
		return errNilHold
	}
	h.op.Lock()
	defer h.op.Unlock()
	h.mu.Lock()
	err := h.checkLocked()
	have := h.copies
	h.mu.Unlock()
	if err != nil {
		return err
	}
	if n < 1 || n > have {
		return fmt.Errorf("domain: release %d copies of %s: the hold has %d (release 1 to %d)", n, h.resource, have, have)
	}
	if h.local {
		h.shrinkLocal(n)
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Once sent, a release is seen through (within the domain timeout):
	// abandoned half-way it might count at the service and not here.
	var rep domainwire.ReleaseReply
	err = h.exchange(context.WithoutCancel(ctx), domainwire.OpRelease, &domainwire.Release{ClientID: h.c.clientID, HoldID: h.id, Copies: n}, &rep)
	switch {
	case err == nil, errors.Is(err, ErrUnavailable):
		if err != nil {
			h.unansweredRelease(err)
		}
		// What is left is what this hold had less n, whatever the reply
		// says: a service that has not had an earlier unanswered release
		// yet (the next refresh carries it) answers with more.
		h.settle(have - n)
	default:
		return err
	}
	return nil
}

// unansweredRelease counts and logs a release the service did not answer,
// which the next refresh carries instead: the service takes the lower
// count a refresh lists as the truth, and a hold no longer refreshed
// expires.
func (h *Hold) unansweredRelease(err error) {
	h.c.log.Debug("allot: domain release not answered; the next refresh carries it", "resource", h.resource, "hold", h.id, "error", err)
	h.c.note(h.ns, h.res, func(r *domainRes) {
		r.st.UnansweredReleases++
		r.st.LastError = err
	})
}

// shrinkLocal takes n copies off a local hold.
func (h *Hold) shrinkLocal(n int64) {
	h.mu.Lock()
	h.copies -= n
	done := h.copies == 0
	h.closed = done
	h.mu.Unlock()
	c := h.c
	c.mu.Lock()
	r := h.entry
	r.st.LocalCopies -= n
	if done {
		r.st.LocalHolds--
		delete(r.fail.locals, h)
	}
	c.mu.Unlock()
}

// exchange sends one release or transfer about h, under the resource's
// shared ops lock, and decodes the reply into rep. A 404 marks h lost.
func (h *Hold) exchange(ctx context.Context, op string, req, rep any) error {
	c := h.c
	c.mu.Lock()
	r := c.entryLocked(h.ns, h.res, true)
	c.mu.Unlock()
	r.ops.RLock()
	err := c.call(ctx, op, h.ns, h.res, req, rep)
	r.ops.RUnlock()
	var se *agent.ServiceError
	switch {
	case err == nil:
	case errors.As(err, &se) && se.Code == domainwire.CodeNotFound:
		h.markLost("the service does not know it: " + se.Description)
		return h.Err()
	default:
		return err
	}
	c.mu.Lock()
	c.answered(r)
	c.mu.Unlock()
	return nil
}

// settle records the copies the service says are left.
func (h *Hold) settle(left int64) {
	h.mu.Lock()
	h.copies = max(left, 0)
	done := h.copies == 0
	if done {
		h.closed = true
	}
	h.mu.Unlock()
	if done {
		h.c.dropHold(h, false)
	}
}

// Close gives back every copy the hold still has and stops refreshing it.
// It is idempotent, and returns nil for a hold with nothing left to give
// back (closed, released, transferred, already lost, or local), so it
// suits defer. When the service does not answer, the hold is no longer
// refreshed, so the service drops it within its ttl; Close returns nil
// and Status counts it in UnansweredReleases. When the service no
// longer had the hold, it is marked lost and the error wraps ErrHoldLost. Close of a nil hold does
// nothing, so a defer placed before checking Reserve's error is safe.
func (h *Hold) Close() error {
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*h.c.o.timeout)
	defer cancel()
	return h.close(ctx)
}

func (h *Hold) close(ctx context.Context) error {
	h.op.Lock()
	defer h.op.Unlock()
	h.mu.Lock()
	if h.lost || h.closed {
		h.mu.Unlock()
		return nil
	}
	n := h.copies
	if h.local {
		h.mu.Unlock()
		h.shrinkLocal(n)
		return nil
	}
	h.closed = true // no further use, whatever the answer
	h.mu.Unlock()
	err := h.exchange(ctx, domainwire.OpRelease, &domainwire.Release{ClientID: h.c.clientID, HoldID: h.id}, &domainwire.ReleaseReply{})
	h.c.dropHold(h, false)
	switch {
	case errors.Is(err, ErrUnavailable) || err != nil && ctx.Err() != nil:
		h.unansweredRelease(err) // out of time: the same as no answer
	case err != nil:
		return fmt.Errorf("domain: close hold %s of %s: %w", h.id, h.resource, err)
	}
	return nil
}

// releaseOrphan gives back a hold granted after the client closed.
func (c *Client) releaseOrphan(h *Hold) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*c.o.timeout)
	defer cancel()
	_ = c.call(ctx, domainwire.OpRelease, h.ns, h.res, &domainwire.Release{ClientID: c.clientID, HoldID: h.id}, &domainwire.ReleaseReply{})
}

// Transfer moves n of the hold's copies, in [1, Copies()], into the
// service's staging area for another process to Seize with the returned
// id; copies not seized within ttl are released (ttl in (0, 24h]; 0 means
// the service's default, 30s). The rest stay in this hold; transferring
// the last copy closes it. A local hold cannot be transferred, and the
// bad input errors of Release apply; nothing is sent then. When the
// service does not answer, the error wraps ErrUnavailable and the
// hold keeps its copies here; the service may have staged them all the
// same (the answer was lost), in which case they return to the pool after
// ttl, and Close still gives back what the hold has left at the service.
func (h *Hold) Transfer(ctx context.Context, n int64, ttl time.Duration) (string, error) {
	if h == nil {
		return "", errNilHold
	}
	if ttl < 0 || ttl > domainwire.MaxTransferTTL {
		return "", fmt.Errorf("domain: transfer ttl %v is outside (0, %v] (0: the service's default)", ttl, domainwire.MaxTransferTTL)
	}
	h.op.Lock()
	defer h.op.Unlock()
	h.mu.Lock()
	err := h.checkLocked()
	have := h.copies
	h.mu.Unlock()
	if err != nil {
		return "", err
	}
	if h.local {
		return "", fmt.Errorf("domain: transfer from a local hold of %s (degraded or shadow): the service does not know it", h.resource)
	}
	if n < 1 || n > have {
		return "", fmt.Errorf("domain: transfer %d copies of %s: the hold has %d (transfer 1 to %d)", n, h.resource, have, have)
	}
	req := &domainwire.Transfer{ClientID: h.c.clientID, HoldID: h.id, Copies: n}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var rep domainwire.TransferReply
	if err := h.exchange(ctx, domainwire.OpTransfer, req, &rep); err != nil {
		return "", err
	}
	if _, _, err := domainwire.TransferResource(rep.TransferID); err != nil {
		return "", fmt.Errorf("%w: transfer reply: %w", ErrUnavailable, err)
	}
	h.settle(have - n) // not rep.Remaining: see Release
	return rep.TransferID, nil
}

// Seize claims the copies another process staged with Hold.Transfer, as a
// new hold of this client, refreshed like a reserved one. The request goes
// to the seize subject of the resource the id names. An unknown or
// expired transfer id is an error (a *agent.ServiceError with code 404), and so
// is one another client seized (409); a malformed one is an error and
// nothing is sent. When the service does not answer, the error wraps
// ErrUnavailable: a seize never fails open, as the copies are
// someone else's until it succeeds. Calling Seize again with the same id
// is then safe: for one hold TTL the service answers the seizer's retry
// with the hold it made, even across a leader change, and a second Seize
// that succeeds returns the Hold the first one returned.
func (c *Client) Seize(ctx context.Context, transferID string) (*Hold, error) {
	ns, res, err := domainwire.TransferResource(transferID)
	if err != nil {
		return nil, fmt.Errorf("domain: %w", err)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, agent.ErrClosed
	}
	var rep domainwire.SeizeReply
	at := clock.Now(c.clock)
	err = c.call(ctx, domainwire.OpSeize, ns, res, &domainwire.Seize{ClientID: c.clientID, TransferID: transferID}, &rep)
	if err == nil && (rep.HoldID == "" || rep.Copies < 1) {
		err = fmt.Errorf("%w: seize reply without a hold", ErrUnavailable)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.entryLocked(ns, res, err == nil)
	r.st.Calls++
	if err != nil {
		if errors.Is(err, ErrUnavailable) {
			c.unanswered(r, err)
		}
		return nil, err
	}
	c.answered(r)
	c.learnMode(ns, rep.Fail)
	r.learnTTL(rep.TTLMillis)
	r.learnShare(rep.Domain, rep.Share, at)
	if h := r.holds[rep.HoldID]; h != nil {
		return h, nil // a retry answered with the hold this client has
	}
	r.st.Granted++
	h := &Hold{c: c, ns: ns, res: res, resource: ns + ":" + res, domain: rep.Domain,
		id: rep.HoldID, copies: rep.Copies, groups: slices.Clone(rep.Groups), seal: rep.Seal}
	if c.closed {
		go c.releaseOrphan(h)
		return nil, agent.ErrClosed
	}
	c.addHoldLocked(r, h, rep.TTLMillis)
	return h, nil
}
