package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/allot/allot/internal/domainwire"
)

// ErrHoldLost is wrapped by Hold.Err, and by the errors of a lost hold's
// methods: the domain service no longer has the hold (it expired because
// no refresh reached the service within its ttl), so its copies are no
// longer held.
var ErrHoldLost = errors.New("agent: hold lost")

// ErrHoldClosed is returned by the methods of a hold that was closed, or
// whose copies were all released or transferred.
var ErrHoldClosed = errors.New("agent: hold closed")

var errNilHold = errors.New("agent: nil hold (Reserve or Seize failed)")

// A Hold is copies of a copy-limited resource held for a domain, made by
// Reserve or Seize. It belongs to the agent that made it, which refreshes
// it in the background so that it lives until it is released; if the
// agent's process dies, the service drops it after its ttl. Close it when
// done (defer h.Close()). Methods are safe for concurrent use.
type Hold struct {
	a        *Agent
	ns, res  string
	resource string
	domain   string
	local    bool // degraded or shadow: the service does not know it
	degraded bool
	shadow   bool
	cause    error
	waited   time.Duration
	info     HoldInfo

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
// service answered.
func (h *Hold) Groups() []string { return slices.Clone(h.groups) }

// Info returns the context data of the answer that made the hold (zero
// for a degraded hold or a seized one).
func (h *Hold) Info() HoldInfo { return h.info }

// Waited returns the time Reserve spent getting the hold, retries
// included.
func (h *Hold) Waited() time.Duration { return h.waited }

// Degraded reports that no domain service answered Reserve, so the agent
// failed open: the hold is local, with the call's min copies, and the
// service does not count it.
func (h *Hold) Degraded() bool { return h.degraded }

// Shadow reports that the service rejected Reserve and the kill switch
// granted the copies as a local hold the service does not count.
func (h *Hold) Shadow() bool { return h.shadow }

// Cause returns why a degraded hold is degraded.
func (h *Hold) Cause() error { return h.cause }

// Lost reports that the service no longer has the hold (see ErrHoldLost).
func (h *Hold) Lost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// Err returns why the hold was lost (wrapping ErrHoldLost), or nil.
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
// The hold is refreshed in the background, with the agent's other holds
// of the resource, every third of the service's hold ttl, so it lives
// until Release or Close gives its copies back, or until the agent's
// process dies and the refreshes stop. A hold the service no longer has
// (the refreshes could not reach it for a whole ttl) is marked Lost.
//
// Fail-open: when no domain service answers, Reserve returns a local hold
// of the min copies with Degraded set, which no service counts; with the
// kill switch on a rejection becomes a local hold of copies with Shadow
// set. Bad input is an error and nothing is sent, as for Request.
func (a *Agent) Reserve(ctx context.Context, resource, domain string, copies int64, opts ...DomainOption) (*Hold, error) {
	ns, res, o, err := a.prepare(resource, domain, copies, opts)
	if err != nil {
		return nil, err
	}
	return a.reserve(ctx, ns, res, resource, domain, copies, &o)
}

// reserve is Reserve once its input is checked.
func (a *Agent) reserve(ctx context.Context, ns, res, resource, domain string, copies int64, o *callOptions) (*Hold, error) {
	req := domainwire.Reserve{Domain: domain, Copies: copies, MinCopies: o.minCopies, ClientID: a.o.clientID}
	var last domainwire.ReserveReply
	var answered bool
	attempts, waited, granted, err := a.retry(ctx, o, func(ctx context.Context) (bool, time.Duration, error) {
		var rep domainwire.ReserveReply
		if err := a.domainCall(ctx, domainwire.OpReserve, ns, res, &req, &rep); err != nil {
			return false, 0, err
		}
		if rep.Granted != 0 && (rep.Granted < o.minCopies || rep.Granted > copies || rep.HoldID == "") {
			return false, 0, fmt.Errorf("%w: granted %d outside [%d, %d] or no hold id", ErrDomainUnavailable, rep.Granted, o.minCopies, copies)
		}
		last, answered = rep, true
		if rep.Learning {
			return false, max(time.Duration(rep.RetryAfterMillis)*time.Millisecond, 0), nil
		}
		return rep.Granted > 0, 0, nil
	})
	h := &Hold{a: a, ns: ns, res: res, resource: resource, domain: domain, waited: waited}
	if answered {
		h.info = holdInfo(&last)
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	r := a.callLocked(ns, res, granted, attempts, answered)
	switch {
	case granted:
		r.st.Granted++
		h.id, h.copies, h.groups, h.seal = last.HoldID, last.Granted, slices.Clone(last.Groups), last.Seal
		if a.d.closed {
			// Close ran meanwhile and will not release it: give it back.
			go a.releaseOrphan(h)
			return nil, ErrClosed
		}
		a.addHoldLocked(r, h, last.TTLMillis)
		return h, nil
	case err == nil && a.d.kill.Load():
		r.st.WouldReject++
		h.local, h.shadow, h.copies = true, true, copies
		r.st.LocalHolds++
		r.st.LocalCopies += copies
		return h, nil
	case err == nil:
		r.st.Rejected++
		e := &RejectedError{Resource: resource, Domain: domain, Copies: copies, MinCopies: o.minCopies,
			Attempts: attempts, Waited: waited, Learning: last.Learning, RetryAfter: time.Duration(last.RetryAfterMillis) * time.Millisecond}
		if answered {
			e.Info = &h.info
		}
		return nil, e
	case errors.Is(err, ErrDomainUnavailable) && ctx.Err() == nil:
		a.unanswered(r, err)
		r.st.Degraded++
		h.info = HoldInfo{}
		h.local, h.degraded, h.cause, h.copies = true, true, err, o.minCopies
		r.st.LocalHolds++
		r.st.LocalCopies += o.minCopies
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

// addHoldLocked registers h for refreshes and starts the refresh loop on
// the first hold.
func (a *Agent) addHoldLocked(r *domainRes, h *Hold, ttlMillis int64) {
	if r.holds == nil {
		r.holds = make(map[string]*Hold)
	}
	ttl := time.Duration(ttlMillis) * time.Millisecond
	if ttl <= 0 {
		ttl = defaultHoldTTL
	}
	if r.ttl == 0 || ttl < r.ttl {
		r.ttl = ttl
	}
	next := now(a.o.clock).Add(r.ttl / 3)
	if len(r.holds) == 0 || next.Before(r.next) {
		r.next = next
	}
	r.holds[h.id] = h
	if !a.d.started {
		a.d.started = true
		go a.refreshLoop()
	}
	select {
	case a.d.kick <- struct{}{}:
	default:
	}
}

// dropHold stops refreshing h; with lost, it counts it lost.
func (a *Agent) dropHold(h *Hold, lost bool) {
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	r := a.d.res[h.ns+":"+h.res]
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
	h.a.dropHold(h, true)
}

// Release gives n of the hold's copies back, in [1, Copies()]; the rest
// stay held. Releasing the last copy closes the hold. Asking for more
// than the hold has, releasing a closed or lost hold, or a ctx already
// ended is an error and nothing is sent; once sent, the release is seen
// through whatever ctx does. When the service does not answer, the copies
// are given back here all the same and the next refresh carries the
// lower count to the service, which takes it as the truth (or, for the
// last copy, the hold is no longer refreshed and expires within its
// ttl); DomainStats counts it in UnansweredReleases. A local hold
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
		return fmt.Errorf("agent: release %d copies of %s: the hold has %d (release 1 to %d)", n, h.resource, have, have)
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
	err = h.exchange(context.WithoutCancel(ctx), domainwire.OpRelease, &domainwire.Release{ClientID: h.a.o.clientID, HoldID: h.id, Copies: n}, &rep)
	switch {
	case err == nil, errors.Is(err, ErrDomainUnavailable):
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
	h.a.log.Debug("allot: domain release not answered; the next refresh carries it", "resource", h.resource, "hold", h.id, "error", err)
	h.a.note(h.ns, h.res, func(r *domainRes) {
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
	h.a.note(h.ns, h.res, func(r *domainRes) {
		r.st.LocalCopies -= n
		if done {
			r.st.LocalHolds--
		}
	})
}

// exchange sends one release or transfer about h, under the resource's
// shared ops lock, and decodes the reply into rep. A 404 marks h lost.
func (h *Hold) exchange(ctx context.Context, op string, req, rep any) error {
	a := h.a
	a.d.mu.Lock()
	r := a.d.entryLocked(h.ns, h.res, true)
	a.d.mu.Unlock()
	r.ops.RLock()
	err := a.domainCall(ctx, op, h.ns, h.res, req, rep)
	r.ops.RUnlock()
	var se *ServiceError
	switch {
	case err == nil:
	case errors.As(err, &se) && se.Code == domainwire.CodeNotFound:
		h.markLost("the service does not know it: " + se.Description)
		return h.Err()
	default:
		return err
	}
	a.d.mu.Lock()
	a.answered(r)
	a.d.mu.Unlock()
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
		h.a.dropHold(h, false)
	}
}

// Close gives back every copy the hold still has and stops refreshing it.
// It is idempotent, and returns nil for a hold with nothing left to give
// back (closed, released, transferred, already lost, or local), so it
// suits defer. When the service does not answer, the hold is no longer
// refreshed, so the service drops it within its ttl; Close returns nil
// and DomainStats counts it in UnansweredReleases. When the service no
// longer had the hold, it is marked lost and the error wraps ErrHoldLost. Close of a nil hold does
// nothing, so a defer placed before checking Reserve's error is safe.
func (h *Hold) Close() error {
	if h == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*h.a.o.domain.timeout)
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
	err := h.exchange(ctx, domainwire.OpRelease, &domainwire.Release{ClientID: h.a.o.clientID, HoldID: h.id}, &domainwire.ReleaseReply{})
	h.a.dropHold(h, false)
	switch {
	case errors.Is(err, ErrDomainUnavailable) || err != nil && ctx.Err() != nil:
		h.unansweredRelease(err) // out of time: the same as no answer
	case err != nil:
		return fmt.Errorf("agent: close hold %s of %s: %w", h.id, h.resource, err)
	}
	return nil
}

// releaseOrphan gives back a hold granted after the agent closed.
func (a *Agent) releaseOrphan(h *Hold) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*a.o.domain.timeout)
	defer cancel()
	_ = a.domainCall(ctx, domainwire.OpRelease, h.ns, h.res, &domainwire.Release{ClientID: a.o.clientID, HoldID: h.id}, &domainwire.ReleaseReply{})
}

// Transfer moves n of the hold's copies, in [1, Copies()], into the
// service's staging area for another process to Seize with the returned
// id; copies not seized within ttl are released (ttl in (0, 24h]; 0 means
// the service's default, 30s). The rest stay in this hold; transferring
// the last copy closes it. A local hold cannot be transferred, and the
// bad input errors of Release apply; nothing is sent then. When the
// service does not answer, the error wraps ErrDomainUnavailable and the
// hold keeps its copies here; the service may have staged them all the
// same (the answer was lost), in which case they return to the pool after
// ttl, and Close still gives back what the hold has left at the service.
func (h *Hold) Transfer(ctx context.Context, n int64, ttl time.Duration) (string, error) {
	if h == nil {
		return "", errNilHold
	}
	if ttl < 0 || ttl > domainwire.MaxTransferTTL {
		return "", fmt.Errorf("agent: transfer ttl %v is outside (0, %v] (0: the service's default)", ttl, domainwire.MaxTransferTTL)
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
		return "", fmt.Errorf("agent: transfer from a local hold of %s (degraded or shadow): the service does not know it", h.resource)
	}
	if n < 1 || n > have {
		return "", fmt.Errorf("agent: transfer %d copies of %s: the hold has %d (transfer 1 to %d)", n, h.resource, have, have)
	}
	req := &domainwire.Transfer{ClientID: h.a.o.clientID, HoldID: h.id, Copies: n}
	if ttl > 0 {
		req.TTL = ttl.String()
	}
	var rep domainwire.TransferReply
	if err := h.exchange(ctx, domainwire.OpTransfer, req, &rep); err != nil {
		return "", err
	}
	if _, _, err := domainwire.TransferResource(rep.TransferID); err != nil {
		return "", fmt.Errorf("%w: transfer reply: %w", ErrDomainUnavailable, err)
	}
	h.settle(have - n) // not rep.Remaining: see Release
	return rep.TransferID, nil
}

// Seize claims the copies another process staged with Hold.Transfer, as a
// new hold of this agent, refreshed like a reserved one. The request goes
// to the seize subject of the resource the id names. An unknown or
// expired transfer id is an error (a *ServiceError with code 404), and so
// is one another client seized (409); a malformed one is an error and
// nothing is sent. When the service does not answer, the error wraps
// ErrDomainUnavailable: a seize never fails open, as the copies are
// someone else's until it succeeds. Calling Seize again with the same id
// is then safe: for one hold TTL the service answers the seizer's retry
// with the hold it made, even across a leader change, and a second Seize
// that succeeds returns the Hold the first one returned.
func (a *Agent) Seize(ctx context.Context, transferID string) (*Hold, error) {
	ns, res, err := domainwire.TransferResource(transferID)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	a.d.mu.Lock()
	closed := a.d.closed
	a.d.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	var rep domainwire.SeizeReply
	err = a.domainCall(ctx, domainwire.OpSeize, ns, res, &domainwire.Seize{ClientID: a.o.clientID, TransferID: transferID}, &rep)
	if err == nil && (rep.HoldID == "" || rep.Copies < 1) {
		err = fmt.Errorf("%w: seize reply without a hold", ErrDomainUnavailable)
	}
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	r := a.d.entryLocked(ns, res, err == nil)
	r.st.Calls++
	if err != nil {
		if errors.Is(err, ErrDomainUnavailable) {
			a.unanswered(r, err)
		}
		return nil, err
	}
	a.answered(r)
	if h := r.holds[rep.HoldID]; h != nil {
		return h, nil // a retry answered with the hold this agent has
	}
	r.st.Granted++
	h := &Hold{a: a, ns: ns, res: res, resource: ns + ":" + res, domain: rep.Domain,
		id: rep.HoldID, copies: rep.Copies, groups: slices.Clone(rep.Groups), seal: rep.Seal}
	if a.d.closed {
		go a.releaseOrphan(h)
		return nil, ErrClosed
	}
	a.addHoldLocked(r, h, rep.TTLMillis)
	return h, nil
}
