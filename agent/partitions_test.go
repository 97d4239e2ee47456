package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/subjects"
)

// Against a node of four lease partitions, one coordinator each, the
// agent learns the partitions from the first (relayed) reply and then
// sends each partition its own resources: every partition is asked, none
// refuses a resource as another's, and every resource is leased. When
// one partition's coordinator stops, the others' resources keep being
// refreshed.
func TestLeasePartitions(t *testing.T) {
	const n = 4
	s := natstest.Server(t)
	set := config.NewSet(1, []*config.Template{testTemplate("*", 1000)}, nil)
	coords := make([]*coordinator.Coordinator, n)
	for p := range n {
		coords[p] = coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", Partition: p, Partitions: n,
			RoundInterval: 10 * time.Millisecond, Templates: sources.StaticTemplates(set), Logger: quiet})
	}
	watch := natstest.Conn(t, s)
	direct, err := watch.SubscribeSync("allot.root.capacity.p.*.*")
	if err != nil {
		t.Fatal(err)
	}

	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"))
	var lims []*RateLimiter
	for i := range 40 {
		lim, err := a.Rate(fmt.Sprint("r-", i), WithWants(10))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	poll.Until(t, 10*time.Second, "every resource leased from its partition", func() bool {
		for _, l := range lims {
			if st := l.Status(); !st.Leased || st.Granted != 10 {
				return false
			}
		}
		return a.LastError() == nil
	})
	asked := map[int]bool{}
	poll.Until(t, 10*time.Second, "every partition asked on its own subject", func() bool {
		for {
			m, err := direct.NextMsg(10 * time.Millisecond)
			if err != nil {
				break
			}
			var p int
			if _, err := fmt.Sscanf(m.Subject, "allot.root.capacity.p.%d.", &p); err == nil {
				asked[p] = true
			}
		}
		return len(asked) == n
	})

	// Partition 2 goes away: the others' leases are still refreshed.
	coords[2].Stop()
	stopped := time.Now()
	poll.Until(t, 10*time.Second, "the other partitions' leases refreshed after the stop", func() bool {
		for _, l := range lims {
			st := l.Status()
			// A lease granted after the stop ends a lease length
			// (testTemplate: 2s) after it.
			if subjects.LeasePartition(st.ResourceID, n) != 2 && !st.Expiry.After(stopped.Add(2*time.Second)) {
				return false
			}
		}
		return true
	})
	for _, l := range lims {
		if st := l.Status(); subjects.LeasePartition(st.ResourceID, n) != 2 && (!st.Leased || st.Granted != 10) {
			t.Fatalf("%s of a live partition: %+v", st.ResourceID, st)
		}
	}
}

// When the node drops its lease partitions (its coordinators restarted
// with one), nobody serves the partitions' subjects any more: the agent
// asks the node's plain subject, learns there is one partition, and its
// resources are leased again.
func TestLeasePartitionsDropped(t *testing.T) {
	s := natstest.Server(t)
	set := config.NewSet(1, []*config.Template{testTemplate("*", 1000)}, nil)
	var coords []*coordinator.Coordinator
	for p := range 2 {
		coords = append(coords, coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", Partition: p, Partitions: 2,
			Templates: sources.StaticTemplates(set), ClockSkew: coordinator.NoClockSkew, Logger: quiet}))
	}
	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"))
	var lims []*RateLimiter
	for i := range 6 {
		lim, err := a.Rate(fmt.Sprint("r-", i), WithWants(10))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	leasedAfter := func(since time.Time) func() bool {
		return func() bool {
			for _, l := range lims {
				// testTemplate's leases last 2s.
				if st := l.Status(); !st.Leased || st.Granted != 10 || !st.Expiry.After(since.Add(2*time.Second)) {
					return false
				}
			}
			return true
		}
	}
	poll.Until(t, 10*time.Second, "every resource leased from two partitions", leasedAfter(time.Time{}))
	poll.Until(t, 10*time.Second, "the agent told of two partitions", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.nparts == 2
	})
	for _, c := range coords {
		c.Stop()
	}
	restarted := time.Now()
	coordtest.Start(t, natstest.Conn(t, s), coordinator.Options{Node: "root", Templates: sources.StaticTemplates(set),
		ClockSkew: coordinator.NoClockSkew, Logger: quiet})
	poll.Until(t, 20*time.Second, "every resource leased again from one coordinator", leasedAfter(restarted))
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nparts != 1 {
		t.Fatalf("the agent still counts %d partitions", a.nparts)
	}
}
