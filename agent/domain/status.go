package domain

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/allot/allot/agent/internal/clock"
)

// The client's per-resource state and counters.

// Status counts one resource's domain-limit calls and holds, as this
// client made them.
type Status struct {
	// Resource is "namespace:resource", or "*" for the resources beyond
	// the first 1024, counted together.
	Resource string
	// Calls counts Request, Reserve and Seize calls; Granted those the
	// service granted, Rejected those that returned a rejection, Retries
	// the attempts after a rejection.
	Calls    uint64
	Granted  uint64
	Rejected uint64
	Retries  uint64
	// Degraded counts calls granted by the client itself because no
	// domain service answered (fail-open); DegradedRefused those it
	// refused then, returning an error wrapping ErrUnavailable: the
	// namespace fails closed, the copies would exceed the client's share,
	// or it knows no share or fail mode to go by.
	Degraded        uint64
	DegradedRefused uint64
	// WouldReject counts rejections the kill switch turned into grants.
	WouldReject uint64
	// Holds and HeldCopies describe the open holds the service knows of;
	// LocalHolds and LocalCopies the open holds only this client knows of
	// (degraded or kill-switch holds).
	Holds       int
	HeldCopies  int64
	LocalHolds  int
	LocalCopies int64
	// Lost counts holds the service no longer had (they expired unrefreshed).
	Lost uint64
	// UnansweredReleases counts releases (Release, Close) the service did
	// not answer: given back here, they reach it with the next refresh or
	// by the hold's expiry.
	UnansweredReleases uint64
	// LastAnswer is when the service last answered; LastError the last
	// failure to get an answer since then, or nil.
	LastAnswer time.Time
	LastError  error
}

// domainRes is the client's state for one resource: its counters and the
// open holds the refresh loop keeps alive. Fields are guarded by
// Client.mu, except ops.
type domainRes struct {
	name     string // "namespace:resource"
	ns, res  string
	st       Status
	failing  bool             // logged as unavailable, not yet answered again
	holds    map[string]*Hold // open holds the service knows, by id
	ttl      time.Duration    // from the last reply
	next     time.Time        // next refresh
	inFlight bool             // a refresh is under way
	// ops orders exchanges about holds: releases and transfers share it,
	// a refresh takes it alone, so a refresh never lists copies that an
	// exchange sent before it has given up.
	ops sync.RWMutex
	// fail is what the client may grant itself when no service answers.
	fail failState
	// shared: the entry counts many resources together ("*"); it keeps no
	// fail-open state.
	shared bool
}

// entryLocked returns the entry of ns:res, creating it; beyond maxStats a
// resource without holds shares the "*" entry. withHolds creates the
// entry whatever the count, as holds need one to be refreshed.
func (c *Client) entryLocked(ns, res string, withHolds bool) *domainRes {
	name := ns + ":" + res
	if r, ok := c.res[name]; ok {
		return r
	}
	if !withHolds && len(c.res) >= maxStats {
		return c.other
	}
	r := &domainRes{name: name, ns: ns, res: res}
	r.st.Resource = name
	c.res[name] = r
	return r
}

// note updates ns:res's counters under the lock.
func (c *Client) note(ns, res string, f func(r *domainRes)) {
	c.mu.Lock()
	f(c.entryLocked(ns, res, false))
	c.mu.Unlock()
}

// callLocked counts a Request's or Reserve's attempts in ns:res's entry
// and returns the entry.
func (c *Client) callLocked(ns, res string, withHolds bool, attempts int, answered bool) *domainRes {
	r := c.entryLocked(ns, res, withHolds)
	r.st.Calls++
	r.st.Retries += uint64(attempts - 1)
	if answered {
		c.answered(r)
	}
	return r
}

// answered notes an answer of the service for r.
func (c *Client) answered(r *domainRes) {
	r.st.LastAnswer, r.st.LastError = clock.Now(c.clock), nil
	r.fail.failingSince = time.Time{}
	if r.failing {
		r.failing = false
		c.log.Info("allot: domain service answers again", "resource", r.name)
	}
}

// unanswered notes a failure to get an answer for r, logged when it
// starts rather than on every call.
func (c *Client) unanswered(r *domainRes, err error) {
	r.st.LastError = err
	if r.fail.failingSince.IsZero() {
		r.fail.failingSince = clock.Now(c.clock)
	}
	if !r.failing {
		r.failing = true
		// Whether a call then grants locally is the namespace's fail mode's
		// to say (closed, or not yet known, refuses): not claimed here.
		c.log.Warn("allot: domain service not answering; granting locally only as the namespace's fail mode allows, holds kept for a new leader to learn", "resource", r.name, "error", err)
	}
}

// Status returns the counters of every resource of a call, ordered by
// resource, then those counted together under "*".
func (c *Client) Status() []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Status, 0, len(c.res)+1)
	for _, r := range c.res {
		out = append(out, r.status())
	}
	slices.SortFunc(out, func(x, y Status) int { return cmp.Compare(x.Resource, y.Resource) })
	if c.other.st.Calls > 0 {
		out = append(out, c.other.st)
	}
	return out
}

// status is r's counters with its open holds; called under the lock.
func (r *domainRes) status() Status {
	st := r.st
	st.Holds, st.HeldCopies = 0, 0
	for _, h := range r.holds {
		st.Holds++
		st.HeldCopies += h.Copies()
	}
	return st
}
