package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/proto/allotpb"
)

// A holder's round while a newcomer naming 1,000 resources waits for its
// record does none of the newcomer's work with Defer: it builds no record
// (that costs every resource of the node) and leaves the newcomer's
// resources waiting, even once the write that covers them is done, for
// a settling round to allocate. Propose, which the holders' round used to
// call, does both in the holder's round. Either way the holder is
// answered in its round and the newcomer after the settling round, with
// the same grants.
func TestDeferLeavesNewcomersWorkOutOfAHoldersRound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deferred bool
	}{{"Propose", false}, {"Defer", true}} {
		t.Run(tc.name, func(t *testing.T) {
			set := fairTemplate(100)
			now := int64(1e18)
			l := New(Config{Node: "root", ServerID: "root", Term: 1})
			p, _ := l.Start(now, Prior{Kind: PriorNew})
			l.Commit(now, p, nil)
			now += int64(10 * time.Second) // past learning
			get := func(id string, res ...string) []Slot {
				t.Helper()
				req := &allotpb.GetCapacityRequest{ClientId: id}
				for _, r := range res {
					req.Resource = append(req.Resource, &allotpb.ResourceRequest{ResourceId: r, Wants: 10})
				}
				slots, err := l.Get(now, set, req)
				if err != nil {
					t.Fatal(err)
				}
				return slots
			}
			// The holder's first grant waits for the record that lists it.
			holder := get("h", "good")
			if p := l.Propose(now); p != nil {
				l.Allocate(now)
				l.EndRound()
				l.Commit(now, p, nil)
			}
			l.Propose(now)
			l.Allocate(now)
			l.EndRound()
			if !Ready(holder) || holder[0].Lease(now).Capacity <= 0 {
				t.Fatalf("the holder holds %+v", holder[0].Lease(now))
			}

			// The newcomer's pass: its resources wait for a record, which the
			// record pass builds.
			now += int64(time.Millisecond)
			big := make([]string, 1000)
			for k := range big {
				big[k] = fmt.Sprint("big-", k)
			}
			newcomer := get("n", big...)
			if !l.Defer(now, false) {
				t.Fatal("the newcomer's resources want no record")
			}
			l.Allocate(now)
			l.EndRound()
			if Ready(newcomer) {
				t.Fatal("the newcomer is answered before a record lists its resources")
			}
			p = l.Propose(now)
			if p == nil || len(p.Record.GetResources()) < len(big) {
				t.Fatal("no record of the newcomer's resources proposed")
			}
			l.Allocate(now)
			l.EndRound()
			l.Commit(now, p, nil)

			// The holder's refresh, in the round the write's outcome runs.
			now += int64(time.Millisecond)
			holder = get("h", "good")
			if tc.deferred {
				l.Defer(now, false)
			} else {
				l.Propose(now)
			}
			l.Allocate(now)
			l.EndRound()
			if !Ready(holder) || holder[0].Lease(now).Capacity <= 0 {
				t.Fatalf("the holder's refresh is not answered in its round: %+v", holder[0].Lease(now))
			}
			if got, want := Ready(newcomer), !tc.deferred; got != want {
				t.Errorf("the newcomer is settled in the holder's round: %v, want %v", got, want)
			}
			if l.Inflight() {
				t.Error("the holder's round built a record")
			}

			// The settling round answers the newcomer.
			if l.Defer(now, true) {
				t.Error("a record is wanted after the newcomer's was written")
			}
			l.Allocate(now)
			l.EndRound()
			if !Ready(newcomer) || l.Pending() {
				t.Fatalf("the newcomer is not answered after its record (pending %v)", l.Pending())
			}
			for k, s := range newcomer {
				if ls := s.Lease(now); ls.Capacity != 10 {
					t.Fatalf("the newcomer holds %v of %s, want 10", ls.Capacity, big[k])
				}
			}
		})
	}
}
