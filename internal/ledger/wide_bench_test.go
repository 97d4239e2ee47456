package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/proto/allotpb"
)

// BenchmarkWideNewcomer is the round of one new client naming 1,000
// resources that 200 clients each already hold: what a holder's refresh
// queued behind such a request waits.
func BenchmarkWideNewcomer(b *testing.B) {
	set := fairTemplate(100)
	l, now := servingLedger()
	wide := func(id string) *allotpb.GetCapacityRequest {
		rs := make([]*allotpb.ResourceRequest, 1000)
		for k := range rs {
			rs[k] = &allotpb.ResourceRequest{ResourceId: fmt.Sprint("big-", k), Wants: 1}
		}
		return &allotpb.GetCapacityRequest{ClientId: id, Resource: rs}
	}
	// As the coordinator runs them: the request's round proposes the
	// record that lists the newcomer, the write's outcome runs another
	// round, which grants.
	round := func(req *allotpb.GetCapacityRequest) {
		slots, err := l.Get(now, set, req)
		if err != nil {
			b.Fatal(err)
		}
		for range 2 {
			p := l.Propose(now)
			l.Allocate(now)
			l.EndRound()
			if p != nil {
				l.Commit(now, p, nil)
			}
		}
		if !Ready(slots) {
			b.Fatal("the newcomer waits after its record was written")
		}
	}
	for i := range 200 {
		round(wide(fmt.Sprint("c-", i)))
	}
	reqs := make([]*allotpb.GetCapacityRequest, 64)
	for i := range reqs {
		reqs[i] = wide(fmt.Sprint("n-", i))
	}
	for i := 0; b.Loop(); i++ {
		now += int64(time.Millisecond)
		round(reqs[i%len(reqs)])
	}
}

// servingLedger is a root ledger of a new deployment (with a holder key,
// room for 4M clients) and a time past its learning.
func servingLedger() (*Ledger, int64) {
	now := int64(1e18)
	l := New(Config{HolderKey: testHolderKey(), Node: "root", ServerID: "root", Term: 1, MaxClients: 1 << 22})
	p, _ := l.Start(now, Prior{Kind: PriorNew})
	l.Commit(now, p, nil)
	return l, now + int64(10*time.Second)
}
