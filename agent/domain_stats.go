package agent

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The agent's per-resource state and counters of domain limits.

// DomainStatus counts one resource's domain-limit calls and holds, as
// this agent made them.
type DomainStatus struct {
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
	// Degraded counts calls granted by the agent itself because no
	// domain service answered (fail-open).
	Degraded uint64
	// WouldReject counts rejections the kill switch turned into grants.
	WouldReject uint64
	// Holds and HeldCopies describe the open holds the service knows of;
	// LocalHolds and LocalCopies the open holds only this agent knows of
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

// domainState is the agent's domain-limit side. Its mutex is its own, so
// domain calls never contend with the lease loop.
type domainState struct {
	kill atomic.Bool

	mu      sync.Mutex
	res     map[string]*domainRes
	other   *domainRes // stats of the resources beyond maxDomainStats
	closed  bool
	started bool
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
}

// domainRes is the agent's state for one resource: its counters and the
// open holds the refresh loop keeps alive. Fields are guarded by
// domainState.mu, except ops.
type domainRes struct {
	name     string // "namespace:resource"
	ns, res  string
	st       DomainStatus
	failing  bool             // logged as unavailable, not yet answered again
	holds    map[string]*Hold // open holds the service knows, by id
	ttl      time.Duration    // from the last reply
	next     time.Time        // next refresh
	inFlight bool             // a refresh is under way
	// ops orders exchanges about holds: releases and transfers share it,
	// a refresh takes it alone, so a refresh never lists copies that an
	// exchange sent before it has given up.
	ops sync.RWMutex
}

func (a *Agent) initDomain() {
	a.d.kill.Store(a.o.domain.killSwitch)
	a.d.res = make(map[string]*domainRes)
	a.d.other = &domainRes{name: "*", st: DomainStatus{Resource: "*"}}
	a.d.kick = make(chan struct{}, 1)
	a.d.stop = make(chan struct{})
	a.d.done = make(chan struct{})
}

// statsLocked returns the entry of ns:res, creating it; beyond
// maxDomainStats a resource without holds shares the "*" entry. withHolds
// creates the entry whatever the count, as holds need one to be refreshed.
func (d *domainState) entryLocked(ns, res string, withHolds bool) *domainRes {
	name := ns + ":" + res
	if r, ok := d.res[name]; ok {
		return r
	}
	if !withHolds && len(d.res) >= maxDomainStats {
		return d.other
	}
	r := &domainRes{name: name, ns: ns, res: res}
	r.st.Resource = name
	d.res[name] = r
	return r
}

// note updates ns:res's counters under the lock.
func (a *Agent) note(ns, res string, f func(r *domainRes)) {
	a.d.mu.Lock()
	f(a.d.entryLocked(ns, res, false))
	a.d.mu.Unlock()
}

// callLocked counts a Request's or Reserve's attempts in ns:res's entry
// and returns the entry.
func (a *Agent) callLocked(ns, res string, withHolds bool, attempts int, answered bool) *domainRes {
	r := a.d.entryLocked(ns, res, withHolds)
	r.st.Calls++
	r.st.Retries += uint64(attempts - 1)
	if answered {
		a.answered(r)
	}
	return r
}

// answered notes an answer of the service for r.
func (a *Agent) answered(r *domainRes) {
	r.st.LastAnswer, r.st.LastError = now(a.o.clock), nil
	if r.failing {
		r.failing = false
		a.log.Info("allot: domain service answers again", "resource", r.name)
	}
}

// unanswered notes a failure to get an answer for r, logged when it
// starts rather than on every call.
func (a *Agent) unanswered(r *domainRes, err error) {
	r.st.LastError = err
	if !r.failing {
		r.failing = true
		a.log.Warn("allot: domain service not answering; failing open, holds kept for a new leader to learn", "resource", r.name, "error", err)
	}
}

// DomainStats returns the counters of every resource of a domain-limit
// call, ordered by resource, then those counted together under "*".
func (a *Agent) DomainStats() []DomainStatus {
	a.d.mu.Lock()
	defer a.d.mu.Unlock()
	out := make([]DomainStatus, 0, len(a.d.res)+1)
	for _, r := range a.d.res {
		out = append(out, r.status())
	}
	slices.SortFunc(out, func(x, y DomainStatus) int { return cmp.Compare(x.Resource, y.Resource) })
	if a.d.other.st.Calls > 0 {
		out = append(out, a.d.other.st)
	}
	return out
}

// status is r's counters with its open holds; called under the lock.
func (r *domainRes) status() DomainStatus {
	st := r.st
	st.Holds, st.HeldCopies = 0, 0
	for _, h := range r.holds {
		st.Holds++
		st.HeldCopies += h.Copies()
	}
	return st
}
