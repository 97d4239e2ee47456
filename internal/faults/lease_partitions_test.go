package faults

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/agent"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/subjects"
	"github.com/allot/allot/proto/allotpb"
)

// partitionTally counts what each lease partition's leader is asked:
// requests and resources named, as a subscriber beside them sees them.
type partitionTally struct {
	requests, resources [4]atomic.Int64
}

func (pt *partitionTally) count(m *nats.Msg) {
	var p int
	var op string
	if _, err := fmt.Sscanf(m.Subject, "allot.root.capacity.p.%d.%s", &p, &op); err != nil || p < 0 || p >= 4 || op == "release" {
		return
	}
	var req allotpb.GetCapacityRequest
	if proto.Unmarshal(m.Data, &req) != nil {
		return
	}
	pt.requests[p].Add(1)
	pt.resources[p].Add(int64(len(req.GetResource())))
}

func (pt *partitionTally) reset() {
	for p := range 4 {
		pt.requests[p].Store(0)
		pt.resources[p].Store(0)
	}
}

// shares returns each partition's share of what counters counted.
func shares(counters *[4]atomic.Int64) (out [4]float64, total int64) {
	for p := range 4 {
		total += counters[p].Load()
	}
	for p := range 4 {
		out[p] = float64(counters[p].Load()) / float64(max(total, 1))
	}
	return out, total
}

// Four `allot coordinator` processes each lead one of four lease
// partitions of node root, a fifth stands by for all four; agents hold
// 1,000 resources. Each leader is asked about a quarter of the requests
// and of the resources. Partition 2's leader is killed with SIGKILL: the
// other partitions' resources stay leased and keep being refreshed all
// along, and the standby takes partition 2 over.
func TestLeasePartitionsKillOne(t *testing.T) {
	const (
		n         = 4
		resources = 1000
		agents    = 20
		lease     = 4 * time.Second
		refresh   = 500 * time.Millisecond
	)
	bin := BuildAllot(t)
	s := natstest.Server(t)
	nc := natstest.Conn(t, s)
	PutTemplate(t, nc, "lp", Template("r-*", 1e6, lease, refresh, ""))

	coordinatorArgs := func(id, serve string) []string {
		return []string{"coordinator", "--nats", s.ClientURL(), "--node", "root", "--server-id", id,
			"--lease-partitions", fmt.Sprint(n), "--lease-serve", serve, "--quota-serve", "none",
			"--election-ttl", ElectionTTL.String(), "--clock-skew", "0", "--metrics-addr", ""}
	}
	primaries := make([]*exec.Cmd, n)
	for p := range n {
		primaries[p], _, _ = StartProcess(t, fmt.Sprint("primary-", p), bin, coordinatorArgs(fmt.Sprint("primary-", p), fmt.Sprint(p))...)
	}
	for p := range n {
		subj := subjects.LeaseSubject("root", "capacity.get", p, n)
		poll.Until(t, 30*time.Second, "primary "+fmt.Sprint(p)+" serving "+subj, func() bool {
			m, err := nc.Request(subj, GetRequest("probe", ownedBy(p, n), 0), 2*time.Second)
			return err == nil && m.Header.Get("Nats-Service-Error-Code") == ""
		})
	}
	// Only now the standby: every partition's key is held, so it follows.
	StartProcess(t, "standby", bin, coordinatorArgs("standby", "all")...)

	tally := &partitionTally{}
	sub, err := nc.Subscribe("allot.root.capacity.p.*.*", tally.count)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	var lims []*agent.RateLimiter
	for a := range agents {
		ag, err := agent.New(natstest.Conn(t, s), agent.WithClientID(fmt.Sprint("agent-", a)), agent.WithLogger(TestLogger(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ag.Close() })
		for i := range resources / agents {
			lim, err := ag.Rate(fmt.Sprint("r-", a*resources/agents+i), agent.WithWants(1))
			if err != nil {
				t.Fatal(err)
			}
			lims = append(lims, lim)
		}
	}
	poll.Until(t, 60*time.Second, "every resource leased", func() bool {
		for _, l := range lims {
			if st := l.Status(); !st.Leased || st.Granted != 1 {
				return false
			}
		}
		return true
	})

	// Each leader's share, over some refreshes of every agent.
	tally.reset()
	poll.Until(t, 60*time.Second, "requests counted", func() bool {
		_, total := shares(&tally.requests)
		return total >= 20*agents*n
	})
	reqShares, reqTotal := shares(&tally.requests)
	resShares, resTotal := shares(&tally.resources)
	t.Logf("share of requests per partition %.3f (of %d), of resources named %.3f (of %d)", reqShares, reqTotal, resShares, resTotal)
	for p := range n {
		for what, sh := range map[string]float64{"requests": reqShares[p], "resources": resShares[p]} {
			if sh < 0.25*0.9 || sh > 0.25*1.1 {
				t.Errorf("partition %d's leader was asked %.3f of the %s, want a quarter ±10%%", p, sh, what)
			}
		}
	}

	// The others' resources stay leased throughout: sampled until the
	// killed partition is served again.
	var lapsed atomic.Value // the first lapse seen
	stopSampling := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			for _, l := range lims {
				if st := l.Status(); subjects.LeasePartition(st.ResourceID, n) != 2 && !st.Leased {
					lapsed.CompareAndSwap(nil, fmt.Sprintf("%s lapsed at %v: %+v", st.ResourceID, time.Now(), st))
				}
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	})
	if err := primaries[2].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	refreshedSince := func(own bool) func() bool {
		return func() bool {
			for _, l := range lims {
				st := l.Status()
				// A lease granted after the kill ends a lease length after it.
				if (subjects.LeasePartition(st.ResourceID, n) == 2) == own && (!st.Leased || !st.Expiry.After(killed.Add(lease))) {
					return false
				}
			}
			return true
		}
	}
	poll.Until(t, 30*time.Second, "the other partitions' resources refreshed after the kill", refreshedSince(false))
	poll.Until(t, 60*time.Second, "partition 2 taken over by the standby and its resources leased again", refreshedSince(true))
	close(stopSampling)
	wg.Wait()
	if v := lapsed.Load(); v != nil {
		t.Fatalf("a resource of a live partition lost its lease: %v", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := Get(ctx, nc, "probe-after", ownedBy(2, n), 1); err != nil {
		t.Fatalf("partition 2 after the takeover: %v", err)
	}
}

// ownedBy returns a resource id of the template that partition p of n owns.
func ownedBy(p, n int) string {
	for i := 0; ; i++ {
		if id := fmt.Sprint("r-probe-", i); subjects.LeasePartition(id, n) == p {
			return id
		}
	}
}
