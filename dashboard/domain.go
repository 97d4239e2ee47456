package dashboard

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/allot/allot/status"
	"github.com/nats-io/nats.go"
)

// DomainPartition is one serving partition of the node's domain limits
// (docs/domains.md) as its leader's micro STATS report it
// (status.Domain).
type DomainPartition struct {
	Partition int `json:"partition"`
	// ServerID is the leader's; Term its leadership term.
	ServerID string `json:"server_id"`
	Term     uint64 `json:"term"`
	// Learning is true while the leader learns the live holds from their
	// holders' refreshes (until LearningUntil) and grants no copies.
	Learning      bool      `json:"learning"`
	LearningUntil time.Time `json:"learning_until,omitzero"`
	// Resources is how many resources the leader keeps state for.
	Resources int `json:"resources"`
	// Holds counts live holds; CopiesHeld sums their copies, staged
	// transfers included.
	Holds      int   `json:"holds"`
	CopiesHeld int64 `json:"copies_held"`
	// Transfers counts staged transfers, not yet seized.
	Transfers int `json:"transfers"`
	// Counts are the leader's event counters (requests, hits granted,
	// reserves refused, holds expired, …) since its term began.
	Counts status.DomainCounts `json:"counts"`
}

// gatherDomain asks every instance of status.DomainService (a domain
// partition's leader) for its STATS and returns the partitions of node
// that serve, sorted by partition. No answer is no partitions, not an
// error.
func gatherDomain(ctx context.Context, nc *nats.Conn, node string, wait time.Duration) ([]DomainPartition, error) {
	sts, err := collectStats(ctx, nc, status.DomainService, wait, func(st *status.Domain) bool { return st.Node == node && st.Serving })
	out := make([]DomainPartition, 0, len(sts))
	for _, st := range sts {
		out = append(out, DomainPartition{Partition: st.Partition, ServerID: st.ServerID, Term: st.Term,
			Learning: st.Learning, LearningUntil: st.LearnUntil, Resources: st.Resources, Holds: st.Holds,
			CopiesHeld: st.CopiesHeld, Transfers: st.Transfers, Counts: st.DomainCounts})
	}
	slices.SortFunc(out, func(a, b DomainPartition) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.ServerID, b.ServerID))
	})
	return out, err
}
