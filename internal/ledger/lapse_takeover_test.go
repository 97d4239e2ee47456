package ledger

import (
	"fmt"
	"testing"
	"time"

	"github.com/allot/allot/internal/config"
	"github.com/allot/allot/proto/allotpb"
)

// A first leader grants twenty clients one each of a resource of a
// million, and dies; every lease lapses before a successor takes over
// (an outage longer than a lease, with no clock skew configured), at
// times before, around and well after the end of the predecessor's
// holder promise. The clients come back reporting their lapsed leases
// and floors, as agents do: within two refresh intervals of the takeover
// each holds its one again. The successor may learn (until a lease
// length after the takeover at most), but twenty units held of a
// million leave nearly all of it free, and the floors' recorded expiry,
// minutes later, binds only the floors: nothing withholds the leases
// until then. The test fails if learning hands out nothing new and
// hearing every holder does not end it (Doorman's rule).
func TestSuccessorAfterLapseServesEveryClient(t *testing.T) {
	const clients = 20
	tm := &config.Template{Name: "t", Glob: "*", Capacity: 1e6, Algorithm: allotpb.Algorithm_FAIR_SHARE,
		LeaseLength: 4 * time.Second, RefreshInterval: 500 * time.Millisecond, LearningModeDuration: 4 * time.Second,
		Floor: config.DefaultFloor()}
	for _, tc := range []struct {
		gap    time.Duration
		floors bool
	}{
		{4500 * time.Millisecond, true}, {4800 * time.Millisecond, true}, {6 * time.Second, true}, {9 * time.Second, true},
		{12 * time.Second, true}, {30 * time.Second, true}, {2 * time.Minute, true}, {6 * time.Minute, true},
		// Clients that report no floor have none to be given back as a
		// lease: what they get while learning runs is what it leaves
		// free, or the end of learning once every holder is heard.
		{4500 * time.Millisecond, false}, {6 * time.Second, false}, {9 * time.Second, false},
	} {
		gap := tc.gap
		t.Run(fmt.Sprint("takeover+", gap, "/floors=", tc.floors), func(t *testing.T) {
			w := &writeRounds{t: t, set: config.NewSet(1, []*config.Template{tm}, nil), now: int64(1e18), floors: tc.floors, skew: -1}
			w.start(1)
			held := make(map[string]Lease)
			refresh := func() {
				for c := range clients {
					id := fmt.Sprint("agent-", c)
					held[id] = w.ask(id, 1, held[id], false)
					w.now += int64(10 * time.Millisecond)
				}
			}
			// Six seconds of steady refreshes, with the sweep every second.
			start := w.now
			for w.now < start+int64(6*time.Second) {
				refresh()
				if p := w.l.Sweep(w.now); p != nil {
					w.l.Commit(w.now, p, nil)
					w.stored = p.Record
				}
				w.now += int64(300 * time.Millisecond)
			}
			died := w.now
			for id, ls := range held {
				if ls.Capacity != 1 {
					t.Fatalf("%s holds %+v before the death: the test needs every lease granted", id, ls)
				}
				if ls.Expiry > died+int64(gap) {
					t.Fatalf("%s's lease ends %v after the death: the test needs it lapsed at the takeover", id, time.Duration(ls.Expiry-died))
				}
			}
			w.now = died + int64(gap)
			w.start(2)
			for range 3 { // at the takeover, and two refresh intervals after
				refresh()
				w.now += int64(500*time.Millisecond) - clients*int64(10*time.Millisecond)
			}
			r := w.l.resources["r"]
			for id, ls := range held {
				if ls.Capacity != 1 || ls.Expiry <= w.now {
					t.Errorf("%s holds %+v two refresh intervals after the takeover (now %v; learning %v, withheld %v, floors withheld %v)",
						id, ls, w.now, r.learning(w.now), r.predOutstanding(w.now), r.predFloorOutstanding(w.now))
				}
			}
		})
	}
}
