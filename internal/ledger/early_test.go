package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/proto/allotpb"
)

// A holder that refreshes steadily never waits for a record write, even
// when every write queues behind a newcomer's that is slow to finish (a
// flood): the recorded expiries of its resource, lease and floor, are
// raised early, by a write before its grants need them. Before, its
// refresh waited for a write each time its lease outran the recorded
// expiry, and under a flood that write came after the newcomers'.
func TestSteadyHolderNeverWaitsForARecord(t *testing.T) {
	set := fairTemplate(100) // leases of 5s, floors of 20s
	now := int64(1e18)
	l := New(Config{Node: "root", ServerID: "root", Term: 1})
	p, _ := l.Start(now, Prior{Kind: PriorNew})
	l.Commit(now, p, nil)
	now += int64(10 * time.Second) // past learning
	const step = 100 * time.Millisecond
	var inflight *Proposal
	var doneAt int64
	waited, refreshes := 0, 0
	var holder []Slot
	for i := range 600 { // a minute
		now += int64(step)
		if inflight != nil && now >= doneAt {
			l.Commit(now, inflight, nil)
			inflight = nil
		}
		if i%10 == 0 {
			// A newcomer each second, whose write takes 1.5s.
			if _, err := l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: fmt.Sprint("n-", i),
				Resource: []*allotpb.ResourceRequest{{ResourceId: "x", Wants: 1}}}); err != nil {
				t.Fatal(err)
			}
		}
		asked := i%5 == 0 // the holder refreshes every half second
		if asked {
			var err error
			if holder, err = l.Get(now, set, &allotpb.GetCapacityRequest{ClientId: "h",
				Resource: []*allotpb.ResourceRequest{{ResourceId: "good", Wants: 10}}}); err != nil {
				t.Fatal(err)
			}
		}
		if p := l.Propose(now); p != nil {
			inflight, doneAt = p, now+int64(1500*time.Millisecond)
		}
		l.Allocate(now)
		l.EndRound()
		if asked && i >= 50 { // once its first grant is recorded
			refreshes++
			if !Ready(holder) {
				waited++
			}
		}
	}
	if waited > 0 {
		t.Errorf("the holder waited for a record write in %d of its %d refreshes", waited, refreshes)
	}
}
