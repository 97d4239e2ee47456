package coordinator_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/proto/allotpb"
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
				return startRoot(t, s, treeTemplates(100), p, n, term)
			}
			want := func(client string, n int) float64 { t.Helper(); return wantAll(t, nc, client, id, n) }

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

// Changing the number of lease partitions and changing it back must not
// grant leases of the middle partitioning again. The first partitioning's
// records stay in the state bucket (nothing of the middle one rewrites
// <node>.leases after 1 → 2, or <node>.leases.2 and .3 after 4 → 2), and
// when the node returns to that number a partition finds a record of its
// own under its own key, written under the same number, whose horizon
// passed long ago: it takes it for the truth, skips learning and grants
// the whole capacity while the middle partitioning's lease is live.
func TestLeasePartitionsChangeBackLearns(t *testing.T) {
	const id = "api" // partition 3 of 4, 1 of 2
	for _, tc := range []struct {
		name  string
		steps [3]int
	}{
		{"1-to-2-to-1", [3]int{1, 2, 1}},
		{"2-to-1-to-2", [3]int{2, 1, 2}},
		{"4-to-2-to-4", [3]int{4, 2, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			// A short learning period, so that the middle partitioning,
			// which learns after the first, soon grants.
			tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
				LeaseLength: 10 * time.Second, RefreshInterval: 500 * time.Millisecond, LearningModeDuration: time.Second}
			templates := sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil))
			era := func(n int, term uint64) []*coordinator.Coordinator {
				var cs []*coordinator.Coordinator
				for p := range n {
					cs = append(cs, startRoot(t, s, templates, p, n, term))
				}
				return cs
			}
			get := func(client string, n int) float64 { t.Helper(); return wantAll(t, nc, client, id, n) }
			stop := func(cs []*coordinator.Coordinator) {
				for _, c := range cs {
					c.Stop()
				}
				nc.Flush()
			}

			// The first partitioning leaves a record under every key of its
			// own; no client holds anything.
			stop(era(tc.steps[0], 1))

			// The middle one learns, then grants b the whole capacity for
			// a lease of 10 s.
			mid := era(tc.steps[1], 2)
			poll.Until(t, 20*time.Second, "the middle partitioning to grant b the capacity", func() bool { return get("b", tc.steps[1]) == 100 })
			stop(mid)

			// Back to the first number while b's lease is live.
			era(tc.steps[2], 3)
			if got := get("c", tc.steps[2]); got != 0 {
				t.Errorf("after %v partitions a second client got %v while the first holds 100 of 100", tc.steps, got)
			}
		})
	}
}

// wantAll asks root's owner partition of id (of n) for 100 of it for
// client, and returns the capacity granted.
func wantAll(t *testing.T, nc *nats.Conn, client, id string, n int) float64 {
	t.Helper()
	m := ask(t, nc, subjects.LeaseSubject("root", "capacity.get", subjects.LeasePartition(id, n), n),
		fmt.Sprintf(`{"client_id":%q,"resource":[{"resource_id":%q,"wants":100}]}`, client, id))
	_, caps := grants(t, m)
	return caps[0]
}

// subjects.md says that stopping the node for the longest lease length
// before changing the number of lease partitions avoids the learning
// period. It does not: a record of another number makes a partition learn
// whatever its horizon, so with every lease of the old number long ended
// (none was ever granted here) the new partitions still grant nothing for
// learning_mode_duration.
func TestLeasePartitionsChangeAfterHorizonSkipsLearning(t *testing.T) {
	const id = "api"
	for _, tc := range []struct {
		name     string
		from, to int
	}{
		{"1-to-2", 1, 2},
		{"4-to-2", 4, 2},
		{"2-to-1", 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := natstest.Server(t)
			nc := natstest.Conn(t, s)
			start := func(p, n int, term uint64) *coordinator.Coordinator {
				return startRoot(t, s, treeTemplates(100), p, n, term)
			}
			// The old partitioning writes its records (horizon: now, as
			// it grants nothing) and stops.
			for p := range tc.from {
				start(p, tc.from, 1).Stop()
			}
			nc.Flush()
			for p := range tc.to {
				start(p, tc.to, 2)
			}
			if got := wantAll(t, nc, "a", id, tc.to); got != 100 {
				t.Errorf("after %d → %d partitions with no lease outstanding the first client got %v of 100", tc.from, tc.to, got)
			}
		})
	}
}

// startRoot starts partition p of n of node root on s, serving term.
func startRoot(t *testing.T, s *server.Server, templates coordinator.TemplateSource, p, n int, term uint64) *coordinator.Coordinator {
	return coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", Partition: p, Partitions: n, Term: term,
		Templates: templates, ClockSkew: coordinator.NoClockSkew})
}
