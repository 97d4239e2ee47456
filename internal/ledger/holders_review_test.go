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

// promiseOf is one resource's holder promise in a record that may be
// durable: its set (from scratch at the proposal) and end.
type promiseOf struct {
	set   map[string]bool
	until int64
}

// sentRecord is a proposal whose record may be (or become) the stored one.
type sentRecord struct {
	rec      *allotpb.LeaseHorizon
	promises map[string]promiseOf
}

// Over random histories that also sweep (shrink's writes), change the
// template (lease length, algorithm, priorities), ask with priorities and
// release, every lease a client actually holds is listed by every holder
// promise that may be durable and still runs, and a successor started
// from any record that may be stored never ends learning early while a
// client that holds a live lease has not come back.
func TestHolderPromisesCoverLeasesHeld(t *testing.T) {
	defer func() { t.Logf("%d successor checks after learning ended early, %d takeovers", earlyEnds, takeovers) }()
	for seed := range uint64(60) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { coverTrial(t, seed) })
	}
}

func coverTrial(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	tmpl := func(k int) *config.Template {
		algs := []allotpb.Algorithm_Kind{allotpb.Algorithm_FAIR_SHARE, allotpb.Algorithm_PROPORTIONAL_SHARE, allotpb.Algorithm_FAIR_SHARE}
		lls := []time.Duration{2 * time.Second, time.Second, 4 * time.Second}
		tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: algs[k%len(algs)],
			LeaseLength: lls[k%len(lls)], RefreshInterval: 500 * time.Millisecond, LearningModeDuration: 5 * time.Second}
		if k%3 != 2 {
			tm.Floor = config.FloorPolicy{Share: 0.5, Lease: time.Duration(1+k%3) * 1500 * time.Millisecond}
		}
		if k%2 == 1 {
			tm.MaxPriority, tm.HasMaxPriority = 1, true
		}
		return tm
	}
	gen := uint64(1)
	set := config.NewSet(gen, []*config.Template{tmpl(0)}, nil)
	now := int64(1e18)
	cfg := Config{HolderKey: testHolderKey(), Node: "n", ServerID: "s", Term: 1, ClockSkew: 100 * time.Millisecond}
	l := New(cfg)
	p, err := l.Start(now, Prior{Kind: PriorNew})
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(now, p, nil)
	resources := []string{"r0", "r1", "r2"}
	clients := make([]string, 6+int(seed%4)*8)
	for i := range clients {
		clients[i] = fmt.Sprint("c", i)
	}
	holds := map[string]heldLease{} // client/resource: its lease, as answered
	var durable []*sentRecord       // records that may be the stored one
	var inflight *Proposal
	var inflightRec *sentRecord
	maxNow := now
	send := func(prop *Proposal) {
		sr := &sentRecord{rec: proto.Clone(prop.Record).(*allotpb.LeaseHorizon), promises: map[string]promiseOf{}}
		for _, rid := range resources {
			r, e := l.resources[rid], prop.Record.GetResources()[rid]
			if r == nil || e.GetHoldersUntil() == nil {
				continue
			}
			sr.promises[rid] = promiseOf{set: refHolders(r, now), until: e.GetHoldersUntil().AsTime().UnixNano()}
			if int(e.GetHolders()) != len(sr.promises[rid].set) {
				t.Fatalf("%s: promise of %d holders, from scratch %d", rid, e.GetHolders(), len(sr.promises[rid].set))
			}
		}
		inflight, inflightRec = prop, sr
		durable = append(durable, sr)
	}
	age := 0
	for step := range 500 {
		switch k := rng.IntN(25); {
		case k == 0 && step > 0:
			now -= int64(rng.IntN(200)) * int64(time.Millisecond)
		case k < 3:
			now += int64(rng.IntN(3000)) * int64(time.Millisecond)
		default:
			now += int64(rng.IntN(300)) * int64(time.Millisecond)
		}
		maxNow = max(maxNow, now)
		if rng.IntN(40) == 0 {
			gen++
			set = config.NewSet(gen, []*config.Template{tmpl(rng.IntN(12))}, nil)
		}
		if inflight == nil && rng.IntN(6) == 0 {
			if prop := l.Sweep(now); prop != nil {
				send(prop)
				age = 0
			}
		}
		var asked [][]Slot
		var askedBy []string
		for range rng.IntN(6) {
			id := clients[rng.IntN(len(clients))]
			if rng.IntN(8) == 0 {
				rid := resources[rng.IntN(len(resources))]
				if l.Release(now, id, []string{rid}) > 0 {
					delete(holds, id+"/"+rid)
				}
				continue
			}
			var rs []*allotpb.ResourceRequest
			for _, r := range resources {
				if rng.IntN(2) == 0 {
					continue
				}
				rr := &allotpb.ResourceRequest{ResourceId: r, Wants: float64(rng.IntN(4) * 10), Priority: int32(rng.IntN(3))}
				if h := holds[id+"/"+r]; h.capacity > 0 {
					rr.Has = &allotpb.Lease{Capacity: h.capacity, ExpiryTime: timestamppb.New(time.Unix(0, h.expiry))}
				}
				if h := holds[id+"/"+r]; h.floor > 0 && h.floorEnd > now {
					rr.Safe = &allotpb.Lease{Capacity: h.floor, ExpiryTime: timestamppb.New(time.Unix(0, h.floorEnd))}
				}
				rs = append(rs, rr)
			}
			if len(rs) == 0 {
				continue
			}
			slots, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: id, Resource: rs})
			if err != nil {
				continue
			}
			asked, askedBy = append(asked, slots), append(askedBy, id)
		}
		if prop := l.Propose(now); prop != nil {
			send(prop)
			age = 0
		}
		l.Allocate(now)
		l.EndRound()
		for k, slots := range asked {
			if !Ready(slots) {
				continue
			}
			for _, s := range slots {
				if s.Err != "" {
					continue
				}
				ls := s.Lease(now)
				holds[askedBy[k]+"/"+ls.ResourceID] = heldLease{ls.Capacity, ls.Expiry, ls.SafeCapacity, ls.SafeExpiry}
			}
		}
		// Every live lease a client holds is in every promise that may be
		// stored and still binds (the clock as it was at its latest).
		if now == maxNow {
			for _, sr := range durable {
				for rid, pr := range sr.promises {
					if pr.until <= now {
						continue
					}
					for _, id := range clients {
						if h := holds[id+"/"+rid]; h.capacity > 0 && h.expiry > now && !pr.set[id] {
							t.Fatalf("step %d %s: %s holds %v until %+dms, outside a promise that may be stored (until %+dms) of %v (%s, in flight %v, %d records)",
								step, rid, id, h.capacity, (h.expiry-now)/1e6, (pr.until-now)/1e6, pr.set, l.resources[rid].tmpl.Algorithm, sr == inflightRec, len(durable))
						}
					}
				}
			}
			if rng.IntN(50) == 0 && len(durable) > 0 {
				// A takeover: a successor starts from a record that may be
				// the stored one, and serves the same clients from now on.
				cfg.Term++
				cfg.HolderKey = termHolderKey(cfg.Term)
				l = New(cfg)
				p, err := l.Start(now, Prior{Kind: PriorRecord, Record: durable[rng.IntN(len(durable))].rec})
				if err != nil {
					t.Fatal(err)
				}
				l.Commit(now, p, nil)
				durable, inflight, inflightRec = nil, nil, nil
				takeovers++
			}
			if rng.IntN(10) == 0 && len(durable) > 0 {
				successorCheck(t, step, durable[rng.IntN(len(durable))].rec, cfg, set, now, rng, clients, resources,
					func(id, rid string) heldLease { return holds[id+"/"+rid] })
			}
		}
		if inflight != nil {
			age++
			if rng.IntN(3) == 0 || age > 2 {
				ok := rng.IntN(4) > 0
				var err error
				if !ok {
					err = errTest
				}
				l.Commit(now, inflight, err)
				if ok {
					durable = []*sentRecord{inflightRec}
				}
				inflight, inflightRec = nil, nil
			}
		}
		for _, rid := range resources {
			if r := l.resources[rid]; r != nil {
				if err := checkListed(r, now); err != nil {
					t.Fatalf("step %d %s: %v", step, rid, err)
				}
			}
		}
	}
}

// heldLease is what a client holds of a resource, from the answers it got.
type heldLease struct {
	capacity float64
	expiry   int64
	floor    float64
	floorEnd int64
}

// earlyEnds counts the successor checks made after a learning ended early.
var earlyEnds, takeovers int

// successorCheck starts a successor from rec at now and has the clients
// come back one by one, in random order, each reporting what it holds;
// once a resource's learning ends, every client holding a live lease of
// it must have come back.
func successorCheck(t *testing.T, step int, rec *allotpb.LeaseHorizon, cfg Config, set *config.Set, now int64, rng *rand.Rand,
	clients, resources []string, holding func(id, rid string) heldLease) {
	t.Helper()
	cfg.Term = rec.GetTerm() + 1
	cfg.HolderKey = termHolderKey(cfg.Term)
	s := New(cfg)
	p, err := s.Start(now, Prior{Kind: PriorRecord, Record: rec})
	if err != nil {
		t.Fatal(err)
	}
	s.Commit(now, p, nil)
	order := rng.Perm(len(clients))
	back := map[string]bool{}
	for _, k := range order[:rng.IntN(len(order)+1)] {
		id := clients[k]
		var rs []*allotpb.ResourceRequest
		for _, rid := range resources {
			rr := &allotpb.ResourceRequest{ResourceId: rid, Wants: 10}
			if h := holding(id, rid); h.capacity > 0 {
				rr.Has = &allotpb.Lease{Capacity: h.capacity, ExpiryTime: timestamppb.New(time.Unix(0, h.expiry))}
			}
			if h := holding(id, rid); h.floor > 0 && h.floorEnd > now {
				rr.Safe = &allotpb.Lease{Capacity: h.floor, ExpiryTime: timestamppb.New(time.Unix(0, h.floorEnd))}
			}
			rs = append(rs, rr)
		}
		if _, err := s.Get(now, set, &allotpb.GetCapacityRequest{ClientId: id, Resource: rs}); err != nil {
			continue
		}
		back[id] = true
		if pr := s.Propose(now); pr != nil {
			s.Commit(now, pr, nil)
		}
		s.Allocate(now)
		s.EndRound()
		for _, rid := range resources {
			r := s.resources[rid]
			if r == nil {
				continue
			}
			// The floors of the clients not back yet are still held
			// back, whatever ended learning or released floors.
			var unheard float64
			for _, cid := range clients {
				if h := holding(cid, rid); !back[cid] && h.floor > 0 && h.floorEnd > now {
					unheard += h.floor
				}
			}
			if left := r.predFloorOutstanding(now); unheard > left+1e-9 {
				t.Fatalf("step %d %s: clients not back yet hold floors of %v, but the successor keeps back only %v of its predecessor's",
					step, rid, unheard, left)
			}
			if r.learning(now) || rec.GetResources()[rid].GetHoldersUntil() == nil {
				continue
			}
			earlyEnds++
			for _, cid := range clients {
				if h := holding(cid, rid); h.capacity > 0 && h.expiry > now && !back[cid] {
					c, e := h.capacity, h.expiry
					t.Fatalf("step %d %s: the successor ended learning early, but %s holds %v until %+dms and has not come back",
						step, rid, cid, c, (e-now)/1e6)
				}
			}
		}
	}
}
