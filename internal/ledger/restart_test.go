package ledger

import (
	"fmt"
	"testing"
	"time"
)

// A leader dies while its clients refresh steadily, and a successor takes
// over from its record after every lease has lapsed but before the
// recorded latest expiry plus the clock skew, as when a parent level is
// restarted (its NATS server and coordinator killed and started again on
// the same data). Every holder the record promised comes back and
// reports the lease it held: the successor must hand out what the demand
// allows within two refresh intervals, whatever the moment of the death
// within the record's cycle. Before, the holder promise lasted until the
// recorded latest expiry, but a successor heeds it only if it took over
// a clock skew before that, while it learns until a clock skew after:
// one that took over between the two kept the whole ceiling back until
// learning ended. Raising the recorded expiry early (so that refreshes
// never wait for a write) put the latest expiry later in its cycle, and
// such a restart into that gap every time.
func TestRestartAfterLapseHandsOutOnceHoldersHeard(t *testing.T) {
	const (
		capacity = 100.0
		wants    = 50.0
	)
	ids := []string{"a", "b", "c"}
	// Deaths at every 100 ms of a lease length, so at every phase of the
	// record's writes.
	for phase := range 50 {
		t.Run(fmt.Sprint("death+", phase*100, "ms"), func(t *testing.T) {
			w := &writeRounds{t: t, set: fairTemplate(capacity), now: int64(1e18), floors: true}
			w.start(1)
			held := make(map[string]Lease)
			refresh := func() {
				for _, id := range ids {
					held[id] = w.ask(id, wants, held[id], false)
					w.now += int64(50 * time.Millisecond)
				}
			}
			// Steady refreshes every second, then the death.
			died := w.now + int64(30*time.Second) + int64(phase)*int64(100*time.Millisecond)
			for w.now < died-int64(time.Second) {
				refresh()
				// The coordinator's sweep, every second: it lowers the
				// recorded floor ceiling to what the floors need.
				if p := w.l.Sweep(w.now); p != nil {
					w.l.Commit(w.now, p, nil)
					w.stored = p.Record
				}
				w.now += int64(time.Second) - 3*int64(50*time.Millisecond)
			}
			// Longer than a lease: every lease has lapsed, floors run on.
			w.now = died + int64(8400*time.Millisecond)
			w.start(2)
			for range 3 { // at the takeover, and two refresh intervals after
				refresh()
				w.now += int64(time.Second) - 3*int64(50*time.Millisecond)
			}
			got := 0.0
			for _, id := range ids {
				if ls := held[id]; ls.Expiry > w.now {
					got += ls.Capacity
				}
			}
			if got < 0.9*capacity {
				r := w.l.resources["r"]
				t.Errorf("%.1f of %v handed out two refresh intervals after the takeover (learning %v, until %v after the death; withheld %.1f)",
					got, capacity, r.learning(w.now), time.Duration(r.learningUntil-died), r.predOutstanding(w.now))
			}
		})
	}
}
