package coordinator_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/allot/allot/coordinator"
	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/internal/coordtest"
	"github.com/allot/allot/internal/natstest"
	"github.com/allot/allot/internal/poll"
	"github.com/allot/allot/internal/sources"
	"github.com/allot/allot/internal/wire"
	"github.com/allot/allot/proto/allotpb"
)

// treeClient asks node for resource r like an agent: reporting the lease
// it holds.
type treeClient struct {
	nc   *nats.Conn
	node string
	id   string
	has  *allotpb.Lease
}

func (c *treeClient) ask(t *testing.T, wants float64) float64 {
	t.Helper()
	data, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: c.id, Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: wants, Has: c.has}}})
	msg := nats.NewMsg(coordinator.Subject(c.node, "capacity.get"))
	msg.Data = data
	msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
	m, err := c.nc.RequestMsg(msg, answerWithin)
	if err != nil {
		t.Fatalf("%s at %s: %v", c.id, c.node, err)
	}
	if code := m.Header.Get("Nats-Service-Error-Code"); code != "" {
		t.Fatalf("%s at %s: error %s: %s", c.id, c.node, code, m.Header.Get("Nats-Service-Error"))
	}
	var resp allotpb.GetCapacityResponse
	if err := proto.Unmarshal(m.Data, &resp); err != nil {
		t.Fatal(err)
	}
	c.has = resp.GetResponse()[0].GetGets()
	return c.has.GetCapacity()
}

func treeTemplates(capacity float64) coordinator.TemplateSource {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: capacity, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: 500 * time.Millisecond, LearningModeDuration: 10 * time.Second}
	return sources.StaticTemplates(config.NewSet(1, []*config.Template{tm}, nil))
}

// Two levels over a real leaf-node connection: capacity 100, two clients
// at the root and three at the child, all wanting 50, get 20 each; the
// sum of the leases never exceeds 100 on the way.
func TestTwoLevelsShareFairly(t *testing.T) {
	root := natstest.Root(t, "root")
	child := natstest.Child(t, "child", root)
	rnc, cnc := natstest.Conn(t, root.Server), natstest.Conn(t, child.Server)
	coordtest.Start(t, rnc, coordinator.Options{Node: "root", Templates: treeTemplates(100), RoundInterval: 5 * time.Millisecond})
	coordtest.Start(t, cnc, coordinator.Options{Node: "child", Parent: "root", Templates: treeTemplates(100), RoundInterval: 5 * time.Millisecond})

	var clients []*treeClient
	for i := range 2 {
		clients = append(clients, &treeClient{nc: rnc, node: "root", id: fmt.Sprint("r", i)})
	}
	for i := range 3 {
		clients = append(clients, &treeClient{nc: cnc, node: "child", id: fmt.Sprint("c", i)})
	}
	// The first request at the child is served within about one round
	// trip to the parent: it gets capacity at once.
	if got := clients[2].ask(t, 50); got <= 0 {
		t.Fatalf("first request at the child got %v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		sum, fair := 0.0, true
		for _, c := range clients {
			got := c.ask(t, 50)
			sum += got
			fair = fair && math.Abs(got-20) < 1e-6
		}
		if sum > 100+1e-9 {
			t.Fatalf("leases sum to %v of 100", sum)
		}
		if fair {
			return
		}
		select {
		case <-ctx.Done():
			var got []float64
			for _, c := range clients {
				got = append(got, c.has.GetCapacity())
			}
			t.Fatalf("shares did not settle at 20 each: %v", got)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// heldTable records what each client holds: its lease, and the safe
// capacity it falls back to once the lease ends.
type heldTable struct {
	mu  sync.Mutex
	cap map[string]*allotpb.Lease
	saf map[string]float64
}

func (h *heldTable) sum(now time.Time) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := 0.0
	for id, l := range h.cap {
		if l.GetExpiryTime().AsTime().After(now) {
			s += l.GetCapacity()
		} else {
			s += h.saf[id] // Safe mode: the safe capacity it was told
		}
	}
	return s
}

// run asks node every refresh interval, reporting what it holds, and
// records its lease, until ctx ends.
func (h *heldTable) run(ctx context.Context, nc *nats.Conn, node, id string, wants float64) {
	var has *allotpb.Lease
	for ctx.Err() == nil {
		data, _ := proto.Marshal(&allotpb.GetCapacityRequest{ClientId: id, Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: wants, Has: has}}})
		msg := nats.NewMsg(coordinator.Subject(node, "capacity.get"))
		msg.Data = data
		msg.Header.Set(wire.HeaderContentType, wire.ContentProtobuf)
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := nc.RequestMsgWithContext(rctx, msg)
		cancel()
		wait := 100 * time.Millisecond
		if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
			var resp allotpb.GetCapacityResponse
			if proto.Unmarshal(m.Data, &resp) == nil && len(resp.GetResponse()) == 1 && resp.GetResponse()[0].GetGets() != nil {
				has = resp.GetResponse()[0].GetGets()
				h.mu.Lock()
				h.cap[id], h.saf[id] = has, resp.GetResponse()[0].GetSafeCapacity()
				h.mu.Unlock()
				wait = has.GetRefreshInterval().AsDuration()
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// Three levels over real leaf connections, with the middle level run by
// two elected replicas: its leader is lost abruptly, then its leaf link
// to the root is cut and restored. The leases (and safe capacities, once
// leases end) that clients at every level hold never sum above the
// root's capacity, and the capacity is handed out again afterwards.
func TestThreeLevelsLeaderLossAndCutLink(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 15 s")
	}
	root := natstest.Root(t, "root")
	region := natstest.Child(t, "region", root)
	cluster := natstest.Child(t, "cluster", region)
	tmpls := treeTemplates(90)
	rnc := natstest.Conn(t, root.Server)
	coordtest.Start(t, rnc, coordinator.Options{Node: "root", Templates: tmpls, RoundInterval: 5 * time.Millisecond})
	var conns []*nats.Conn
	var reps []*coordinator.Replica
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 {
		nc := natstest.Conn(t, region.Server)
		conns = append(conns, nc)
		r, err := coordinator.NewReplica(nc, coordinator.ReplicaOptions{Options: coordinator.Options{Node: "region", Parent: "root",
			ServerID: fmt.Sprint("region-", i), Templates: tmpls, RoundInterval: 5 * time.Millisecond, ClockSkew: coordinator.NoClockSkew}})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	cnc := natstest.Conn(t, cluster.Server)
	coordtest.Start(t, cnc, coordinator.Options{Node: "cluster", Parent: "region", Templates: tmpls, RoundInterval: 5 * time.Millisecond})

	h := &heldTable{cap: map[string]*allotpb.Lease{}, saf: map[string]float64{}}
	cctx, stopClients := context.WithCancel(ctx)
	var wg sync.WaitGroup
	clients := []struct {
		nc   *nats.Conn
		node string
	}{{rnc, "root"}, {rnc, "root"}, {natstest.Conn(t, region.Server), "region"}, {natstest.Conn(t, region.Server), "region"}, {cnc, "cluster"}, {cnc, "cluster"}}
	for i, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); h.run(cctx, c.nc, c.node, fmt.Sprint(c.node, "-", i), 20) }()
	}
	defer func() { stopClients(); wg.Wait() }()

	maxSum := 0.0
	sample := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			maxSum = max(maxSum, h.sum(time.Now()))
		}
	}
	sample(3 * time.Second)
	// Lose the middle level's leader abruptly: the other replica takes over.
	// (On a loaded machine a leader may just have lapsed: wait for one.)
	poll.Until(t, 10*time.Second, "a replica of the region serving", func() bool {
		for i, r := range reps {
			if r.Status().Serving {
				conns[i].Close()
				return true
			}
		}
		sample(50 * time.Millisecond)
		return false
	})
	sample(6 * time.Second)
	region.Cut(t)
	sample(3 * time.Second)
	region.Restore(t)
	sample(5 * time.Second)
	if maxSum > 90*(1+1e-9) {
		t.Fatalf("clients held %v of the root's 90 at the worst moment", maxSum)
	}
	t.Logf("max held ÷ capacity: %.4f", maxSum/90)
	if got := h.sum(time.Now()); got < 90*0.9 {
		t.Fatalf("after recovery clients hold %v of 90 (all want 20 each)", got)
	}
}
