package agent

import (
	"cmp"
	"slices"
	"sync/atomic"
	"time"

	"github.com/allot/allot/agent/internal/clock"
)

// Usage is what an agent did with one resource: what its limiter
// admitted and refused, and how long it ran without a lease. It feeds the
// agent's Prometheus collector (package agent/agentmetrics).
type Usage struct {
	Status
	// Admitted counts the units let through: events of a rate limiter
	// (AllowN, WaitN, ReserveN that succeeded), units of a gauge (Acquire,
	// TryAcquire that succeeded).
	Admitted uint64
	// Refused counts the units turned away: AllowN or TryAcquire that
	// said no, a ReserveN that was not OK, a WaitN or Acquire that
	// returned an error (context ended, closed, above the burst).
	Refused uint64
	// Fallback is the total time the resource ran without a valid lease,
	// on its failure mode's capacity (Status.Source other than
	// SourceLease), including the moments before its first lease.
	Fallback time.Duration
}

// Usage returns the usage of every open resource, ordered by id.
func (a *Agent) Usage() []Usage {
	t := clock.Now(a.o.clock)
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Usage, 0, len(a.res))
	for _, r := range a.res {
		u := Usage{Status: r.statusLocked(), Admitted: r.use.admitted.Load(), Refused: r.use.refused.Load(), Fallback: r.use.fallback}
		if !r.use.since.IsZero() {
			u.Fallback += t.Sub(r.use.since)
		}
		out = append(out, u)
	}
	slices.SortFunc(out, func(x, y Usage) int { return cmp.Compare(x.ResourceID, y.ResourceID) })
	return out
}

// usage is a resource's share of Usage. The counters are updated by the
// limiters without the agent's lock; since and fallback are guarded by
// Agent.mu.
type usage struct {
	admitted, refused atomic.Uint64
	since             time.Time     // when the current run without a lease began; zero on a lease
	fallback          time.Duration // earlier runs without a lease
}

// count records the outcome of a limiter call for n units; r may be nil
// (a limiter built in tests).
func (r *resource) count(n int, ok bool) {
	if r == nil || n <= 0 {
		return
	}
	if ok {
		r.use.admitted.Add(uint64(n))
	} else {
		r.use.refused.Add(uint64(n))
	}
}

// sourceLocked notes that r's capacity comes from src from time t on.
func (r *resource) sourceLocked(src Source, t time.Time) {
	switch {
	case src == SourceLease && !r.use.since.IsZero():
		r.use.fallback += t.Sub(r.use.since)
		r.use.since = time.Time{}
	case src != SourceLease && r.use.since.IsZero():
		r.use.since = t
	}
}
