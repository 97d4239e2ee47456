package ledger

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// refPromise is the reference model of a resource's holder promises: the
// sets built from scratch on every write, as a map each, and combined as
// the proof in holders.go states.
type refPromise struct {
	set       map[string]bool
	until     int64
	inflight  bool
	pendSet   map[string]bool
	pendUntil int64
}

func (p *refPromise) mayHold(id string, now int64) bool {
	if p.inflight && p.pendUntil > now && !p.pendSet[id] {
		return false
	}
	return p.until <= now || p.set[id]
}

func (p *refPromise) settle(now int64, ok bool) {
	if !p.inflight {
		return
	}
	switch {
	case ok || p.until <= now:
		p.set, p.until = p.pendSet, p.pendUntil
	case p.pendUntil > now:
		both := map[string]bool{}
		for id := range p.set {
			if p.pendSet[id] {
				both[id] = true
			}
		}
		p.set, p.until = both, max(p.until, p.pendUntil)
	}
	p.inflight, p.pendSet, p.pendUntil = false, nil, 0
}

// refHolders is the set a snapshot taken now lists, from scratch.
func refHolders(r *resource, now int64) map[string]bool {
	set := map[string]bool{}
	for i := range r.clients.len() {
		c := r.clients.at(i)
		if c.leaseExposure(now) > 0 || c.touched() && c.wants > 0 {
			set[c.id] = true
		}
	}
	return set
}

// The holder promises a ledger keeps incrementally list exactly the
// clients a from-scratch pass finds (count, digest, ids), and never let
// a client be granted that the from-scratch model of the same writes
// would hold back, over random histories of asks, releases, reports,
// writes that succeed, fail or stay in flight, a clock that jumps ahead
// and, rarely, back, and snapshot numbers that run out.
func TestHolderPromisesMatchReference(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { holderTrial(t, seed) })
	}
}

func holderTrial(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 2 * time.Second, RefreshInterval: 500 * time.Millisecond, LearningModeDuration: time.Second}
	set := config.NewSet(1, []*config.Template{tm}, nil)
	now := int64(1e18)
	l := New(Config{HolderKey: testHolderKey(), Node: "n", ServerID: "s", Term: 1})
	p, err := l.Start(now, Prior{Kind: PriorNew})
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(now, p, nil)
	resources := []string{"r0", "r1", "r2"}
	clients := make([]string, 12)
	for i := range clients {
		clients[i] = fmt.Sprint("c", i)
	}
	ref := map[string]*refPromise{}
	for _, r := range resources {
		ref[r] = &refPromise{}
	}
	// What each client holds, per resource, from the answers it got.
	type held struct {
		capacity float64
		expiry   int64
	}
	holds := map[string]held{}
	var inflight *Proposal
	age, stricter, checks := 0, 0, 0
	defer func() { t.Logf("stricter %d of %d", stricter, checks) }()
	for step := range 400 {
		switch k := rng.IntN(20); {
		case k == 0 && step > 0:
			now -= int64(rng.IntN(200)) * int64(time.Millisecond) // a clock stepped back
		case k < 3:
			now += int64(rng.IntN(3000)) * int64(time.Millisecond)
		default:
			now += int64(rng.IntN(300)) * int64(time.Millisecond)
		}
		var asked [][]Slot
		var askedBy []string
		for range rng.IntN(5) {
			id := clients[rng.IntN(len(clients))]
			if rng.IntN(8) == 0 {
				l.Release(now, id, []string{resources[rng.IntN(len(resources))]})
				continue
			}
			var rs []*allotpb.ResourceRequest
			for _, r := range resources {
				if rng.IntN(2) == 0 {
					continue
				}
				rr := &allotpb.ResourceRequest{ResourceId: r, Wants: float64(rng.IntN(4) * 10)}
				if h := holds[id+"/"+r]; h.capacity > 0 && rng.IntN(4) > 0 {
					rr.Has = &allotpb.Lease{Capacity: h.capacity, ExpiryTime: timestamppb.New(time.Unix(0, h.expiry))}
				}
				rs = append(rs, rr)
			}
			if len(rs) == 0 {
				continue
			}
			slots, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: id, Resource: rs})
			if err != nil {
				continue // e.g. a client asking twice in a round
			}
			asked, askedBy = append(asked, slots), append(askedBy, id)
		}
		if seed%2 == 1 {
			// Half the trials number their snapshots from just below
			// the top, so that the numbers run out and start again.
			for _, rid := range resources {
				if r := l.resources[rid]; r != nil && r.hold.seq == 0 {
					r.hold.seq = math.MaxUint32 - 3
				}
			}
		}
		if prop := l.Propose(now); prop != nil {
			inflight, age = prop, 0
			for _, rid := range resources {
				rp, r := ref[rid], l.resources[rid]
				rp.inflight, rp.pendSet, rp.pendUntil = true, nil, 0
				e := prop.Record.GetResources()[rid]
				if r == nil || e.GetHoldersUntil() == nil {
					continue
				}
				want := refHolders(r, now)
				var digest uint64
				for id := range want {
					digest += holderHash(r.hold.key, id)
				}
				if k := prop.Record.GetHoldersKey(); len(k) != HolderKeySize || [HolderKeySize]byte(k) != l.cfg.HolderKey {
					t.Fatalf("step %d: record with a promise carries holders key %x, want the leader's", step, k)
				}
				if int(e.GetHolders()) != len(want) || e.GetHoldersDigest() != digest {
					t.Fatalf("step %d %s: promise of %d holders (digest %x), from scratch %d (%x)", step, rid, e.GetHolders(), e.GetHoldersDigest(), len(want), digest)
				}
				if ids := e.GetHolderIds(); ids != nil {
					wantIDs := make([]string, 0, len(want))
					for id := range want {
						wantIDs = append(wantIDs, id)
					}
					slices.Sort(wantIDs)
					if !slices.Equal(ids, wantIDs) {
						t.Fatalf("step %d %s: holder ids %v, from scratch %v", step, rid, ids, wantIDs)
					}
				}
				rp.pendSet, rp.pendUntil = want, e.GetHoldersUntil().AsTime().UnixNano()
			}
		}
		// Never more permissive than the model, for known and unknown
		// clients alike.
		for _, rid := range resources {
			r := l.resources[rid]
			if r == nil {
				continue
			}
			for _, id := range append(clients, "stranger") {
				got, want := r.mayHold(id, now), ref[rid].mayHold(id, now)
				if got && !want {
					t.Fatalf("step %d %s: %s may be granted; the from-scratch promises hold it back", step, rid, id)
				}
				if want && !got {
					stricter++
				}
				checks++
			}
		}
		l.Allocate(now)
		l.EndRound()
		for k, slots := range asked {
			if !Ready(slots) {
				continue
			}
			for _, s := range slots {
				if ls := s.Lease(now); s.Err == "" {
					holds[askedBy[k]+"/"+ls.ResourceID] = held{ls.Capacity, ls.Expiry}
				}
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
				for _, rid := range resources {
					ref[rid].settle(now, ok)
				}
				inflight = nil
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
