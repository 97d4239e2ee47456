package agent

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
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
	tmpl := testTemplate("*", 1000)
	set := config.NewSet(1, []*config.Template{tmpl}, nil)
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
			// after it.
			if subjects.LeasePartition(st.ResourceID, n) != 2 && !st.Expiry.After(stopped.Add(tmpl.LeaseLength)) {
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
	// Short leases: the restarted coordinator learns until the two
	// partitions' leases have ended before it grants.
	tmpl := expiringTemplate("*", 1000)
	set := config.NewSet(1, []*config.Template{tmpl}, nil)
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
				if st := l.Status(); !st.Leased || st.Granted != 10 || !st.Expiry.After(since.Add(tmpl.LeaseLength)) {
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

// A partition whose coordinator takes requests and never answers (frozen,
// or killed before its server noticed) holds up only its own resources:
// another partition's lease is installed when its answer comes, not once
// the silent partition's request has timed out. Installed only then, a
// lease shorter than twice the request time-out lapsed between refreshes
// although every refresh of its partition was answered.
func TestSilentPartitionDoesNotDelayTheOthers(t *testing.T) {
	const n = 2
	s := natstest.Server(t)
	owned := func(p int) string {
		for i := 0; ; i++ {
			if id := fmt.Sprint("r-", i); subjects.LeasePartition(id, n) == p {
				return id
			}
		}
	}
	live, silent := owned(0), owned(1)
	// The node's plain subjects and partition 0 answer every resource
	// asked with a lease; the plain one says the node has two
	// partitions, with leases that end before partition 0's.
	answer := func(lease time.Duration) nats.MsgHandler {
		return func(m *nats.Msg) {
			if strings.HasSuffix(m.Subject, ".release") {
				_ = m.Respond(nil) // an empty ReleaseCapacityResponse
				return
			}
			var req allotpb.GetCapacityRequest
			if err := proto.Unmarshal(m.Data, &req); err != nil {
				return
			}
			resp := &allotpb.GetCapacityResponse{Term: 1}
			for _, r := range req.GetResource() {
				resp.Response = append(resp.Response, &allotpb.ResourceResponse{ResourceId: r.GetResourceId(), Gets: &allotpb.Lease{
					Capacity: r.GetWants(), ExpiryTime: timestamppb.New(time.Now().Add(lease)), RefreshInterval: durationpb.New(time.Second)}})
			}
			data, _ := proto.Marshal(resp)
			_ = m.RespondMsg(&nats.Msg{Data: data, Header: nats.Header{wire.HeaderLeasePartitions: {fmt.Sprint(n)}}})
		}
	}
	const plainLease, liveLease = 5 * time.Second, time.Hour
	nc := natstest.Conn(t, s)
	var mu sync.Mutex
	var held []*nats.Msg // partition 1's requests, answered only when the test ends
	asked := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(held) > 0
	}
	for subj, h := range map[string]nats.MsgHandler{
		"allot.root.capacity.*":     answer(plainLease),
		"allot.root.capacity.p.0.*": answer(liveLease),
		"allot.root.capacity.p.1.*": func(m *nats.Msg) {
			if strings.HasSuffix(m.Subject, ".release") {
				_ = m.Respond(nil) // an empty ReleaseCapacityResponse: Close is not held up
				return
			}
			mu.Lock()
			defer mu.Unlock()
			held = append(held, m)
		},
	} {
		if _, err := nc.Subscribe(subj, h); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	a := newAgent(t, natstest.Conn(t, s), WithClientID("a"), WithRequestTimeout(time.Minute))
	t.Cleanup(func() { // before the agent closes: its loop waits for these
		mu.Lock()
		defer mu.Unlock()
		for _, m := range held {
			answer(plainLease)(m)
		}
	})
	var lims []*RateLimiter
	for _, id := range []string{live, silent} {
		lim, err := a.Rate(id, WithWants(10))
		if err != nil {
			t.Fatal(err)
		}
		lims = append(lims, lim)
	}
	poll.Until(t, 20*time.Second, "partition 1 asked on its own subject", asked)
	poll.Until(t, 20*time.Second, "partition 0's lease installed while partition 1 has not answered", func() bool {
		st := lims[0].Status()
		return st.Leased && st.Expiry.After(time.Now().Add(plainLease))
	})
	if st := lims[1].Status(); st.Expiry.After(time.Now().Add(plainLease)) {
		t.Fatalf("the silent partition's resource got partition 0's lease: %+v", st)
	}
}
