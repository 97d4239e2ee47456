package ledger

import (
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// A takeover soon after a demand shift, while the record still counts the
// large floor the first client had (the sweep that lowers the recorded
// floor ceiling has not written yet): once every promised holder has come
// back and reported the floor it holds, the successor keeps back only the
// floors of clients outside the promise (none here), not the recorded
// floor ceiling less the floors reported until the floor lease ends,
// minutes later.
func TestSuccessorReleasesFloorsOnceAllHoldersHeard(t *testing.T) {
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 100, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 10 * time.Second, RefreshInterval: time.Second, LearningModeDuration: 10 * time.Second,
		Floor: config.FloorPolicy{Share: 0.5, Lease: 5 * time.Minute}}
	w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: int64(1e18), floors: true}
	held := map[string]Lease{} // what each client holds, from its answers
	ask := func(id string, wants float64) Lease {
		held[id] = w.ask(id, wants, held[id], false)
		return held[id]
	}
	w.start(1)
	if got := ask("a", 100); got.SafeCapacity < 40 {
		t.Fatalf("a alone got floor %v: the test needs a large first floor", got.SafeCapacity)
	}
	// Demand shifts: a wants less, three more clients come.
	for _, id := range []string{"b", "c", "d"} {
		w.now += int64(100 * time.Millisecond)
		ask(id, 10)
	}
	// A few refreshes: a gives back, the others get their shares and
	// floors. The record's floor ceiling comes down only at the next
	// sweep's write, which the leader does not live to make.
	for range 3 {
		for _, id := range []string{"a", "b", "c", "d"} {
			w.now += int64(100 * time.Millisecond)
			ask(id, 10)
		}
	}
	rec := w.stored.GetResources()["r"]
	var told float64
	for id, h := range held {
		if h.Capacity != 10 || h.SafeCapacity != 10 {
			t.Fatalf("%s holds %+v: the test needs the shares settled", id, h)
		}
		told += h.SafeCapacity
	}
	if rec.GetFloorCeiling() < told+20 || rec.GetHoldersUntil() == nil {
		t.Fatalf("record %v: the test needs a floor ceiling well above the floors held (%v) and a holder promise", rec, told)
	}

	// The leader dies; a successor takes over from the stored record.
	w.now += int64(3 * time.Second)
	w.start(2)
	for _, id := range []string{"a", "b", "c", "d"} {
		ask(id, 10)
	}
	r := w.l.resources["r"]
	if r.learning(w.now) {
		t.Fatalf("learning still runs after every promised holder came back")
	}
	if left := r.predFloorOutstanding(w.now); left > 1e-9 {
		t.Fatalf("after every promised holder came back reporting its floor, %v of the predecessor's floors is still held back (recorded ceiling %v, floors held %v)",
			left, rec.GetFloorCeiling(), told)
	}
	if got := ask("e", 100).Capacity; got < 60-1e-9 {
		t.Fatalf("a newcomer wanting 100 got %v once the successor heard every holder: want the 60 the four leave", got)
	}
}
