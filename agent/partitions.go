package agent

import (
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/allot/allot/agent/internal/clock"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// A node may spread its resources over several lease partitions, each
// with its own elected coordinator and subjects (subjects.md, "Lease
// partitions"). Every reply of such a coordinator says how many
// (Allot-Lease-Partitions); the agent starts on the node's plain subjects
// (which partition 0 relays) and, once told, sends each partition only
// the resources it owns, keeping each partition's term apart: a
// partition whose coordinator is down affects only its own resources.

// partState is what the agent keeps of one lease partition: the highest
// term seen and how many refreshes in a row were answered only below it
// (see staleTermLimit).
type partState struct {
	term  uint64
	stale int
}

// leaseSubjects are the subjects of one lease partition.
type leaseSubjects struct{ get, refresh, release string }

// subjects returns partition p of n's subjects.
func (a *Agent) subjects(p, n int) leaseSubjects {
	if n <= 1 {
		return leaseSubjects{a.getSubj, a.refreshSubj, a.relSubj}
	}
	return leaseSubjects{
		get:     subjects.LeaseSubject(a.o.node, "capacity.get", p, n),
		refresh: subjects.LeaseSubject(a.o.node, "capacity.refresh", p, n),
		release: subjects.LeaseSubject(a.o.node, "capacity.release", p, n),
	}
}

// leaseCall is one GetCapacity request of a refresh: partition part's
// resources sent (sorted by id) and its outcome.
type leaseCall struct {
	part int
	sent []*resource
	req  *allotpb.GetCapacityRequest
	resp *allotpb.GetCapacityResponse
	err  error
}

// identified is what partitionGroups splits: resources or their ids.
type identified interface{ *resource | string }

func idOf[T identified](x T) string {
	switch v := any(x).(type) {
	case *resource:
		return v.id
	default:
		return v.(string)
	}
}

// partitionGroups returns, for each of n partitions, the positions in
// items of those it owns, in order (so a sorted list stays sorted).
func partitionGroups[T identified](items []T, n int) [][]int {
	n = max(n, 1)
	out := make([][]int, n)
	for i, x := range items {
		p := subjects.LeasePartition(idOf(x), n)
		out[p] = append(out[p], i)
	}
	return out
}

// learnPartitions takes the partition count a reply's headers say (none:
// one). When it changed, the next refresh comes early and sends each
// partition its own resources.
func (a *Agent) learnPartitions(h nats.Header) {
	if h == nil {
		return // no reply
	}
	n := 1
	if v := h.Get(wire.HeaderLeasePartitions); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > subjects.MaxLeasePartitions {
			return // not a count a coordinator sends
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n == a.nparts {
		return
	}
	a.log.Info("allot: the node's lease partitions changed", "node", a.o.node, "from", a.nparts, "to", n)
	a.nparts, a.terms = n, make([]partState, n)
	a.scheduleEarlyLocked(clock.Now(a.o.clock))
}
