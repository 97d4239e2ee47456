package coordinator_test

import (
	"fmt"
	"testing"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/subjects"
)

// A node restarted with another number of lease partitions while leases
// issued under the old number are live must not grant them again: the
// partition that now owns a resource learns (as after an unknown
// predecessor) whether its own key holds no record (1 → 2: the old
// leases are under <node>.leases) or a record written under the old
// number, which lists only the resources that partition owned then
// (4 → 2). Both once took the node for a new deployment, or the record
// for complete, and granted the whole capacity again: 200 of 100.
func TestLeasePartitionsChangeLearns(t *testing.T) {
	const id = "api" // partition 3 of 4, 1 of 2 (subjects.md's vectors)
	for _, tc := range []struct {
		name     string
		from, to int
		// also lists the old partitions whose coordinators ran beside the
		// owner's, so that their records exist.
		also []int
	}{
		{"1-to-2", 1, 2, nil},
		{"4-to-2", 4, 2, []int{1}},
		{"2-to-1", 2, 1, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			start := func(p, n int, term uint64) *coordinator.Coordinator {
				return coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", Partition: p, Partitions: n, Term: term,
					Templates: treeTemplates(100), ClockSkew: coordinator.NoClockSkew})
			}
			want := func(client string, n int) float64 {
				t.Helper()
				p := subjects.LeasePartition(id, n)
				m := ask(t, nc, subjects.LeaseSubject("root", "capacity.get", p, n),
					fmt.Sprintf(`{"client_id":%q,"resource":[{"resource_id":%q,"wants":100}]}`, client, id))
				_, caps := grants(t, m)
				return caps[0]
			}

			var old []*coordinator.Coordinator
			old = append(old, start(subjects.LeasePartition(id, tc.from), tc.from, 1))
			for _, p := range tc.also {
				old = append(old, start(p, tc.from, 1))
			}
			if got := want("a", tc.from); got != 100 {
				t.Fatalf("first client got %v of 100", got)
			}
			if tc.also != nil {
				// The other old partition serves a resource of its own, so
				// its record lists something.
				other := ownedBy(tc.also[0], tc.from)
				m := ask(t, nc, subjects.LeaseSubject("root", "capacity.get", tc.also[0], tc.from), getBody("c", other))
				grants(t, m)
			}
			for _, c := range old {
				c.Stop()
			}
			nc.Flush()

			// The new partitioning, while a's lease of 100 (10 s) is live.
			for p := range tc.to {
				start(p, tc.to, 2)
			}
			if got := want("b", tc.to); got != 0 {
				t.Errorf("after %d → %d partitions a second client got %v while the first holds 100 of 100", tc.from, tc.to, got)
			}
		})
	}
}
