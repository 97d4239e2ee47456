package coordinator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/allot/allot/internal/election"
	"github.com/allot/allot/status"
)

// Views of the ledger's state, for operators' tools (the dashboard):
// the status package's types.
type (
	// ResourceView describes one resource: capacity, granted, wants,
	// claimants, learning mode and the lease record's ceiling, and on a
	// child node its lease from the parent.
	ResourceView = status.ResourceView
	// ResourceDetail is a ResourceView with its largest claimants.
	ResourceDetail = status.ResourceDetail
	// ClaimantView describes one claimant of a resource.
	ClaimantView = status.ClaimantView
	// ChildView is a child node's claim on a resource, over its bands.
	ChildView = status.ChildView
)

// Snapshot limits.
const (
	// MaxSnapshotClaimants bounds the claimants a Snapshot lists.
	MaxSnapshotClaimants = status.MaxSnapshotClaimants
	// SnapshotResources is how many resources a Snapshot lists (those
	// with the most outstanding).
	SnapshotResources = status.SnapshotResources
	// MaxSnapshotSearch bounds the length of a Snapshot's search string.
	MaxSnapshotSearch = status.MaxSnapshotSearch
)

// Snapshot is a coordinator's state at one instant, taken on its round
// loop: nothing in it is torn between rounds (status.Snapshot).
type Snapshot = status.Snapshot

// snapshotListAge is how long a snapshot's resource list is reused.
const snapshotListAge = 500 * time.Millisecond

// snapState is the Coordinator's part for snapshots: the requests' way
// to the round loop, and the resource list of a recent snapshot (owned by
// the round loop).
type snapState struct {
	q     chan snapRequest
	at    time.Time
	views []ResourceView
	count int
}

// ErrNotServing is returned by Snapshot when the coordinator is not
// running its round loop (not started, or stopped).
var ErrNotServing = errors.New("coordinator: not serving")

// snapRequest asks the round loop for a snapshot.
type snapRequest struct {
	resource string
	topN     int
	search   string
	out      chan *Snapshot
}

// Snapshot returns the coordinator's state, taken on its round loop
// between rounds: the resources with the most outstanding and, if
// resource is not empty, that resource's detail with at most topN of its
// claimants whose id contains search (ignoring case), the largest leases
// first. Call it after Start; it waits for the current round, so it is
// cheap but not free: once a second per viewer is the intended rate.
func (c *Coordinator) Snapshot(ctx context.Context, resource string, topN int, search string) (*Snapshot, error) {
	switch {
	case topN < 0 || topN > MaxSnapshotClaimants:
		return nil, fmt.Errorf("coordinator: snapshot of %d claimants: want 0 to %d", topN, MaxSnapshotClaimants)
	case len(search) > MaxSnapshotSearch:
		return nil, fmt.Errorf("coordinator: snapshot search of %d bytes: at most %d", len(search), MaxSnapshotSearch)
	case c.done == nil:
		return nil, ErrNotServing
	}
	q := snapRequest{resource: resource, topN: topN, search: search, out: make(chan *Snapshot, 1)}
	select {
	case c.snap.q <- q:
	case <-c.done:
		return nil, ErrNotServing
	case <-ctx.Done():
		return nil, fmt.Errorf("coordinator: snapshot: %w", ctx.Err())
	}
	// The loop answers before it takes anything else.
	s := <-q.out
	serving, failure := c.serving()
	s.Serving = serving
	if failure != nil {
		s.Failure = failure.Error()
	}
	if st, ok := c.opts.Templates.(StatusSource); ok {
		s.Config = st.Status()
	}
	return s, nil
}

// snapshot answers q; it runs on the round loop, which owns the ledger.
func (c *Coordinator) snapshot(q snapRequest) {
	now := c.now()
	s := &Snapshot{Time: now.UTC(), Node: c.opts.Node, ServerID: c.opts.ServerID, Term: c.Term(), Parent: c.opts.Parent}
	if c.up != nil {
		s.ParentError = c.up.lastErr
		if !c.up.lastOK.IsZero() {
			s.ParentLastOK = c.up.lastOK.UTC()
		}
	}
	// The list costs a pass over every client record (about 6 ms for
	// 100,000): viewers within snapshotListAge share one.
	if l := &c.snap; l.at.IsZero() || now.Sub(l.at) >= snapshotListAge || now.Before(l.at) {
		l.views, l.count = c.ledger.Resources(now.UnixNano(), SnapshotResources)
		l.at = now
		if c.opts.Shadow { // every resource is shadow, whatever its template says
			for i := range l.views {
				l.views[i].Shadow = true
			}
		}
	}
	s.Resources, s.ResourceCount = c.snap.views, c.snap.count
	s.Clients = c.ledger.Stats().Clients
	if q.resource != "" {
		if d, ok := c.ledger.Detail(now.UnixNano(), q.resource, q.topN, q.search); ok {
			d.Shadow = d.Shadow || c.opts.Shadow
			s.Resource = &d
		}
	}
	q.out <- s
}

// Snapshot returns the state of the replica's coordinator while it leads
// (see Coordinator.Snapshot), with its role and leader; a follower's has
// its role, leader and term and no resources.
func (r *Replica) Snapshot(ctx context.Context, resource string, topN int, search string) (*Snapshot, error) {
	st := r.Status()
	c := r.coordinator()
	var s *Snapshot
	if c != nil {
		var err error
		if s, err = c.Snapshot(ctx, resource, topN, search); err != nil && !errors.Is(err, ErrNotServing) {
			return nil, err
		}
	}
	if s == nil {
		s = &Snapshot{Time: r.opts.Now().UTC(), Node: st.Node, ServerID: st.ServerID, Parent: st.Parent, Failure: st.Failure, Config: st.Config}
	}
	s.Role, s.Leader, s.Term = string(st.Role), st.Leader, st.Term
	s.Serving = s.Serving && st.Serving
	if st.Role != election.RoleLeader {
		s.Serving = false
	}
	return s, nil
}
