package ledger

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// TestPrefetchChangesNothing: the same random history (plain and
// tenants' clients, several resources, unknown resources, releases,
// requests of no client, template changes) served by two ledgers, one
// reading ahead before every batch and from its first record, gives every
// client the same lease and the ledgers the same counts.
func TestPrefetchChangesNothing(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		plain, ahead := prefetchHistory(t, seed, false), prefetchHistory(t, seed, true)
		if plain != ahead {
			t.Fatalf("seed %d: the leases differ with Prefetch:\n%s", seed, firstDiff(plain, ahead))
		}
	}
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range min(len(la), len(lb)) {
		if la[i] != lb[i] {
			return fmt.Sprintf("line %d:\n  without: %s\n  with:    %s", i, la[i], lb[i])
		}
	}
	return fmt.Sprintf("%d lines against %d", len(la), len(lb))
}

// prefetchHistory serves seed's history and returns every lease told and
// the final counts, one per line.
func prefetchHistory(t *testing.T, seed uint64, prefetch bool) string {
	rng := rand.New(rand.NewPCG(seed, 3))
	l := New(Config{HolderKey: termHolderKey(1), Node: "n", ServerID: "s", Term: 1, ClockSkew: time.Second})
	l.prefetchFrom = 0
	now := int64(1e18)
	p, err := l.Start(now, Prior{Kind: PriorNew})
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(now, p, nil)
	set := incrTemplate(rand.New(rand.NewPCG(seed, 4)), 1)
	var out strings.Builder
	whos := []Claimant{{}, {}, {Tenant: "a", User: "u"}, {Tenant: "b", User: "v"}}
	for round := range 200 {
		now += int64(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		if rng.IntN(40) == 0 {
			set = incrTemplate(rng, uint64(round+2))
		}
		type ask struct {
			who Claimant
			req *allotpb.GetCapacityRequest
		}
		var batch []ask
		for range 1 + rng.IntN(30) {
			req := &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("c", rng.IntN(60))}
			if rng.IntN(20) == 0 {
				req.ClientId = ""
			}
			for range 1 + rng.IntN(3) {
				req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: fmt.Sprint("r", rng.IntN(4)),
					Wants: float64(rng.IntN(50)), Priority: int32(rng.IntN(2))})
			}
			batch = append(batch, ask{whos[rng.IntN(len(whos))], req})
		}
		if prefetch {
			l.Prefetch(len(batch)+1, func(i int) (Claimant, *allotpb.GetCapacityRequest) {
				if i == len(batch) {
					return Claimant{}, nil
				}
				return batch[i].who, batch[i].req
			})
		}
		var slots [][]Slot
		for _, a := range batch {
			if rng.IntN(15) == 0 {
				fmt.Fprintf(&out, "release %d\n", l.ReleaseAs(now, a.who, a.req.GetClientId(), []string{a.req.GetResource()[0].GetResourceId()}))
				continue
			}
			s, err := l.GetAs(now, set, a.who, a.req)
			fmt.Fprintf(&out, "get %s %v\n", a.req.GetClientId(), err)
			slots = append(slots, s)
		}
		if p := l.Propose(now); p != nil {
			l.Commit(now, p, nil)
		}
		l.Allocate(now)
		for _, ss := range slots {
			for _, s := range ss {
				if s.r == nil {
					fmt.Fprintf(&out, "  refused %d %s\n", s.Code, s.Err)
					continue
				}
				fmt.Fprintf(&out, "  %+v\n", s.Lease(now))
			}
		}
		l.EndRound()
	}
	fmt.Fprintf(&out, "%+v records %d\n", l.Stats(), l.records)
	return out.String()
}

// Prefetch reads nothing it should not: with no records, below the
// threshold, with nil requests and unknown resources it does nothing, and
// it keeps nothing of a batch once done.
func TestPrefetchOddInput(t *testing.T) {
	l := New(Config{HolderKey: termHolderKey(1), Node: "n", ServerID: "s", Term: 1})
	nothing := func(int) (Claimant, *allotpb.GetCapacityRequest) { return Claimant{}, nil }
	l.Prefetch(3, nothing) // below the threshold
	l.prefetchFrom = 0
	l.Prefetch(3, nothing)
	l.Prefetch(0, nil)
	set := config.NewSet(1, []*config.Template{{Name: "t", Glob: "*", Capacity: 10, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: time.Minute, RefreshInterval: 10 * time.Second}}, nil)
	now := int64(1e18)
	p, err := l.Start(now, Prior{Kind: PriorNew})
	if err != nil {
		t.Fatal(err)
	}
	l.Commit(now, p, nil)
	if _, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: "a", Resource: []*allotpb.ResourceRequest{{ResourceId: "r", Wants: 1}}}); err != nil {
		t.Fatal(err)
	}
	l.Prefetch(4, func(i int) (Claimant, *allotpb.GetCapacityRequest) {
		return Claimant{}, []*allotpb.GetCapacityRequest{nil, {}, {ClientId: "a", Resource: []*allotpb.ResourceRequest{{ResourceId: "r"}, {ResourceId: "gone"}, nil}},
			{ClientId: "zz", Resource: []*allotpb.ResourceRequest{{ResourceId: "r"}}}}[i]
	})
	if len(l.prefetch) != 0 || cap(l.prefetch) == 0 {
		t.Fatalf("working list %d of %d after Prefetch, want emptied and kept", len(l.prefetch), cap(l.prefetch))
	}
}
