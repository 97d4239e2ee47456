package ledger

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// TestIncrementalMatchesScratch: on random histories of a node (clients
// of tenants and plain ones asking at random priorities, child nodes'
// bands of random weights and priorities, releases, clients that go
// silent until their leases and floors end, template changes of
// algorithm, capacity, floors and tenant policy, failed and late record
// writes, leader changes with learning), after every round every running
// sum equals its from-scratch sum over the records and every client's
// target equals what internal/alloc (alloc.Run, or alloc.ByTenant with
// the tenant level) computes from scratch over the same demands.
func TestIncrementalMatchesScratch(t *testing.T) {
	t.Parallel()
	for seed := range uint64(30) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { incrTrial(t, seed) })
	}
}

// incrTemplate draws a template for the trial's resources.
func incrTemplate(rng *rand.Rand, gen uint64) *config.Set {
	kinds := []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE,
		allotpb.Algorithm_STATIC, allotpb.Algorithm_NO_ALGORITHM}
	tm := &config.Template{Name: "t", Glob: "*", Capacity: float64(rng.IntN(400)), Algorithm: kinds[rng.IntN(len(kinds))],
		LeaseLength: 3 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 3 * time.Second,
		Floor: config.FloorPolicy{Share: 0.5, Lease: time.Duration(1+rng.IntN(10)) * time.Second}}
	switch rng.IntN(4) {
	case 0:
		tm.Floor = config.FloorPolicy{Unlimited: true}
	case 1:
		tm.Floor = config.FloorPolicy{HasAbsolute: true, Absolute: float64(rng.IntN(10)), Lease: 5 * time.Second}
	}
	if rng.IntN(3) == 0 {
		tm.MaxPriority, tm.HasMaxPriority = int32(rng.IntN(3)), true
	}
	if sharedKind(tm.Algorithm) && rng.IntN(2) == 0 {
		tm.Tenants = &config.TenantPolicy{Fair: true, Weights: map[string]float64{"a": float64(1 + rng.IntN(3)), "b": 0.5}}
	}
	return config.NewSet(gen, []*config.Template{tm}, nil)
}

func incrTrial(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 17))
	gen := uint64(1)
	set := incrTemplate(rng, gen)
	now := int64(1e18)
	var rec *allotpb.LeaseHorizon
	term := uint64(0)
	var l *Ledger
	elect := func() {
		term++
		l = New(Config{HolderKey: termHolderKey(term), Node: "n", ServerID: fmt.Sprint("s", term), Term: term, ClockSkew: time.Second})
		prior := Prior{Kind: PriorNew}
		if rec != nil {
			prior = Prior{Kind: PriorRecord, Record: proto.Clone(rec).(*allotpb.LeaseHorizon), TermBound: term}
		}
		p, err := l.Start(now, prior)
		if err != nil {
			t.Fatal(err)
		}
		l.Commit(now, p, nil)
		rec = p.Record
	}
	elect()
	type cl struct {
		who   Claimant
		id    string
		res   string
		wants float64
		prio  int32
		lease Lease
		next  int64
	}
	var clients []*cl
	tenants := []string{"", "a", "b", "c"}
	for i := range 4 + rng.IntN(20) {
		c := &cl{id: fmt.Sprint("c", i), res: fmt.Sprint("r", rng.IntN(2)), wants: float64(rng.IntN(60)), prio: int32(rng.IntN(3))}
		if tn := tenants[rng.IntN(len(tenants))]; tn != "" {
			c.who = Claimant{Tenant: tn, User: "u"}
		}
		clients = append(clients, c)
	}
	var inflight *Proposal
	failing := false
	asked := map[*cl]Slot{}
	// bands is the band each client record's last request was applied
	// in (its priority, capped by the template then): the level.State
	// alone keeps it, so it is checked against the requests, not itself.
	bands := map[string]int32{}
	for step := range 600 {
		now += int64(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		switch ev := rng.IntN(100); {
		case ev < 3:
			gen++
			set = incrTemplate(rng, gen)
		case ev < 5:
			elect() // a leader change: the successor learns
			inflight = nil
		case ev < 8:
			failing = !failing
		case ev < 12:
			c := clients[rng.IntN(len(clients))]
			c.next = now + int64(time.Duration(rng.IntN(15))*time.Second) // silent a while
		case ev < 20:
			c := clients[rng.IntN(len(clients))]
			c.wants, c.prio = float64(rng.IntN(60)), int32(rng.IntN(3))
		}
		if inflight != nil && rng.IntN(2) == 0 {
			if failing {
				l.Commit(now, inflight, fmt.Errorf("injected"))
			} else {
				l.Commit(now, inflight, nil)
				rec = inflight.Record
			}
			inflight = nil
		}
		for _, c := range clients {
			if c.next > now {
				continue
			}
			if rng.IntN(25) == 0 {
				l.ReleaseAs(now, c.who, c.id, []string{c.res})
				delete(bands, c.res+"/"+c.who.key(c.id))
				c.lease = Lease{}
				c.next = now + int64(time.Second)
				continue
			}
			rr := &allotpb.ResourceRequest{ResourceId: c.res, Wants: c.wants, Priority: c.prio}
			if c.lease.Expiry != 0 {
				rr.Has = &allotpb.Lease{Capacity: c.lease.Capacity, ExpiryTime: timestamppb.New(time.Unix(0, c.lease.Expiry))}
			}
			if c.lease.SafeCapacity > 0 && c.lease.SafeExpiry > now {
				rr.Safe = &allotpb.Lease{Capacity: c.lease.SafeCapacity, ExpiryTime: timestamppb.New(time.Unix(0, c.lease.SafeExpiry))}
			}
			slots, err := l.GetAs(now, set, c.who, &allotpb.GetCapacityRequest{ClientId: c.id, Resource: []*allotpb.ResourceRequest{rr}})
			if err != nil {
				t.Fatal(err)
			}
			asked[c] = slots[0]
			if slots[0].Served() {
				bands[c.res+"/"+c.who.key(c.id)] = l.priority(set.Match(c.res), c.who, c.prio)
			}
		}
		// Two child nodes, each with a few bands of random weight.
		for ch := range 2 {
			if rng.IntN(4) != 0 {
				continue
			}
			req := &allotpb.GetServerCapacityRequest{ServerId: fmt.Sprint("child", ch)}
			rr := &allotpb.ServerCapacityResourceRequest{ResourceId: "r0", Outstanding: float64(rng.IntN(20)), SafeOutstanding: float64(rng.IntN(5)),
				SafeExpiryTime: timestamppb.New(time.Unix(0, now+int64(rng.IntN(5))*int64(time.Second)))}
			for b := range 1 + rng.IntN(3) {
				rr.Wants = append(rr.Wants, &allotpb.PriorityBandAggregate{Priority: int32(b), NumClients: int64(1 + rng.IntN(50)), Wants: float64(rng.IntN(100))})
			}
			req.Resource = append(req.Resource, rr)
			if _, err := l.ServerGet(now, set, req); err != nil {
				t.Fatal(err)
			}
		}
		if p := l.Propose(now); p != nil {
			inflight = p
		}
		l.Allocate(now)
		for c, s := range asked {
			if Ready([]Slot{s}) {
				c.lease = s.Lease(now)
				c.next = now + int64(max(c.lease.Refresh, 50*time.Millisecond))
			} else {
				c.next = now + int64(100*time.Millisecond)
			}
		}
		clear(asked)
		l.EndRound()
		checkLedger(t, l, now)
		for rid, r := range l.resources {
			for i := range r.clients.len() {
				c := r.clients.at(i)
				if want, ok := bands[rid+"/"+c.id]; ok && r.priority(c) != want {
					t.Fatalf("step %d %s: %q in band %d, its last request was applied in %d", step, rid, c.id, r.priority(c), want)
				}
			}
		}
		if step%10 == 0 && inflight == nil {
			inflight = l.Sweep(now)
			checkLedger(t, l, now)
		}
	}
}
